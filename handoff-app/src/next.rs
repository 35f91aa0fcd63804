//! The one command to run next after a failed handoff: a pure mapping from the typed error
//! (and what the command was asked to do) to a command, appended to the failure line as
//! `; next: COMMAND` (a proof timeout's, whose line is its counters only, printed as a
//! `next: COMMAND` line of its own) and shown as the step summary's next step. Only names go
//! into it (objects, the Lease, the controller, flags): never a value from the command's own
//! argv, which may hold anything.
//!
//! The core libraries name a command by what it does ([`Command`]); [`spell`] writes it in
//! flux-handoff's words.

use std::path::Path;

use flux_fence::ObjectRef;
use flux_fence::command::Command;
use flux_fence::dry_run::Answer;
use flux_fence::mark::MarkAt;
use flux_fence::recovery::short_ref;
use flux_suspend::Refusal;
use flux_suspend::handoff::SuspendError;
use flux_suspend::{CleanupError, SessionError, SessionOptions, Strategy, Subject};

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
    #[must_use]
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

/// flux-handoff's spelling of a library's [`Command`]. `config`, the `--config` file the
/// command read, is repeated so the next command reads the same one.
#[must_use]
pub fn spell(c: &Command, config: Option<&Path>) -> String {
    let config = config.map(|p| format!(" --config {}", p.display()));
    let config = config.unwrap_or_default();
    let lease = |l: &Option<String>| l.as_ref().map(|l| format!(" --lease {l}"));
    match c {
        Command::Pause => "flux-handoff pause".into(),
        Command::Resume {
            holder,
            lease: l,
            exited,
        } => {
            let exited = if *exited { " --holder-exited" } else { "" };
            let l = lease(l).unwrap_or_default();
            format!("flux-handoff resume --holder {holder}{exited}{l}{config}")
        }
        Command::Release {
            object,
            holder,
            exited,
            keep_moved,
        } => {
            let exited = if *exited { " --holder-exited" } else { "" };
            let keep = if *keep_moved { " --keep-moved" } else { "" };
            let object = short_ref(object);
            format!("flux-handoff fences release {object} --holder {holder}{exited}{keep}{config}")
        }
        Command::Fences { lease: l } => {
            format!(
                "flux-handoff fences{}{config}",
                lease(l).unwrap_or_default()
            )
        }
        Command::Recover { lease: l } => {
            format!("flux-handoff fences recover --lease {l}{config}")
        }
        _ => "flux-handoff --help".into(),
    }
}

/// [`spell`] without a config file: the form of a next step after a failed handoff.
fn spelled(c: &Command) -> String {
    spell(c, None)
}

/// The command to run next after `e`, if there is one that helps.
#[must_use]
pub fn next_step(e: &SessionError, h: &Hints) -> Option<String> {
    let lease = || Some(h.lease.clone());
    match e {
        SessionError::Refused { object, why }
        | SessionError::RefusedAfterWrites { object, why } => Some(refused(object, why, h)),
        // Expired and not parked (a parked pause is `Refusal::LeaseParked`): what recover acts on.
        SessionError::LeaseHeld { expired: true, .. } => Some(spelled(&Command::Recover {
            lease: h.lease.clone(),
        })),
        SessionError::Pause(p) => pause(p, h),
        SessionError::NotFound(_) => Some("flux-handoff doctor".into()),
        // A read refused by RBAC: doctor checks every right a handoff needs.
        SessionError::Read {
            source: kube::Error::Api(s),
            ..
        } if s.code == 403 => Some("flux-handoff doctor".into()),
        // The live holder's own view: its liveness, age, and the command that releases it. And
        // after a lost Lease, or one not parked or taken in time, what was taken may still be
        // held: the Lease's own view says what, and how to release it.
        SessionError::LeaseHeld { .. }
        | SessionError::LeaseLost(_)
        | SessionError::StartCutShort { .. }
        | SessionError::NotParked { .. } => Some(spelled(&Command::Fences { lease: lease() })),
        SessionError::PauseBroken(_) => Some(format!(
            "{} (what is still held)",
            spelled(&Command::Fences { lease: None })
        )),
        SessionError::Cleanup { cleanup, .. } => Some(after_cleanup(cleanup, None)),
        // Bad input says what to fix; a cancellation was asked for; the work's own failure is
        // the work's.
        _ => None,
    }
}

/// The next step after a cleanup that could not give back everything: a withheld release's
/// settling command ([`withheld`]), else the listing of what is still held.
#[must_use]
pub fn after_cleanup(c: &CleanupError, holder: Option<&str>) -> String {
    withheld(&c.withheld, holder).unwrap_or_else(|| {
        format!(
            "{} (lists what is still held)",
            spelled(&Command::Fences { lease: None })
        )
    })
}

/// `o`'s resource as kubectl names it: `plural.group`, or `plural` in the core group.
fn resource_name(o: &ObjectRef) -> String {
    let r = &o.resource;
    if r.group.is_empty() {
        r.plural.clone()
    } else {
        format!("{}.{}", r.plural, r.group)
    }
}

/// Chosen by the refusal's variant, never by its text.
fn refused(object: &Subject, why: &Refusal, h: &Hints) -> String {
    match why {
        // `fences` shows whether that holder is live and prints the command releasing it.
        Refusal::FencedBy { .. } => return spelled(&Command::Fences { lease: None }),
        Refusal::RecordsHeldFences { .. } => {
            return spelled(&Command::Recover {
                lease: h.lease.clone(),
            });
        }
        // A deliberate pause: only its resume ends it (`fences recover` keeps it).
        Refusal::LeaseParked { holder, lease, .. } => {
            return spelled(&Command::Resume {
                holder: holder.clone(),
                lease: lease.clone(),
                exited: false,
            });
        }
        // The Lease's holder: its liveness, age, and the command that releases it.
        r if r.is_lease() => {
            return spelled(&Command::Fences {
                lease: Some(h.lease.clone()),
            });
        }
        _ => {}
    }
    // A mark set by someone else (a person's `flux suspend`): who set it, by field manager.
    let Some(o) = object.object() else {
        return spelled(&Command::Fences {
            lease: Some(h.lease.clone()),
        });
    };
    let resource = resource_name(o);
    let group = &o.resource.group;
    let resume = if group.ends_with("toolkit.fluxcd.io") {
        "; `flux resume` it if it should run"
    } else if group == "fluxcd.controlplane.io" {
        "; `flux-operator resume` it if it should run"
    } else {
        ""
    };
    format!(
        "kubectl -n {} get {resource} {} --show-managed-fields -o yaml (names who set it{resume})",
        o.namespace, o.name
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
            let resource = resource_name(o);
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
/// `reconcile: disabled` changed by hand too; [`CleanupError::withheld`]): the command that
/// settles the first such object, saying what it writes, then the one that releases the rest
/// of `holder`'s pause.
#[must_use]
pub fn withheld(moved: &[(ObjectRef, MarkAt)], holder: Option<&str>) -> Option<String> {
    let (object, at) = moved.first()?;
    let holder = holder.unwrap_or("H").to_string();
    let release = spelled(&Command::Release {
        object: object.clone(),
        holder: holder.clone(),
        exited: true,
        keep_moved: true,
    });
    let resume = spelled(&Command::Resume {
        holder,
        lease: None,
        exited: true,
    });
    Some(format!(
        "{release} (keeps {at} and any other value another writer moved as they set it, \
         restores the other marks, removes the fence), then {resume}"
    ))
}

/// `line; next: COMMAND`, or the line as it is.
#[must_use]
pub fn with_next(line: String, next: Option<&str>) -> String {
    match next {
        Some(n) => format!("{line}; next: {n}"),
        None => line,
    }
}

/// The command to run after a `--dry-run=server` write that would not pass: for an RBAC denial, the manifests
/// granting what this handoff needs; otherwise the read-only preflight.
#[must_use]
pub fn after_dry_write(answer: &Answer, h: &Hints) -> String {
    match answer {
        Answer::Denied { .. } => rbac_next(h),
        _ => "flux-handoff doctor".into(),
    }
}

/// `flux-handoff rbac -t T… --lease L | kubectl apply -f -`.
#[must_use]
pub fn rbac_next(h: &Hints) -> String {
    let mut words = vec!["flux-handoff rbac".to_string()];
    words.extend(h.targets.iter().map(|t| format!("-t {t}")));
    words.push(format!("--lease {}", h.lease));
    format!(
        "{} | kubectl apply -f - (as a cluster admin)",
        words.join(" ")
    )
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

    fn web() -> Subject {
        (&flux_suspend::object::kustomization("apps", "web")).into()
    }

    fn next(e: &SessionError, h: &Hints) -> String {
        next_step(e, h).unwrap_or_default()
    }

    #[test]
    fn next_step_fenced_by_another_holder_shows_the_fences() {
        let e = SessionError::Refused {
            object: web(),
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
            object: web(),
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
    fn next_step_mark_taken_on_a_gate_names_its_own_resource_and_no_flux_resume() {
        let gate = flux_suspend::object::deployment("apps", "autoscaler");
        let e = SessionError::Refused {
            object: (&gate).into(),
            why: Refusal::MarkTaken {
                at: flux_fence::mark::MarkAt::Field("/spec/replicas".into()),
                field_manager: Some("kubectl-scale".into()),
            },
        };
        assert_eq!(
            next(&e, &hints("pause", Strategy::Ack)),
            "kubectl -n apps get deployments.apps autoscaler --show-managed-fields -o yaml \
             (names who set it)"
        );
    }

    #[test]
    fn next_step_lease_refusals_name_lease_commands_not_kubectl() {
        let h = hints("run", Strategy::Ack);
        let on_lease = |why| SessionError::Refused {
            object: Subject::Lease("flux-system/flux-handoff".into()),
            why,
        };
        let cases = [
            (
                Refusal::RecordsHeldFences {
                    holder: "h".into(),
                    held: vec![flux_suspend::object::kustomization("a", "b")],
                    unreadable: Vec::new(),
                    lease: "flux-system/flux-handoff".into(),
                },
                "flux-handoff fences recover --lease flux-system/flux-handoff",
            ),
            (
                Refusal::LeaseParked {
                    holder: "gh1.1-x".into(),
                    lease: None,
                    pause: Box::default(),
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
            object: Box::new(flux_suspend::object::kustomization("apps", "web")),
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
        let web = flux_suspend::object::kustomization("apps", "web");
        let at = MarkAt::Annotation("kustomize.toolkit.fluxcd.io/reconcile".into());
        assert_eq!(
            withheld(&[(web, at)], Some("gh1.1-x")).as_deref(),
            Some(
                "flux-handoff fences release ks/apps/web --holder gh1.1-x --holder-exited \
                 --keep-moved (keeps annotation kustomize.toolkit.fluxcd.io/reconcile and any other value another \
                 writer moved as they set it, restores the other marks, removes the fence), then \
                 flux-handoff resume --holder gh1.1-x --holder-exited"
            )
        );
        assert_eq!(withheld(&[], Some("h")), None);
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

    /// One failure of each class a session ends with: the advice follows from its facts, or
    /// there is none (bad input says what to fix; a cancellation was asked for; the work's
    /// own failure is the work's). `Registry` is ghcr-auth's, never a session's.
    #[test]
    fn next_step_follows_the_facts_of_each_failure_class() {
        use flux_fence::ErrorClass as C;
        use flux_fence::LossReason;
        use flux_suspend::{BrokenPause, Change};

        let h = hints("run", Strategy::Ack);
        let forbidden = kube::Error::Api(
            kube::core::Status::failure("forbidden", "Forbidden")
                .with_code(403)
                .boxed(),
        );
        let down = kube::Error::Api(
            kube::core::Status::failure("unavailable", "ServiceUnavailable")
                .with_code(503)
                .boxed(),
        );
        let read = |source| SessionError::Read {
            object: Box::new(flux_suspend::object::kustomization("apps", "web")),
            source,
        };
        let fences = "flux-handoff fences --lease flux-system/flux-handoff";
        let cases: Vec<(SessionError, C, Option<&str>)> = vec![
            (
                SessionError::Invalid("--timeout: not a duration".into()),
                C::BadInput,
                None,
            ),
            (
                SessionError::Refused {
                    object: web(),
                    why: Refusal::FencedBy { holder: "h".into() },
                },
                C::Refused,
                Some("flux-handoff fences"),
            ),
            (
                SessionError::Pause(SuspendError::RestartTimeout {
                    waited: Duration::from_mins(1),
                    old: 1,
                    ready: 0,
                    want: 1,
                }),
                C::Timeout,
                Some("kubectl -n flux-system rollout status deploy/kustomize-controller"),
            ),
            (read(forbidden), C::KubeApi, Some("flux-handoff doctor")),
            // The server down: nothing of ours to advise; the line says what failed.
            (read(down), C::KubeApi, None),
            (
                SessionError::LeaseLost(LossReason::Stale),
                C::KubeApi,
                Some(fences),
            ),
            (
                SessionError::StartCutShort { holder: "h".into() },
                C::Cleanup,
                Some(fences),
            ),
            (
                SessionError::NotParked {
                    lease: "flux-system/flux-handoff".into(),
                    why: "the API server is down".into(),
                },
                C::Cleanup,
                Some(fences),
            ),
            (
                SessionError::PauseBroken(BrokenPause::new(
                    flux_suspend::object::kustomization("apps", "web"),
                    Change::Unsuspended,
                    Some("kubectl-patch".into()),
                )),
                C::PauseBroken,
                Some("flux-handoff fences (what is still held)"),
            ),
            (
                SessionError::Cancelled {
                    during: "the pause".into(),
                    changed: true,
                },
                C::Cancelled,
                None,
            ),
            (SessionError::WorkPanicked("boom".into()), C::Internal, None),
        ];
        let mut seen = Vec::new();
        for (e, class, want) in &cases {
            assert_eq!(e.class(), *class, "{e}");
            assert_eq!(next_step(e, &h).as_deref(), *want, "{e}");
            seen.push(*class);
        }
        for class in [
            C::BadInput,
            C::Refused,
            C::Timeout,
            C::KubeApi,
            C::Cleanup,
            C::PauseBroken,
            C::Cancelled,
            C::Internal,
        ] {
            assert!(seen.contains(&class), "no case of {class:?}");
        }
    }

    #[test]
    fn dry_run_a_denied_write_names_the_rbac_command_next() {
        let mut h = hints("pause", Strategy::Ack);
        h.targets = vec!["ks/flux-system/apps".into()];
        let denied = Answer::Denied {
            message: "m".into(),
        };
        assert_eq!(
            after_dry_write(&denied, &h),
            "flux-handoff rbac -t ks/flux-system/apps --lease flux-system/flux-handoff | \
             kubectl apply -f - (as a cluster admin)"
        );
        let refused = Answer::Refused {
            code: 422,
            message: "m".into(),
        };
        assert_eq!(after_dry_write(&refused, &h), "flux-handoff doctor");
    }
}
