//! Cleanup's release of the fences: settle every member not provably held (a fence write may
//! have been abandoned in flight), then release targets before parents.

use std::time::Duration;

use flux_fence::ObjectRef;
use flux_fence::mark::MarkAt;

use super::Event;
use crate::cancel::Cancel;
use crate::handoff::{Chain, Handoff, SuspendError};

/// Whether a pause that failed with `e` may have left a fence write of ours with no known
/// outcome (its answer lost, and not settled): then cleanup settles every unheld member as
/// after an abandoned pause — moves it on with a CAS of ours, or keeps the Lease and names
/// it — instead of trusting one re-read. An answer of the server (refused, rejected,
/// forbidden, a timeout of a wait) settles every write sent before it; a lost answer, a
/// failed settlement (contended) or a broken connection does not.
pub(super) fn may_leave_write_unsettled(e: &SuspendError) -> bool {
    use flux_fence::FenceError as F;
    match e {
        SuspendError::Fence { source, .. } => {
            matches!(source, F::Contended { .. } | F::Api { .. })
        }
        SuspendError::Kube { .. } => true,
        _ => false,
    }
}

/// What releasing the fences came to.
#[derive(Debug, Default)]
pub(super) struct Settlement {
    /// What was released.
    pub(super) released: Vec<ObjectRef>,
    /// Why not everything was, one line each.
    pub(super) problems: Vec<String>,
    /// What may still be held.
    pub(super) held: Vec<ObjectRef>,
    /// Each release withheld because another writer changed a mark: the object and the mark.
    pub(super) withheld: Vec<(ObjectRef, MarkAt)>,
    /// Members whose fence write may still land (its answer lost, its settlement failed).
    pub(super) unsettled: Vec<ObjectRef>,
}

/// Settles the chain's unheld members, then releases everything held.
///
/// After an `abandoned` pause a fence write may still be in flight, so each unheld member is
/// settled with [`flux_fence::Fencer::settle_unheld`] (a CAS of ours moves it on, so the
/// abandoned write can never land later). Otherwise every write of the pause returned, and one
/// re-read finds a fence of ours ([`flux_fence::Fencer::adopt_recorded`]) — no write on an
/// object the run never fenced (a refusal changes nothing).
pub(super) async fn release_fences(
    mut h: Handoff,
    chains: &[Chain],
    abandoned: bool,
    progress: &mut impl FnMut(Event),
) -> Settlement {
    let mut released = Vec::new();
    let mut problems = Vec::new();
    let mut held = Vec::new();
    let mut withheld = Vec::new();
    let mut unsettled = Vec::new();
    let fencer = h.fencer().clone();
    let mut stray = Vec::new();
    for obj in members(chains) {
        if h.holds(obj) {
            continue;
        }
        let settled = if abandoned {
            fencer.settle_unheld(obj).await
        } else {
            fencer.adopt_recorded(obj, fencer.owner()).await
        };
        match settled {
            Ok(Some(g)) => stray.push(g),
            Ok(None) => {}
            Err(e) if abandoned => {
                problems.push(format!(
                    "{obj} unsettled: a fence write whose answer was lost may still land ({})",
                    flux_fence::one_line(&e)
                ));
                held.push(obj.clone());
                unsettled.push(obj.clone());
            }
            Err(e) => {
                problems.push(format!("{obj} could not be settled: {e}"));
                held.push(obj.clone());
            }
        }
    }
    h.absorb(stray);
    match h.resume(None).await {
        Ok(r) => {
            for o in r.released {
                progress(released_event(&o, &r.kept_resume));
                released.push(o);
            }
        }
        Err(e) => {
            if let SuspendError::Withheld { object, at } = &e {
                withheld.push(((**object).clone(), at.clone()));
            }
            problems.push(flux_fence::one_line(&e));
        }
    }
    if h.holds_anything() {
        held.splice(0..0, h.leave_paused());
    }
    Settlement {
        released,
        problems,
        held,
        withheld,
        unsettled,
    }
}

/// The progress event of `o`'s release: it kept another writer's resume when it is in
/// `kept_resume` (their `flux resume`, [`Event::ReleasedKeepingResume`]).
pub(super) fn released_event(o: &ObjectRef, kept_resume: &[ObjectRef]) -> Event {
    if kept_resume.contains(o) {
        Event::ReleasedKeepingResume(o.clone())
    } else {
        Event::Released(o.clone())
    }
}

/// How long cleanup may take once the session was stopped (a signal, a runner's cancel): a
/// stopped run must end, not retry its releases for minutes against an API server that does
/// not answer. What is not released by then is reported as perhaps still held, and the Lease
/// stays held with it (recovery takes over after the holder's full duration).
pub(super) const CLEANUP_AFTER_STOP: Duration = Duration::from_secs(10);

/// How long cleanup may still take once the session was hurried (a second signal): a CI
/// runner sends SIGKILL 2.5 s after its SIGTERM, so cleanup is cut in time to say what it left.
pub(super) const CLEANUP_AFTER_HURRY: Duration = Duration::from_secs(2);

/// Resolves when cleanup must give up, with why in words: `budget` after cleanup began when
/// set (after a self-fence); otherwise [`CLEANUP_AFTER_STOP`] after `cancel` was stopped (from
/// now when it already is) or [`CLEANUP_AFTER_HURRY`] after it was hurried, whichever comes
/// first. Never resolves for a session nobody stops.
pub(super) async fn cleanup_cut(cancel: Cancel, budget: Option<Duration>) -> String {
    if let Some(budget) = budget {
        tokio::time::sleep(budget).await;
        return format!(
            "the API server did not answer the releases within {}s after the holder fenced itself",
            budget.as_secs()
        );
    }
    let after_stop = async {
        cancel.stopped().await;
        tokio::time::sleep(CLEANUP_AFTER_STOP).await;
        format!(
            "the releases did not finish within {}s of the stop",
            CLEANUP_AFTER_STOP.as_secs()
        )
    };
    let after_hurry = async {
        cancel.hurried().await;
        tokio::time::sleep(CLEANUP_AFTER_HURRY).await;
        format!(
            "the releases did not finish within {}s of the second signal",
            CLEANUP_AFTER_HURRY.as_secs()
        )
    };
    tokio::select! {
        why = after_stop => why,
        why = after_hurry => why,
    }
}

/// What a release cut short (`why`) may have left: every member of the chain, targets first.
pub(super) fn cut_short(chains: &[Chain], why: String) -> Settlement {
    Settlement {
        problems: vec![why],
        held: members(chains).cloned().collect(),
        ..Settlement::default()
    }
}

/// Targets, then parents.
fn members(chains: &[Chain]) -> impl Iterator<Item = &ObjectRef> {
    chains
        .iter()
        .map(|c| &c.target)
        .chain(chains.iter().filter_map(|c| c.parent.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flux_fence::FenceError;

    #[test]
    fn unsettled_a_pause_failing_on_a_lost_answer_settles_before_the_lease_goes() {
        let api = || {
            kube::Error::Api(
                kube::core::Status::failure("gateway timeout", "Timeout")
                    .with_code(504)
                    .boxed(),
            )
        };
        let fence = |source| SuspendError::Fence {
            step: "fencing",
            source,
        };
        let table = [
            (
                fence(FenceError::Contended {
                    what: "settling an abandoned fence write",
                }),
                true,
            ),
            (
                fence(FenceError::Api {
                    verb: "get",
                    resource: "kustomizations.kustomize.toolkit.fluxcd.io".into(),
                    target: "ns/app".into(),
                    source: Box::new(api()),
                }),
                true,
            ),
            (
                SuspendError::Kube {
                    step: "requesting a reconcile",
                    source: api(),
                },
                true,
            ),
            // The server answered: every write sent before it has a known outcome.
            (
                fence(FenceError::Forbidden {
                    verb: "patch",
                    resource: "kustomizations.kustomize.toolkit.fluxcd.io".into(),
                    target: "ns/app".into(),
                    source: Box::new(api()),
                }),
                false,
            ),
            (fence(FenceError::InvalidReason { why: "too long" }), false),
            (
                SuspendError::Invalid {
                    step: "pausing",
                    detail: "no".into(),
                },
                false,
            ),
        ];
        for (e, want) in table {
            assert_eq!(may_leave_write_unsettled(&e), want, "{e:?}");
        }
    }
}
