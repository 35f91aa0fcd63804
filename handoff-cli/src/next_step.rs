//! The one command to run next after a failed handoff: a pure mapping from the typed error
//! (and what the command was asked to do) to a command, appended to the failure line as
//! `; next: COMMAND` (a proof timeout's, whose line is its counters only, printed as a
//! `next: COMMAND` line of its own) and shown as the step summary's next step. Only names go into it (objects,
//! the Lease, the controller, flags): never a value from the command's own argv, which may hold
//! anything.

use flux_fence::recovery::short_ref;
use flux_suspend::Refusal;
use flux_suspend::handoff::SuspendError;
use flux_suspend::{SessionError, SessionOptions, Strategy};

/// What the failed command was asked to do, for the hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hints {
    /// `pause`, `run` or `ghcr reassert`.
    pub command: &'static str,
    /// The targets, `kind/namespace/name`.
    pub targets: Vec<String>,
    /// The retire strategy used.
    pub retire: Strategy,
    /// The controller Deployment, namespace and name.
    pub controller: (String, String),
    /// The Lease, `namespace/name`, and whether it is not the default one.
    pub lease: String,
}

impl Hints {
    /// The hints of these options.
    pub fn of(command: &'static str, opts: &SessionOptions) -> Self {
        Self {
            command,
            targets: opts.targets.iter().map(|t| short_ref(&t.object)).collect(),
            retire: opts.strategy,
            controller: (
                opts.controller.namespace.clone(),
                opts.controller.name.clone(),
            ),
            lease: opts.lease.to_string(),
        }
    }

    /// `flux-handoff COMMAND TARGETS FLAGS` (with `-- …` for run's command).
    fn again(&self, flags: &str) -> String {
        // The default Lease needs no flag (it is the same whatever `-n` says).
        let lease = if self.lease == flux_fence::LeaseConfig::default().to_string() {
            String::new()
        } else {
            format!(" --lease {}", self.lease)
        };
        let tail = match self.command {
            "run" => " -- …",
            "ghcr reassert" => " …",
            _ => "",
        };
        format!(
            "flux-handoff {} {}{lease} {flags}{tail}",
            self.command,
            self.targets.join(" ")
        )
    }
}

/// The command to run next after `e`, if there is one that helps.
pub fn next_step(e: &SessionError, h: &Hints) -> Option<String> {
    match e {
        SessionError::Refused { object, why }
        | SessionError::RefusedAfterWrites { object, why } => Some(refused(object, why, h)),
        SessionError::LeaseHeld { expired: true, .. } => {
            Some(format!("flux-handoff fences recover --lease {}", h.lease))
        }
        // The live holder's own view: its liveness, age, and the command that releases it.
        SessionError::LeaseHeld { .. } => Some(format!("flux-handoff fences --lease {}", h.lease)),
        SessionError::Pause(p) => pause(p, h),
        SessionError::NotFound(_) => Some("flux-handoff doctor".into()),
        _ => None,
    }
}

/// Chosen by the refusal's variant, never by its text.
fn refused(object: &str, why: &Refusal, h: &Hints) -> String {
    match why {
        // `fences` shows whether that holder is live and prints the command releasing it.
        Refusal::FencedBy { .. } => return "flux-handoff fences".into(),
        Refusal::RecordsHeldFences { .. } => {
            return format!("flux-handoff fences recover --lease {}", h.lease);
        }
        Refusal::LeaseParked { holder, lease_flag } => {
            return format!("flux-handoff resume --holder {holder}{lease_flag}");
        }
        // The Lease's holder: its liveness, age, and the command that releases it.
        r if r.is_lease() => return format!("flux-handoff fences --lease {}", h.lease),
        _ => {}
    }
    // A mark set by someone else (a person's `flux suspend`): who set it, by field manager.
    let name = crate::output::short_name(object);
    let mut parts = name.splitn(3, '/');
    let (kind, ns, obj) = (parts.next(), parts.next(), parts.next());
    let (resource, resume) = match kind {
        Some("hr") => ("helmreleases.helm.toolkit.fluxcd.io", "flux resume"),
        Some("resourceset") => (
            "resourcesets.fluxcd.controlplane.io",
            "flux-operator resume",
        ),
        Some("fluxinstance") => (
            "fluxinstances.fluxcd.controlplane.io",
            "flux-operator resume",
        ),
        _ => ("kustomizations.kustomize.toolkit.fluxcd.io", "flux resume"),
    };
    format!(
        "kubectl -n {} get {resource} {} --show-managed-fields -o yaml (names who set it; \
         `{resume}` it if it should run)",
        ns.unwrap_or_default(),
        obj.unwrap_or_default()
    )
}

/// Whether a field manager is a Flux controller's: the one `--controller` names, or Flux's
/// kustomize- and helm-controller (both apply the objects they reconcile under their names).
fn is_controller(manager: &str, deploy: &str) -> bool {
    manager == deploy || ["kustomize-controller", "helm-controller"].contains(&manager)
}

fn pause(p: &SuspendError, h: &Hints) -> Option<String> {
    let (ns, deploy) = &h.controller;
    match p {
        // Another writer kept changing the chain: no retirement of reconciles ends that. A
        // Flux controller's own write is a reconcile in flight, which a restart does end.
        SuspendError::ProofTimeout { writers, .. }
            if writers.iter().any(|w| !is_controller(&w.manager, deploy)) =>
        {
            let w = writers
                .iter()
                .filter(|w| !is_controller(&w.manager, deploy))
                .max_by_key(|w| w.changes)?;
            let o = &w.object;
            let resource = if o.resource.group.is_empty() {
                o.resource.plural.clone()
            } else {
                format!("{}.{}", o.resource.plural, o.resource.group)
            };
            Some(format!(
                "kubectl -n {} get {resource} {} --show-managed-fields -o yaml (field manager \
                 {} changed it during the proof, seen {} time(s): a restart cannot stop another \
                 writer; stop it, then try again)",
                o.namespace, o.name, w.manager, w.changes
            ))
        }
        // A reconcile still in flight kept the status moving: a restart ends every one.
        SuspendError::ProofTimeout { .. } if h.retire != Strategy::Restart => {
            Some(h.again("--retire restart"))
        }
        SuspendError::ProofTimeout { waited, .. } => Some(h.again(&format!(
            "--retire restart --timeout {}s",
            waited.as_secs() * 2
        ))),
        // The controller did not handle the request: it is down, or busy with a long reconcile.
        SuspendError::AckTimeout { .. } => Some(format!(
            "kubectl -n {ns} logs deploy/{deploy} --since 10m (or {})",
            h.again("--retire restart")
        )),
        SuspendError::RestartTimeout { .. } => {
            Some(format!("kubectl -n {ns} rollout status deploy/{deploy}"))
        }
        _ => None,
    }
}

/// After a cleanup whose release was withheld because another writer moved a mark other than
/// the pause alone (a person's `flux resume` by itself is kept by the release: this is e.g.
/// `reconcile: disabled` changed by hand too, `release of ks/ns/name withheld: annotation
/// kustomize.toolkit.fluxcd.io/reconcile was changed by another writer`): the command that
/// settles that object, saying what it writes, then the one that releases the rest of
/// `holder`'s pause.
pub fn withheld(why: &str, holder: Option<&str>) -> Option<String> {
    let (_, rest) = why.split_once("release of ")?;
    let (object, rest) = rest.split_once(" withheld: ")?;
    let at = rest.split(" was changed").next().unwrap_or(rest);
    let holder = holder.unwrap_or("H");
    Some(format!(
        "flux-handoff fences release {object} --holder {holder} --holder-exited --keep-moved \
         (keeps {at} and \
         any other value another writer moved as they set it, restores the other marks, \
         removes the fence), then flux-handoff resume --holder {holder} --holder-exited"
    ))
}

/// `line; next: COMMAND`, or the line as it is.
pub fn with_next(line: String, next: Option<&str>) -> String {
    match next {
        Some(n) => format!("{line}; next: {n}"),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use flux_suspend::handoff::OtherWriter;
    use flux_suspend::report::Counters;

    use super::*;

    fn hints(command: &'static str, retire: Strategy) -> Hints {
        Hints {
            command,
            targets: vec!["ks/apps/web".into()],
            retire,
            controller: ("flux-system".into(), "kustomize-controller".into()),
            lease: "flux-system/flux-handoff".into(),
        }
    }

    fn next(e: &SessionError, h: &Hints) -> String {
        next_step(e, h).unwrap_or_default()
    }

    #[test]
    fn next_step_fenced_by_another_holder_shows_the_fences() {
        let e = SessionError::Refused {
            object: "Kustomization apps/web".into(),
            why: Refusal::FencedBy {
                holder: "gh123.1-abc".into(),
            },
        };
        assert_eq!(
            next(&e, &hints("pause", Strategy::Ack)),
            "flux-handoff fences"
        );
    }

    #[test]
    fn next_step_suspend_set_by_someone_else_names_who() {
        let e = SessionError::Refused {
            object: "Kustomization apps/web".into(),
            why: Refusal::MarkTaken {
                at: flux_fence::mark::MarkAt::Field("/spec/suspend".into()),
                field_manager: Some("flux".into()),
            },
        };
        assert_eq!(
            next(&e, &hints("pause", Strategy::Ack)),
            "kubectl -n apps get kustomizations.kustomize.toolkit.fluxcd.io web \
             --show-managed-fields -o yaml (names who set it; `flux resume` it if it should run)"
        );
    }

    #[test]
    fn next_step_lease_refusals_name_lease_commands_not_kubectl() {
        let h = hints("run", Strategy::Ack);
        let on_lease = |why| SessionError::Refused {
            object: "lease flux-system/flux-handoff".into(),
            why,
        };
        let cases = [
            (
                Refusal::RecordsHeldFences {
                    holder: "h".into(),
                    held: vec!["ks/a/b".into()],
                    lease: "flux-system/flux-handoff".into(),
                },
                "flux-handoff fences recover --lease flux-system/flux-handoff",
            ),
            (
                Refusal::LeaseParked {
                    holder: "gh1.1-x".into(),
                    lease_flag: String::new(),
                },
                "flux-handoff resume --holder gh1.1-x",
            ),
            (
                Refusal::LeaseContended,
                "flux-handoff fences --lease flux-system/flux-handoff",
            ),
        ];
        for (why, want) in cases {
            assert_eq!(next(&on_lease(why), &h), want);
        }
    }

    #[test]
    fn next_step_live_lease_shows_its_holder_expired_recovers() {
        let h = hints("run", Strategy::Ack);
        let held = |expired| SessionError::LeaseHeld {
            lease: "flux-system/flux-handoff".into(),
            holder: "x".into(),
            expired,
        };
        assert_eq!(
            next(&held(false), &h),
            "flux-handoff fences --lease flux-system/flux-handoff"
        );
        assert_eq!(
            next(&held(true), &h),
            "flux-handoff fences recover --lease flux-system/flux-handoff"
        );
    }

    #[test]
    fn next_step_proof_timeout_retires_by_restart_not_doctor() {
        let timeout = || {
            SessionError::Pause(SuspendError::ProofTimeout {
                waited: Duration::from_mins(5),
                counters: Counters::default(),
                writers: Vec::new(),
            })
        };
        assert_eq!(
            next(&timeout(), &hints("pause", Strategy::Ack)),
            "flux-handoff pause ks/apps/web --retire restart"
        );
        assert_eq!(
            next(&timeout(), &hints("run", Strategy::QuietWindow)),
            "flux-handoff run ks/apps/web --retire restart -- …"
        );
        assert_eq!(
            next(&timeout(), &hints("pause", Strategy::Restart)),
            "flux-handoff pause ks/apps/web --retire restart --timeout 600s"
        );
    }

    #[test]
    fn next_step_proof_timeout_by_another_writer_names_it_never_a_restart() {
        let web = flux_suspend::object::kustomization("apps", "web");
        let timeout = SessionError::Pause(SuspendError::ProofTimeout {
            waited: Duration::from_mins(5),
            counters: Counters::default(),
            writers: vec![
                OtherWriter::new(web.clone(), "kubectl-edit", 1),
                OtherWriter::new(web.clone(), "kustomize-controller", 30),
                OtherWriter::new(web, "kubectl-annotate", 14),
            ],
        });
        for strategy in [Strategy::Ack, Strategy::Restart] {
            let got = next(&timeout, &hints("pause", strategy));
            assert_eq!(
                got,
                "kubectl -n apps get kustomizations.kustomize.toolkit.fluxcd.io web \
                 --show-managed-fields -o yaml (field manager kubectl-annotate changed it \
                 during the proof, seen 14 time(s): a restart cannot stop another writer; stop \
                 it, then try again)"
            );
        }
        // Only the controller's own writes: a reconcile in flight, which a restart ends.
        let controller = SessionError::Pause(SuspendError::ProofTimeout {
            waited: Duration::from_mins(5),
            counters: Counters::default(),
            writers: vec![OtherWriter::new(
                flux_suspend::object::kustomization("apps", "web"),
                "kustomize-controller",
                3,
            )],
        });
        assert_eq!(
            next(&controller, &hints("pause", Strategy::Ack)),
            "flux-handoff pause ks/apps/web --retire restart"
        );
    }

    #[test]
    fn next_step_unacknowledged_suspend_reads_the_controller_logs() {
        let e = SessionError::Pause(SuspendError::AckTimeout {
            object: "Kustomization apps/web".into(),
            waited: Duration::from_mins(5),
        });
        assert_eq!(
            next(&e, &hints("pause", Strategy::Ack)),
            "kubectl -n flux-system logs deploy/kustomize-controller --since 10m (or \
             flux-handoff pause ks/apps/web --retire restart)"
        );
    }

    #[test]
    fn next_step_withheld_release_names_the_command_that_restores_it_and_what_it_writes() {
        let why = "releasing: release of ks/apps/web withheld: annotation \
                   kustomize.toolkit.fluxcd.io/reconcile was changed by another writer";
        assert_eq!(
            withheld(why, Some("gh1.1-x")).as_deref(),
            Some(
                "flux-handoff fences release ks/apps/web --holder gh1.1-x --holder-exited \
                 --keep-moved (keeps annotation kustomize.toolkit.fluxcd.io/reconcile and any other value another \
                 writer moved as they set it, restores the other marks, removes the fence), then \
                 flux-handoff resume --holder gh1.1-x --holder-exited"
            )
        );
        assert_eq!(
            withheld("releasing: the API server is down", Some("h")),
            None
        );
    }

    #[test]
    fn next_step_other_lease_is_named_and_lines_end_with_the_command() {
        let mut h = hints("pause", Strategy::Ack);
        h.lease = "team/handoff".into();
        let e = SessionError::Pause(SuspendError::ProofTimeout {
            waited: Duration::from_mins(1),
            counters: Counters::default(),
            writers: Vec::new(),
        });
        let n = next_step(&e, &h);
        assert_eq!(
            n.as_deref(),
            Some("flux-handoff pause ks/apps/web --lease team/handoff --retire restart")
        );
        // A proof timeout's next step is a line of its own (`session::failure`); any other
        // failure's line ends with it.
        assert_eq!(
            with_next(
                "Kustomization apps/web did not acknowledge the suspend within 60s".into(),
                n.as_deref()
            ),
            "Kustomization apps/web did not acknowledge the suspend within 60s; next: \
             flux-handoff pause ks/apps/web --lease team/handoff --retire restart"
        );
        assert_eq!(with_next("x".into(), None), "x");
    }
}
