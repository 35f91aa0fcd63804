//! `--dry-run=server`: the validation and the read-only preflight of a real session, then the
//! first writes the real pause would send — the Lease acquisition, the fence of each parent,
//! then of each target — each decided on the same read as the real write, with the same body
//! and field manager, and sent with the server's `dryRun=All` ([`flux_fence::dry_run`]), so
//! admission and RBAC answer for real. Nothing is persisted, nothing is waited for (no
//! acknowledgement, no proof, no work), and nothing is left to release.
//!
//! Not sent dry: what the real run writes only after these (the chain record renewing the
//! Lease before each fence, the `HandoffFenced` Events, the controller restart of
//! `--retire restart`, the releases), and `--recover-finished-runs`, which a dry run never
//! performs (the preflight then reports what it finds, as a run without recovery would).

use flux_fence::dry_run::{Answer, DryFence, DryLease, dry_acquire_lease};
use flux_fence::{Fencer, Holder, ObjectRef, OwnerValue};
use kube::Client;
use serde::Serialize;

use crate::cancel::Cancel;
use crate::handoff::{Chain, member_marks, members, new_nonce, suspended_by};
use crate::session::{SessionError, SessionOptions, preflight};

/// One write of the plan ([`plan`]), before it is sent.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Planned {
    /// The Lease acquisition (create, or update of a free Lease).
    Lease,
    /// The fence of a parent (`target: false`) or a target.
    Fence {
        /// The object fenced.
        object: ObjectRef,
        /// Whether it is a target (it also gets `reconcile: disabled`).
        target: bool,
    },
}

/// The writes a pause of `chains` sends first, in order: the Lease, each distinct parent,
/// each distinct target (pure).
///
/// # Errors
/// [`SessionError::Invalid`] when an object is both a target and a parent.
pub fn plan(chains: &[Chain]) -> Result<Vec<Planned>, SessionError> {
    let (parents, targets) = members(chains).map_err(|e| SessionError::Invalid(e.to_string()))?;
    let fences = |list: Vec<ObjectRef>, target: bool| {
        list.into_iter()
            .map(move |object| Planned::Fence { object, target })
    };
    Ok(std::iter::once(Planned::Lease)
        .chain(fences(parents, false))
        .chain(fences(targets, true))
        .collect())
}

/// Which write of the pause a [`DryWrite`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DryWhat {
    /// The Lease acquisition.
    Lease,
    /// The fence of a parent.
    Parent,
    /// The fence of a target.
    Target,
}

impl DryWhat {
    /// `lease`, `fence (parent)`, `fence (target)`.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            Self::Lease => "lease",
            Self::Parent => "fence (parent)",
            Self::Target => "fence (target)",
        }
    }
}

/// One write sent dry, and the server's answer. Serialized flat: `verb`, `kind`,
/// `namespace`, `name`, `what` ([`DryWhat::word`]) and the answer's tag and fields.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DryWrite {
    /// `create`, `update` or `patch`.
    pub verb: &'static str,
    /// The object written: the Lease or a member.
    pub object: ObjectRef,
    /// Which write it is.
    pub what: DryWhat,
    /// The server's answer.
    pub answer: Answer,
}

impl Serialize for DryWrite {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Flat<'a> {
            verb: &'a str,
            kind: &'a str,
            namespace: &'a str,
            name: &'a str,
            what: &'a str,
            #[serde(flatten)]
            answer: &'a Answer,
        }
        Flat {
            verb: self.verb,
            kind: &self.object.resource.kind,
            namespace: &self.object.namespace,
            name: &self.object.name,
            what: self.what.word(),
            answer: &self.answer,
        }
        .serialize(s)
    }
}

impl DryWrite {
    /// One line for people: `would patch Kustomization ns/name (fence (target))`, or
    /// `patch Kustomization ns/name (fence (target)) denied: MESSAGE`.
    #[must_use]
    pub fn line(&self) -> String {
        let what = format!("{} {} ({})", self.verb, self.object, self.what.word());
        match &self.answer {
            Answer::WouldPass => format!("would {what}"),
            Answer::Denied { message } => format!("{what} denied: {message}"),
            Answer::Refused { code, message } => format!("{what} refused ({code}): {message}"),
            Answer::Failed { message } => format!("{what} failed: {message}"),
            other => format!("{what}: {other:?}"),
        }
    }
}

/// The coordination.k8s.io/v1 Lease `namespace/name`.
fn lease_object(lease: &flux_fence::LeaseConfig) -> ObjectRef {
    use k8s_openapi::api::coordination::v1::Lease;
    ObjectRef::new(
        kube::api::ApiResource::erase::<Lease>(&()),
        &lease.namespace,
        &lease.name,
    )
}

/// What a dry run found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DryRun {
    /// The holder the writes were decided for.
    pub holder: Holder,
    /// The chains the preflight resolved.
    pub chains: Vec<Chain>,
    /// Each write sent dry, in the order the real run sends them.
    pub writes: Vec<DryWrite>,
}

impl DryRun {
    /// How many writes would pass.
    #[must_use]
    pub fn passed(&self) -> usize {
        self.writes.iter().filter(|w| w.answer.passes()).count()
    }

    /// How many writes would not pass (denied, refused or failed).
    #[must_use]
    pub fn not_passed(&self) -> usize {
        self.writes.len() - self.passed()
    }
}

/// Runs the dry run of a session with `opts` (see the module docs).
///
/// # Errors
/// As [`crate::Session::start`] before anything is written: [`SessionError::Invalid`],
/// [`SessionError::Refused`], [`SessionError::LeaseHeld`], [`SessionError::NotFound`],
/// [`SessionError::Read`]; [`SessionError::Cancelled`] when stopped; a failed read of a fenced
/// object as [`SessionError::Lease`] or a fence refusal found at the write. A write the server
/// would deny is not an error: it is in [`DryRun::writes`].
pub async fn dry_run(
    client: Client,
    mut opts: SessionOptions,
    cancel: Cancel,
) -> Result<DryRun, SessionError> {
    opts.validate()?;
    // Recovery writes (it releases a finished run's fences): never in a dry run.
    opts.recover_finished_runs = None;
    let holder = opts.holder.clone().unwrap_or_else(Holder::generate);
    let cancelled = || SessionError::Cancelled {
        during: "during the dry run: nothing was changed".into(),
        changed: false,
    };
    cancel
        .unless_stopped(sent(&client, &opts, holder))
        .await
        .ok_or_else(cancelled)?
}

async fn sent(
    client: &Client,
    opts: &SessionOptions,
    holder: Holder,
) -> Result<DryRun, SessionError> {
    let (chains, _, mut reads) = preflight::preflight(client, opts, &holder).await?;
    let lease_cfg = opts.lease.clone().with_keys(&opts.keys);
    let mut writes = Vec::new();
    let mut owner = OwnerValue::new(holder.clone(), flux_fence::Epoch(1));
    let by = suspended_by(&holder, opts.reason.as_deref());
    for planned in plan(&chains)? {
        match planned {
            Planned::Lease => {
                match dry_acquire_lease(client, &lease_cfg, &holder)
                    .await
                    .map_err(SessionError::Lease)?
                {
                    DryLease::Held {
                        holder: other,
                        expired,
                    } => {
                        return Err(super::held::refusal(client, opts, other, expired).await);
                    }
                    DryLease::Sent {
                        verb,
                        answer,
                        epoch,
                    } => {
                        owner = OwnerValue::new(holder.clone(), epoch);
                        writes.push(DryWrite {
                            verb,
                            object: lease_object(&opts.lease),
                            what: DryWhat::Lease,
                            answer,
                        });
                    }
                    other => {
                        return Err(SessionError::Invalid(format!("lease: {other:?}")));
                    }
                }
            }
            Planned::Fence { object, target } => {
                let read = reads
                    .iter()
                    .position(|(o, _)| *o == object)
                    .map(|i| reads.swap_remove(i).1);
                let fencer = Fencer::new(client.clone(), opts.keys.clone(), owner.clone())
                    .with_events(false);
                let replicas = crate::handoff::gate_of(&chains, &object);
                let fence = Fence {
                    object,
                    target,
                    replicas,
                    read,
                };
                if let Some(w) = fence.send(&fencer, opts, &by, &lease_cfg).await? {
                    writes.push(w);
                }
            }
        }
    }
    Ok(DryRun {
        holder,
        chains,
        writes,
    })
}

/// One member's fence, sent dry.
struct Fence {
    object: ObjectRef,
    target: bool,
    /// A replicas gate's count.
    replicas: Option<i32>,
    /// The preflight's read of it.
    read: Option<serde_json::Value>,
}

impl Fence {
    /// The write and its answer; `None` when the object already carries exactly this fence
    /// (the real run writes nothing there).
    async fn send(
        self,
        fencer: &Fencer,
        opts: &SessionOptions,
        by: &str,
        lease: &flux_fence::LeaseConfig,
    ) -> Result<Option<DryWrite>, SessionError> {
        let Self {
            object,
            target,
            replicas,
            read,
        } = self;
        let in_set = crate::handoff::in_set(target, read.as_ref());
        let marks = member_marks(&object, &new_nonce(), target, by, replicas, in_set);
        // Kept to name who set a refused mark (its managed fields).
        let seen = read.clone();
        let found = fencer
            .dry_acquire(&object, read, marks, opts.reason.as_deref(), Some(lease))
            .await
            .map_err(|source| {
                SessionError::Pause(crate::handoff::SuspendError::Fence {
                    step: "fencing (dry run)",
                    source,
                })
            })?;
        let answer = match found {
            DryFence::Sent(a) => a,
            DryFence::AlreadyOurs => return Ok(None),
            DryFence::NotFound => return Err(SessionError::NotFound(Box::new(object.clone()))),
            DryFence::Refused(r) => {
                return Err(SessionError::Refused {
                    object: (&object).into(),
                    why: super::Refusal::of_fence(r, seen.as_ref()),
                });
            }
            other => return Err(SessionError::Invalid(format!("{object}: {other:?}"))),
        };
        Ok(Some(DryWrite {
            verb: "patch",
            object,
            what: if target {
                DryWhat::Target
            } else {
                DryWhat::Parent
            },
            answer,
        }))
    }
}

/// The words of the real pause's refusals (`crate::handoff`).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::kustomization;

    fn chain(parent: Option<&str>, target: &str) -> Chain {
        Chain::new(
            parent.map(|p| kustomization("ns", p)),
            kustomization("ns", target),
        )
    }

    fn fence(name: &str, target: bool) -> Planned {
        Planned::Fence {
            object: kustomization("ns", name),
            target,
        }
    }

    #[test]
    fn dry_run_plans_the_lease_then_each_parent_once_then_each_target() {
        let cases: Vec<(Vec<Chain>, Vec<Planned>)> = vec![
            (
                vec![chain(None, "apps")],
                vec![Planned::Lease, fence("apps", true)],
            ),
            (
                vec![chain(Some("flux-system"), "apps")],
                vec![
                    Planned::Lease,
                    fence("flux-system", false),
                    fence("apps", true),
                ],
            ),
            (
                vec![
                    chain(Some("flux-system"), "apps"),
                    chain(Some("flux-system"), "infra"),
                    chain(None, "apps"),
                ],
                vec![
                    Planned::Lease,
                    fence("flux-system", false),
                    fence("apps", true),
                    fence("infra", true),
                ],
            ),
        ];
        for (chains, want) in cases {
            assert_eq!(plan(&chains).unwrap(), want, "{chains:?}");
        }
    }

    #[test]
    fn dry_run_plan_refuses_an_object_that_is_both_target_and_parent() {
        let chains = vec![chain(Some("apps"), "infra"), chain(None, "apps")];
        let err = plan(&chains).unwrap_err();
        assert!(
            matches!(&err, SessionError::Invalid(m) if m.contains("both a target and a parent")),
            "{err:?}"
        );
    }

    #[test]
    fn dry_run_the_lease_write_is_named_as_a_lease() {
        let cfg = flux_fence::LeaseConfig::new("flux-system", "handoff");
        let w = DryWrite {
            verb: "create",
            object: lease_object(&cfg),
            what: DryWhat::Lease,
            answer: Answer::WouldPass,
        };
        assert_eq!(w.line(), "would create Lease flux-system/handoff (lease)");
        assert_eq!(
            serde_json::to_value(&w).unwrap(),
            serde_json::json!({"verb": "create", "kind": "Lease", "namespace": "flux-system",
                "name": "handoff", "what": "lease", "answer": "would_pass"})
        );
    }

    #[test]
    fn dry_run_lines_name_verb_kind_object_and_answer() {
        let mut w = DryWrite {
            verb: "patch",
            object: kustomization("flux-system", "apps"),
            what: DryWhat::Target,
            answer: Answer::WouldPass,
        };
        assert_eq!(
            w.line(),
            "would patch Kustomization flux-system/apps (fence (target))"
        );
        w.answer = Answer::Denied {
            message: "nope".into(),
        };
        assert_eq!(
            w.line(),
            "patch Kustomization flux-system/apps (fence (target)) denied: nope"
        );
        let v = serde_json::to_value(&w).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"verb": "patch", "kind": "Kustomization",
                "namespace": "flux-system", "name": "apps", "what": "fence (target)",
                "answer": "denied", "message": "nope"})
        );
    }
}
