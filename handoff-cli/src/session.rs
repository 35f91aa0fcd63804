//! The CLI side of a handoff session: its [`Plan`] started, the library's events into phase
//! lines, its errors into exit codes. The session itself — preflight, Lease,
//! fences, proof, cleanup on every path — is `flux_suspend::Session`.

use flux_suspend::Members;
use flux_suspend::handoff::SuspendError;
use flux_suspend::steps::Step;
use flux_suspend::{Cancel, Event, Session, SessionError};
use handoff_app::settings::Plan;
use kube::Client;

use crate::exit;
use crate::failure::{Failure, chain};
use crate::output::Output;
use handoff_app::next::{Hints, next_step, with_next};

/// Starts the session of `plan` (waiting for the Lease as it says) and prints the Lease line.
pub async fn start(
    client: Client,
    plan: Plan,
    cancel: Cancel,
    out: &mut Output,
    hints: &Hints,
) -> Result<Session, Failure> {
    let (opts, wait) = (plan.options, plan.lease_wait);
    let lease = opts.lease.to_string();
    let reason = opts.reason.clone();
    out.stage("pause");
    // From here something may be held until the session's cleanup says otherwise.
    out.cleanup_complete(false);
    // Boxed: the wait keeps a session's start inside it.
    let started = Box::pin(Session::start_waiting(client, opts, cancel, wait, |w| {
        out.note(&w.line());
    }))
    .await;
    let session = started.map_err(|e| {
        // A start that wrote nothing holds nothing (a refusal, a read, an early cancel).
        let nothing = e.changed_nothing() || matches!(e, SessionError::LeaseHeld { .. });
        out.cleanup_complete(nothing);
        failure(&e, hints)
    })?;
    for r in session.recovered() {
        out.phase(&r.to_string());
    }
    if !session.recovered().is_empty() {
        out.fact("recovered", serde_json::json!(session.recovered()));
    }
    out.fact("holder", serde_json::json!(session.holder().to_string()));
    crate::notify::session(out, &session.holder().to_string(), reason.as_deref());
    out.phase(&format!(
        "lease acquired: {lease} (holder {}, epoch {})",
        session.holder(),
        session.epoch()
    ));
    Ok(session)
}

/// Prints an event: a finished step or release as a phase line, a wait that goes on as a note
/// (it finishes nothing).
pub fn report(out: &mut Output, event: &Event, members: &Members) {
    crate::notify::on_event(out, event, members);
    let line = event.line(members);
    match event {
        Event::Waiting(w) => {
            out.waiting(&line);
            // Once per wait: the first report past half of its budget.
            let half = w.budget / 2;
            if w.waited >= half
                && w.waited.saturating_sub(flux_suspend::steps::WAITING_EVERY) < half
            {
                out.warning(&format!("past half of its budget: {line}"));
            }
        }
        // A parked Lease ends the pause stage; releasing is the resume stage.
        Event::Released(_) | Event::ReleasedKeepingResume(_) | Event::LeaseReleased => {
            out.stage("resume");
            out.phase(&line);
        }
        Event::Step(Step::FenceParents) => {
            out.paused(&members.parents);
            out.phase(&line);
        }
        Event::Step(Step::FenceTargets) => {
            out.paused(&members.targets);
            out.phase(&line);
        }
        _ => out.phase(&line),
    }
}

/// The exit code and line of an ended session. The work's own failure is passed in as a
/// [`Failure`]; a cleanup failure turns success into exit 7, and after an earlier failure it
/// is noted while that failure's code wins — except an interruption, a refusal or a usage
/// error, which promise that nothing is held, and a fence write left unsettled (its answer
/// lost, the Lease kept so it cannot land under a free one): then it is exit 7. A cleanup that completed is
/// recorded on `out` (the `cleanup=complete` output; `pause` clears it when it parks).
pub fn finish<T>(
    result: Result<T, Failure>,
    cleanup: Result<(), flux_suspend::CleanupError>,
    out: &mut Output,
) -> Result<T, Failure> {
    out.cleanup_complete(cleanup.is_ok());
    match (result, cleanup) {
        (r, Ok(())) => r,
        (Ok(_), Err(c)) => Err(Failure::new(exit::CLEANUP, cleanup_line(&c, out.holder()))),
        (Err(f), Err(c))
            if c.unsettled || matches!(f.code, exit::INTERRUPTED | exit::REFUSED | exit::USAGE) =>
        {
            Err(Failure::new(
                exit::CLEANUP,
                format!("{}; {}", f.message, cleanup_line(&c, out.holder())),
            ))
        }
        (Err(f), Err(c)) => {
            out.note(&cleanup_line(&c, out.holder()));
            // A release withheld after a person's `flux resume`: its restore is what to do next.
            match handoff_app::next::withheld(&c.withheld, out.holder()) {
                Some(next) => Err(replace_next(f, next)),
                None => Err(f),
            }
        }
    }
}

/// `f` with `next` as its next step: on its own line when it has one there (a proof
/// timeout's line stays its counters), else ending its line in place of the one it had.
fn replace_next(mut f: Failure, next: String) -> Failure {
    if f.next.is_some() {
        f.next = Some(next);
    } else {
        let line = f.message.split("; next: ").next().unwrap_or_default();
        f.message = with_next(line.to_string(), Some(&next));
    }
    f
}

/// The work's result of an outcome as a [`Failure`].
pub fn result<T>(r: Result<Result<T, Failure>, SessionError>, h: &Hints) -> Result<T, Failure> {
    r.map_err(|e| failure(&e, h)).and_then(|r| r)
}

fn cleanup_line(c: &flux_suspend::CleanupError, holder: Option<&str>) -> String {
    format!("{c}; next: {}", handoff_app::next::after_cleanup(c, holder))
}

/// The exit code and one line of a session error, ending with the command to run next
/// ([`handoff_app::next`]) when there is one. A proof timeout's line is its fixed counter names
/// and counts only (what a log scraper or the chaos suite may match); its next step is a line
/// of its own ([`Failure::next`]).
pub fn failure(e: &SessionError, h: &Hints) -> Failure {
    if let SessionError::Pause(p @ SuspendError::ProofTimeout { .. }) = e {
        let mut f = Failure::from_suspend(p);
        f.next = next_step(e, h);
        return f;
    }
    let line = match e {
        SessionError::Read { object, source } => read_line(object, source),
        SessionError::Cancelled { during, .. } => format!("interrupted {during}"),
        other => chain(other),
    };
    let line = with_next(line, next_step(e, h).as_deref());
    Failure::new(exit::code(e.class()), line)
}

fn read_line(object: &flux_fence::ObjectRef, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!("forbidden to get {object}: {}", s.message),
        other => format!("reading {object}: {}", chain(other)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn hints() -> Hints {
        Hints {
            command: "run",
            targets: vec!["ks/apps/web".into()],
            retire: flux_suspend::Strategy::Ack,
            controller: ("flux-system".into(), "kustomize-controller".into()),
            lease: "flux-system/flux-handoff".into(),
        }
    }

    #[test]
    fn a_proof_timeout_line_is_its_counters_only_and_its_next_step_a_line_of_its_own() {
        let mut counters = flux_suspend::report::Counters::default();
        counters.incr(flux_suspend::report::Counter::Observations);
        counters.incr(flux_suspend::report::Counter::VersionChanges);
        let e = SessionError::Pause(SuspendError::ProofTimeout {
            waited: Duration::from_secs(5),
            counters,
            writers: vec![flux_suspend::handoff::OtherWriter::new(
                flux_suspend::object::kustomization("apps", "web"),
                "kubectl-annotate",
                1,
            )],
        });
        let f = failure(&e, &hints());
        assert_eq!(f.code, exit::TIMEOUT);
        assert_eq!(
            f.message,
            "stable pause not proven within 5s: observations=1 unreadable=0 child_not_owned=0 \
             parent_not_owned=0 parent_changed=0 version_changes=1"
        );
        assert!(!f.message.contains("next:"), "{}", f.message);
        // Another writer's changes: its field manager is named on the next line, never in
        // the timeout line.
        let next = f.next.as_deref().unwrap_or_default();
        assert!(
            next.starts_with("kubectl -n apps get kustomizations")
                && next.contains("kubectl-annotate"),
            "{next}"
        );
        // A release withheld afterwards: its restore becomes the next step, the line stays.
        let g = replace_next(f.clone(), "flux-handoff fences release x".into());
        assert_eq!(g.message, f.message);
        assert_eq!(g.next.as_deref(), Some("flux-handoff fences release x"));
    }

    #[test]
    fn other_failures_keep_their_next_step_at_the_end_of_their_line() {
        let e = SessionError::Pause(SuspendError::AckTimeout {
            object: Box::new(flux_suspend::object::kustomization("apps", "web")),
            waited: Duration::from_secs(5),
        });
        let f = failure(&e, &hints());
        assert_eq!(f.code, exit::TIMEOUT);
        assert_eq!(f.next, None);
        assert!(
            f.message.starts_with(
                "Kustomization apps/web did not acknowledge the suspend within 5s; next: kubectl"
            ),
            "{}",
            f.message
        );
        let g = replace_next(f, "flux-handoff fences release x".into());
        assert_eq!(
            g.message,
            "Kustomization apps/web did not acknowledge the suspend within 5s; next: \
             flux-handoff fences release x"
        );
        assert_eq!(g.next, None);
    }
}
