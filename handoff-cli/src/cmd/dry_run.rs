//! `--dry-run=server` of `pause` and `run`: the preflight, then the Lease acquisition and each
//! fence write sent with the server's `dryRun=All` ([`flux_suspend::session::dry_run`]), one
//! line per write with the server's answer. Nothing is changed, nothing is waited for, the
//! command of `run` is not run, and nothing is left to release.

use flux_fence::dry_run::Answer;
use flux_suspend::session::dry_run::{DryRun, dry_run};
use flux_suspend::{Cancel, SessionOptions};
use kube::Client;
use serde_json::json;

use crate::exit;
use crate::failure::Failure;
use crate::next_step::Hints;
use crate::output::Output;
use crate::session;

/// `--dry-run`: only `server` (as `kubectl --dry-run=server`): the server answers each write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRunMode {
    /// Send every write with `dryRun=All`: admission and RBAC answer, nothing is stored.
    Server,
}

/// Runs the dry run; `not_run` names the program `run` would have started.
pub async fn run(
    client: Client,
    opts: SessionOptions,
    cancel: Cancel,
    out: &mut Output,
    hints: &Hints,
    not_run: Option<&str>,
) -> Result<u8, Failure> {
    out.stage("dry run");
    // A dry run takes nothing: whatever happens, nothing is left to release.
    out.cleanup_complete(true);
    let found = dry_run(client, opts, cancel)
        .await
        .map_err(|e| session::failure(&e, hints))?;
    for w in &found.writes {
        if w.answer.passes() {
            out.phase(&w.line());
        } else {
            out.note(&format!("✗ {}", w.line()));
        }
    }
    if let Some(program) = not_run {
        out.note(&format!("dry run: {program} was not run"));
    }
    out.fact("dry_run", json!(found.writes));
    out.fact("changed", json!(false));
    // `-o name`: the objects the real run would fence, parents first.
    let fenced: Vec<String> = found
        .writes
        .iter()
        .filter(|w| w.what != "lease")
        .map(|w| format!("{} {}/{}", w.kind, w.namespace, w.name))
        .collect();
    out.list(&fenced);
    let summary = summary(&found);
    out.note(&summary);
    match found.writes.iter().find(|w| !w.answer.passes()) {
        None => Ok(exit::SUCCESS),
        Some(first) => Err(Failure::new(
            exit::KUBE_API,
            format!(
                "{summary}; first: {}; next: {}",
                first.line(),
                next(&first.answer, hints)
            ),
        )),
    }
}

/// `dry run: N writes would pass, M denied or refused; nothing was changed`.
pub fn summary(found: &DryRun) -> String {
    format!(
        "dry run: {} writes would pass, {} denied or refused; nothing was changed",
        found.passed(),
        found.not_passed()
    )
}

/// The command to run after a write that would not pass: for an RBAC denial, the manifests
/// granting what this handoff needs; otherwise the read-only preflight.
fn next(answer: &Answer, h: &Hints) -> String {
    match answer {
        Answer::Denied { .. } => {
            let mut words = vec!["flux-handoff rbac".to_string()];
            words.extend(h.targets.iter().map(|t| format!("-t {t}")));
            words.push(format!("--lease {}", h.lease));
            format!(
                "{} | kubectl apply -f - (as a cluster admin)",
                words.join(" ")
            )
        }
        _ => "flux-handoff doctor".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints() -> Hints {
        Hints {
            command: "pause",
            targets: vec!["ks/flux-system/apps".into()],
            retire: flux_suspend::Strategy::Ack,
            controller: ("flux-system".into(), "kustomize-controller".into()),
            lease: "flux-system/flux-handoff".into(),
        }
    }

    #[test]
    fn dry_run_a_denied_write_names_the_rbac_command_next() {
        let h = hints();
        let denied = Answer::Denied {
            message: "m".into(),
        };
        assert_eq!(
            next(&denied, &h),
            "flux-handoff rbac -t ks/flux-system/apps --lease flux-system/flux-handoff | \
             kubectl apply -f - (as a cluster admin)"
        );
        let refused = Answer::Refused {
            code: 422,
            message: "m".into(),
        };
        assert_eq!(next(&refused, &h), "flux-handoff doctor");
    }
}
