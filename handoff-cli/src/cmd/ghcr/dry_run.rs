//! `ghcr reassert --dry-run=server`: the credential proven (a read of the registry, as always,
//! before any cluster call), then — with targets — the pause's first writes dry
//! ([`crate::cmd::dry_run`]), then every Secret write the reassertion would make, consumers
//! first and the root last, each sent with `dryRun=All` ([`Reasserter::dry_run`]). No Flux
//! source is proven (that waits for a reconcile) and nothing is changed. Only the plain route
//! (pull Secrets by name); staged keys and External Secrets are refused before any I/O.

use flux_suspend::{Cancel, SessionOptions};
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::plan::TargetRole;
use ghcr_auth::reassert::{Reasserter, SecretOutcome, TargetSpec};
use kube::Client;
use serde_json::json;

use crate::cmd::dry_run::Tally;
use crate::failure::Failure;
use crate::output::Output;
use handoff_app::next::Hints;
use handoff_app::next::rbac_next;

/// Runs the dry run; `pause` is the session's options and hints when targets are given.
pub async fn run(
    client: Client,
    config: &DockerConfig,
    spec: &TargetSpec,
    pause: Option<(SessionOptions, Hints)>,
    cancel: Cancel,
    out: &mut Output,
) -> Result<u8, Failure> {
    let mut tally = Tally::default();
    let next = if let Some((opts, hints)) = pause {
        crate::cmd::dry_run::pause_writes(client.clone(), opts, cancel, out, &hints, &mut tally)
            .await?;
        rbac_next(&hints)
    } else {
        out.stage("dry run");
        out.cleanup_complete(true);
        out.phase("no targets: the Secrets only, without a pause or Lease");
        "flux-handoff rbac (with this command's Secret flags) | kubectl apply -f -".into()
    };
    let report = Reasserter::new(client)
        .dry_run()
        .reassert(config, spec)
        .await
        .map_err(|e| super::failure(&ghcr_auth::FlowError::Reassert(e)))?;
    for (role, target, outcome) in &report.results {
        let what = match role {
            TargetRole::Root => "secret (root)",
            TargetRole::Consumer => "secret (consumer)",
        };
        let name = format!("Secret {target} ({what})");
        let (line, answer) = match outcome {
            SecretOutcome::Created { .. } => (format!("would create {name}"), "would_pass"),
            SecretOutcome::Updated { .. } => (format!("would patch {name}"), "would_pass"),
            SecretOutcome::Unchanged { .. } => {
                out.phase(&format!("{name} already holds the credential: no write"));
                continue;
            }
            SecretOutcome::Forbidden { verb } => (format!("{verb} {name} denied (403)"), "denied"),
            other => (format!("{name}: {}", other.word()), "refused"),
        };
        let verb = match outcome {
            SecretOutcome::Created { .. } => "create",
            SecretOutcome::Forbidden { verb } => verb,
            _ => "patch",
        };
        let fact = json!({
            "verb": verb, "kind": "Secret", "namespace": target.namespace,
            "name": target.name, "what": what, "answer": answer,
        });
        tally.write(out, &line, answer == "would_pass", fact, next.clone());
    }
    out.note("dry run: no Flux source was proven (that needs the real write)");
    tally.end(out)
}
