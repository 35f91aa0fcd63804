//! `ghcr reassert`: the GHCR handoff. Prove the credential first (no cluster call before it),
//! then — paused under the Lease when targets are given — reassert consumer Secrets and the
//! root Secret, optionally prove Flux sources pull with it, and resume on every exit path.

use std::cell::RefCell;
use std::time::Duration;

use clap::Args;
use flux_suspend::Cancel;
use flux_suspend::session::STOP_GRACE;
use ghcr_auth::plan::{SecretTarget, TargetRole};
use ghcr_auth::reassert::{Consumers, ReassertReport, Reasserter, SecretOutcome, TargetSpec};
use ghcr_auth::source::{RequestOutcome, SourceProof, SourceRef, prove_source};
use ghcr_auth::{DockerConfig, GhcrError};
use kube::Client;
use serde_json::json;

use super::check;
use super::input::{self, CredentialArgs};
use crate::cli::{Global, HolderArg, TargetArgs};
use crate::config::{GhcrConfig, split_ref};
use crate::failure::{Failure, chain};
use crate::output::Output;
use crate::{client, config, exit, session, settings};

/// `flux-handoff ghcr reassert`.
#[derive(Debug, Args)]
pub struct ReassertArgs {
    #[command(flatten)]
    pub credential: CredentialArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    /// Pause these Flux objects while reasserting (as `pause`); without any target (here or in
    /// the config) the Secrets are reasserted without a pause or Lease.
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub holder: HolderArg,
}

/// Which Secrets and Flux sources `ghcr reassert` writes and proves (also `flux-handoff rbac`).
#[derive(Debug, Args, Clone, Default)]
pub struct SecretArgs {
    /// Name of the pull Secret in every consumer namespace. Default: `[ghcr].secret_name`.
    #[arg(long, value_name = "NAME")]
    pub secret_name: Option<String>,
    /// Consumer namespaces, comma-separated, written in this order. Default: `[ghcr].namespaces`.
    #[arg(
        long,
        value_name = "NS,...",
        value_delimiter = ',',
        conflicts_with = "namespace_selector"
    )]
    pub namespace_list: Vec<String>,
    /// Consumer namespaces by label selector, e.g. ghcr-consumer=true (sorted by name).
    /// Default: `[ghcr].namespace_selector`.
    #[arg(long, value_name = "SELECTOR")]
    pub namespace_selector: Option<String>,
    /// The Secret Flux itself pulls with, `namespace/name`; written last, after every consumer
    /// holds the credential. Default: `[ghcr].root_secret`.
    #[arg(long, value_name = "NS/NAME")]
    pub root_secret: Option<String>,
    /// Flux source to prove pulls with the credential afterwards: `[oci/|helm/]namespace/name`
    /// (`OCIRepository` by default). Repeatable. Default: `[ghcr].sources`, else none.
    #[arg(long, value_name = "SOURCE")]
    pub source: Vec<String>,
}

/// Runs `ghcr reassert`.
// The output is borrowed across the Secret writes: the session reports no progress while the
// work runs, so nothing else borrows it then.
#[allow(clippy::await_holding_refcell_ref)]
pub async fn run(
    global: &Global,
    args: &ReassertArgs,
    out: &mut Output,
    cancel: Cancel,
) -> Result<u8, Failure> {
    // 1. Every input, before any I/O.
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    let ghcr = file.ghcr.as_ref();
    let input = input::resolve(&args.credential, ghcr).map_err(Failure::usage)?;
    let spec = secret_spec(&args.secrets, ghcr, &global.namespace).map_err(Failure::usage)?;
    let sources = source_refs(&args.secrets, ghcr).map_err(Failure::usage)?;
    let has_targets = !args.targets.target.is_empty() || !file.targets.is_empty();
    let settings = if has_targets {
        Some(settings::resolve(global, &args.targets, &file).map_err(Failure::usage)?)
    } else {
        None
    };

    // 2. The registry proof, before any cluster call.
    let config = check::prove(&input, out).await?;

    // 3. The handoff.
    let client = client::client(global).await?;
    let work = Work {
        client: client.clone(),
        config,
        spec,
        sources,
        deadline: global.timeout,
        poll: global.interval,
    };
    let Some(settings) = settings else {
        out.phase("no targets: reasserting without a pause or Lease");
        let reasserter = Reasserter::new(client);
        return match cancel.settle(STOP_GRACE, work.run(reasserter, out)).await {
            Some(r) => r.map(|()| exit::SUCCESS),
            None => Err(interrupted()),
        };
    };
    let mut opts = session::options(&settings, session::holder(&args.holder)?)?;
    session::recover_finished_runs(&mut opts, &args.holder, &file)?;
    let started = session::start(client.clone(), opts, cancel, out).await?;
    let members = started.members();
    let out = RefCell::new(out);
    let (out_ref, work_ref) = (&out, &work);
    let outcome = started
        .run_paused(
            |e| session::report(&mut out.borrow_mut(), &e, &members),
            |paused| async move {
                let proof = &paused.proof;
                out_ref.borrow_mut().fact(
                    "proof",
                    json!({ "passes": proof.passes(), "counters": proof.counters().to_string() }),
                );
                let reasserter = Reasserter::new(client).with_lease(paused.lease.clone());
                // The Secrets are written while the RefCell is borrowed; the session reports no
                // progress while the work runs.
                let mut out = out_ref.borrow_mut();
                let run = work_ref.run(reasserter, &mut out);
                let r = match paused.cancel.settle(STOP_GRACE, run).await {
                    Some(r) => r,
                    None => Err(interrupted()),
                };
                Ok::<_, std::convert::Infallible>(r)
            },
        )
        .await;
    let out = out.into_inner();
    session::finish(session::result(outcome.result), outcome.cleanup, out).map(|()| exit::SUCCESS)
}

fn interrupted() -> Failure {
    Failure::new(exit::INTERRUPTED, "interrupted while reasserting")
}

/// What happens while paused: the Secrets, then the source proofs.
struct Work {
    client: Client,
    config: DockerConfig,
    spec: TargetSpec,
    sources: Vec<SourceRef>,
    deadline: Duration,
    poll: Duration,
}

impl Work {
    async fn run(&self, reasserter: Reasserter, out: &mut Output) -> Result<(), Failure> {
        let report = reasserter
            .reassert(&self.config, &self.spec)
            .await
            .map_err(|e| reassert_failure(&e))?;
        report_facts(&report, out);
        if !report.is_complete() {
            return Err(incomplete(&report));
        }
        let count =
            |f: fn(&SecretOutcome) -> bool| report.results.iter().filter(|(_, _, o)| f(o)).count();
        let adopted = count(|o| matches!(o, SecretOutcome::Adopted { .. }));
        out.phase(&format!(
            "secrets reasserted: created={} updated={} unchanged={}{}",
            count(|o| matches!(o, SecretOutcome::Created { .. })),
            count(|o| matches!(o, SecretOutcome::Updated { .. })),
            count(|o| matches!(o, SecretOutcome::Unchanged { .. })),
            if adopted > 0 {
                format!(" adopted={adopted}")
            } else {
                String::new()
            }
        ));
        let mut proven = Vec::new();
        for source in &self.sources {
            let proof = prove_source(
                &self.client,
                source,
                reasserter.gate(),
                self.deadline,
                self.poll,
            )
            .await
            .map_err(|e| Failure::new(exit::KUBE_API, chain(&e)))?;
            let name = format!("{}/{}", source.namespace, source.name);
            match proof {
                SourceProof::Ready { revision } => {
                    out.phase(&format!(
                        "flux source proven: {} {name} ready{}",
                        source.resource.kind,
                        revision.map(|r| format!(" at {r}")).unwrap_or_default()
                    ));
                    proven.push(name);
                }
                other => return Err(source_failure(source, &name, other, self.deadline)),
            }
        }
        if !self.sources.is_empty() {
            out.fact("sources_proven", json!(proven));
        }
        Ok(())
    }
}

/// Counts per outcome and each Secret's outcome (names only) into the JSON document.
fn report_facts(report: &ReassertReport, out: &mut Output) {
    let mut counts = serde_json::Map::new();
    let mut each = Vec::new();
    for (role, target, outcome) in &report.results {
        let word = outcome.word();
        let n = counts
            .get(word)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        counts.insert(word.into(), json!(n + 1));
        each.push(json!({
            "namespace": target.namespace,
            "name": target.name,
            "role": match role { TargetRole::Root => "root", TargetRole::Consumer => "consumer" },
            "outcome": word,
        }));
    }
    out.fact("secret_counts", serde_json::Value::Object(counts));
    out.fact("secrets", json!(each));
}

fn incomplete(report: &ReassertReport) -> Failure {
    let failed: Vec<String> = report
        .results
        .iter()
        .filter(|(_, _, o)| !o.is_ok() && *o != SecretOutcome::NotAttempted)
        .map(|(_, t, o)| match o {
            SecretOutcome::Forbidden { verb } => format!("{t}: forbidden to {verb}"),
            other => format!("{t}: {}", other.word().replace('_', " ")),
        })
        .collect();
    let code = if report.results.iter().any(|(_, _, o)| {
        matches!(
            o,
            SecretOutcome::Forbidden { .. } | SecretOutcome::NamespaceMissing
        )
    }) {
        exit::KUBE_API
    } else {
        exit::REFUSED
    };
    let skipped = report
        .results
        .iter()
        .filter(|(_, _, o)| *o == SecretOutcome::NotAttempted)
        .count();
    Failure::new(
        code,
        format!(
            "secrets not reasserted: {} ({skipped} later Secret(s) not attempted; nothing was \
             overwritten)",
            failed.join("; ")
        ),
    )
}

fn reassert_failure(e: &GhcrError) -> Failure {
    let code = match e {
        GhcrError::Gate { .. } => exit::REFUSED,
        _ => exit::KUBE_API,
    };
    Failure::new(code, chain(e))
}

fn source_failure(
    source: &SourceRef,
    name: &str,
    proof: SourceProof,
    deadline: Duration,
) -> Failure {
    let kind = &source.resource.kind;
    match proof {
        SourceProof::Failed { reason } => Failure::new(
            exit::REGISTRY,
            format!("flux source {kind} {name} failed to pull after reassertion: {reason}"),
        ),
        SourceProof::Suspended => Failure::new(
            exit::REFUSED,
            format!("flux source {kind} {name} is suspended, so it cannot prove the credential"),
        ),
        SourceProof::TimedOut => Failure::new(
            exit::TIMEOUT,
            format!("flux source {kind} {name} not ready within {deadline:?}"),
        ),
        SourceProof::NotRequested(RequestOutcome::Moved) => Failure::new(
            exit::REFUSED,
            format!("flux source {kind} {name} kept changing; reconcile not requested"),
        ),
        SourceProof::NotRequested(RequestOutcome::Forbidden) => Failure::new(
            exit::KUBE_API,
            format!("forbidden to request a reconcile of {kind} {name}"),
        ),
        SourceProof::NotRequested(_) => Failure::new(
            exit::KUBE_API,
            format!("flux source {kind} {name} not found"),
        ),
        SourceProof::Ready { .. } => Failure::new(exit::INTERNAL, "source ready judged a failure"),
    }
}

/// The Secrets to reassert, flags over `[ghcr]`.
pub(crate) fn secret_spec(
    args: &SecretArgs,
    file: Option<&GhcrConfig>,
    default_ns: &str,
) -> Result<TargetSpec, String> {
    let empty = GhcrConfig::default();
    let file = file.unwrap_or(&empty);
    let consumers = if !args.namespace_list.is_empty() {
        Consumers::Namespaces(args.namespace_list.clone())
    } else if let Some(sel) = &args.namespace_selector {
        Consumers::Selector(sel.clone())
    } else {
        match (&file.namespace_selector, file.namespaces.is_empty()) {
            (Some(_), false) => {
                return Err(
                    "config: [ghcr] sets both namespaces and namespace_selector; choose one".into(),
                );
            }
            (Some(sel), true) => Consumers::Selector(sel.clone()),
            (None, _) => Consumers::Namespaces(file.namespaces.clone()),
        }
    };
    if let Consumers::Namespaces(list) = &consumers
        && list.iter().any(|n| !is_dns_label(n))
    {
        return Err("--namespace-list: every entry must be a namespace name".into());
    }
    if matches!(&consumers, Consumers::Selector(s) if s.trim().is_empty()) {
        return Err("--namespace-selector must not be empty".into());
    }
    if let Consumers::Selector(s) = &consumers {
        ghcr_auth::selector::validate(s).map_err(|e| format!("--namespace-selector: {e}"))?;
    }
    let secret_name = args
        .secret_name
        .clone()
        .or_else(|| file.secret_name.clone())
        .unwrap_or_default();
    let has_consumers = !matches!(&consumers, Consumers::Namespaces(l) if l.is_empty());
    if has_consumers && secret_name.is_empty() {
        return Err(
            "no Secret name for the consumer namespaces: pass --secret-name or set \
                    [ghcr].secret_name"
                .into(),
        );
    }
    let root = match args.root_secret.as_ref().or(file.root_secret.as_ref()) {
        Some(text) => {
            let (ns, name) =
                split_ref(text, default_ns).map_err(|e| format!("--root-secret: {e}"))?;
            Some(SecretTarget::new(ns, name))
        }
        None => None,
    };
    if !has_consumers && root.is_none() {
        return Err(
            "nothing to reassert: pass --namespace-list, --namespace-selector or \
                    --root-secret (or set them in [ghcr])"
                .into(),
        );
    }
    Ok(TargetSpec {
        secret_name,
        consumers,
        root,
    })
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The Flux sources to prove, flags over ``[ghcr].sources``.
pub(crate) fn source_refs(
    args: &SecretArgs,
    file: Option<&GhcrConfig>,
) -> Result<Vec<SourceRef>, String> {
    let texts = if args.source.is_empty() {
        file.map(|f| f.sources.clone()).unwrap_or_default()
    } else {
        args.source.clone()
    };
    texts
        .iter()
        .map(|text| {
            let bad = || format!("--source {text:?}: expected [oci/|helm/]namespace/name");
            let parts: Vec<&str> = text.split('/').collect();
            let (kind, ns, name) = match parts.as_slice() {
                [kind, ns, name] => (*kind, *ns, *name),
                [ns, name] => ("oci", *ns, *name),
                _ => return Err(bad()),
            };
            if !is_dns_label(ns) || name.is_empty() {
                return Err(bad());
            }
            match kind {
                "oci" | "ocirepository" => Ok(SourceRef::oci_repository(ns, name)),
                "helm" | "helmrepository" => Ok(SourceRef::helm_repository(ns, name)),
                _ => Err(bad()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: ReassertArgs,
    }

    fn parse(args: &[&str]) -> ReassertArgs {
        let mut v = vec!["t", "--credential-env", "X", "--image", "ghcr.io/a/b:1"];
        v.extend(args);
        T::parse_from(v).a
    }

    #[test]
    fn consumers_and_root_resolve_from_flags() {
        let a = parse(&[
            "--secret-name",
            "pull",
            "--namespace-list",
            "a,b",
            "--root-secret",
            "flux-system/ghcr",
        ]);
        let spec = secret_spec(&a.secrets, None, "flux-system").unwrap();
        assert_eq!(
            spec.consumers,
            Consumers::Namespaces(vec!["a".into(), "b".into()])
        );
        assert_eq!(spec.root, Some(SecretTarget::new("flux-system", "ghcr")));
    }

    #[test]
    fn nothing_to_reassert_or_no_secret_name_is_a_usage_error() {
        assert!(
            secret_spec(&parse(&[]).secrets, None, "x")
                .unwrap_err()
                .starts_with("nothing to reassert")
        );
        assert!(
            secret_spec(&parse(&["--namespace-list", "a"]).secrets, None, "x")
                .unwrap_err()
                .starts_with("no Secret name")
        );
        assert!(
            secret_spec(
                &parse(&["--secret-name", "p", "--namespace-list", "A_B"]).secrets,
                None,
                "x"
            )
            .is_err()
        );
    }

    #[test]
    fn sources_default_to_oci_repositories() {
        let a = parse(&["--source", "flux-system/apps", "--source", "helm/ns/charts"]);
        let s = source_refs(&a.secrets, None).unwrap();
        assert_eq!(s[0].resource.kind, "OCIRepository");
        assert_eq!(s[1].resource.kind, "HelmRepository");
        assert!(source_refs(&parse(&["--source", "x/y/z/w"]).secrets, None).is_err());
    }
}
