//! Scenario 6, the tool a user would pick instead: `flux suspend kustomization` and `flux
//! resume kustomization` (the real `flux` CLI, built by `cargo xtask bench` from Go modules) of
//! the full handoff's chain — parent and target, one process each, both names in one call —
//! against a tree seeded and played like the full handoff's. The CLI talks through the counting
//! proxy with a kubeconfig written the way the shell-way scenario writes kubectl's (the
//! forwarder adds the token; nothing is printed from the kubeconfig). Whether each command did
//! its job is checked afterwards through the admin client (untimed): `flux suspend` exits 0
//! even when an object was not patched.
//!
//! For comparison, on a second tree seeded alike, the library's pause of the same chain
//! (Lease, fences, acknowledgements, proof) and its resume and release, with no work between:
//! what a bare suspend and resume do not do, timed in the same run.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use flux_suspend::object::kustomization_resource;
use kube::api::{Api, DynamicObject};
use serde::Serialize;
use tokio::process::Command;

use super::handoff::{handoff, target};
use super::shell::point_at;
use super::stats::Summary;
use super::{Settings, ms, setup};
use fault_proxy::Proxy;
use fault_proxy::pass::{Forwarder, token_of};
use flux_model::model::seed::PARENT;

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// `flux suspend kustomization <parent> <target>`, spawn to exit.
    pub suspend_ms: f64,
    /// `flux resume kustomization <target> <parent>`, spawn to exit.
    pub resume_ms: f64,
    /// Requests of both commands (discovery included).
    pub requests: u64,
    pub by_verb: BTreeMap<String, u64>,
    /// The library's pause (proven) and resume of the same chain, Lease acquire to release.
    pub handoff_ms: f64,
    pub handoff_requests: u64,
}

/// Runs scenario 6 once with the `flux` binary `flux`.
pub async fn run_once(
    admin: &kube::Client,
    s: &Settings,
    flux: &Path,
    scratch: &Path,
) -> anyhow::Result<Run> {
    let tree = setup::seeded(admin, "bench-flux", s).await?;
    let proxy = Proxy::start().await?;
    let dir = scratch.join(format!("flux-{}", tree.ns));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    proxy.write_kubeconfig(&kubeconfig)?;
    let forwarder = Forwarder::start(proxy.url(), &token_of(&kubeconfig)?).await?;
    point_at(&kubeconfig, &forwarder.url())?;
    let cli = Cli {
        bin: flux,
        kubeconfig: &kubeconfig,
        cache: &dir.join("kube-cache"),
        ns: &tree.ns,
    };
    let measured = suspend_resume(&cli, admin, &tree.ns).await;
    tree.model.shutdown().await;
    drop(forwarder);
    let _ = std::fs::remove_dir_all(&dir);
    let (suspend_ms, resume_ms) = measured?;

    let tree = setup::seeded(admin, "bench-flux-lib", s).await?;
    let lib = Proxy::start().await?;
    let start = Instant::now();
    let done = handoff(&lib.client()?, &tree.ns, None, s.interval).await;
    let took = start.elapsed();
    tree.model.shutdown().await;
    done.context("the library's pause and resume")?;
    Ok(Run {
        suspend_ms,
        resume_ms,
        requests: proxy.total(),
        by_verb: proxy.counts(),
        handoff_ms: ms(took),
        handoff_requests: lib.total(),
    })
}

/// `flux suspend` then `flux resume` of the chain, each checked on the server; their ms.
async fn suspend_resume(
    cli: &Cli<'_>,
    admin: &kube::Client,
    ns: &str,
) -> anyhow::Result<(f64, f64)> {
    let suspend = cli
        .run(&["suspend", "kustomization", PARENT, target()])
        .await?;
    expect_suspend(admin, ns, true).await?;
    let resume = cli
        .run(&["resume", "kustomization", target(), PARENT])
        .await?;
    expect_suspend(admin, ns, false).await?;
    Ok((suspend, resume))
}

/// A `flux` CLI talking through a counting proxy, set up the way [`run_once`] sets up its own
/// (for the real-Flux scenario): kubeconfig, forwarder and cache in `dir`.
pub struct ProxiedCli {
    bin: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
    cache: std::path::PathBuf,
    ns: String,
    dir: std::path::PathBuf,
    _forwarder: Forwarder,
}

impl ProxiedCli {
    /// Writes the kubeconfig for `proxy` into `dir` and starts the forwarder.
    pub async fn through(proxy: &Proxy, bin: &Path, dir: &Path, ns: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let kubeconfig = dir.join("kubeconfig");
        proxy.write_kubeconfig(&kubeconfig)?;
        let forwarder = Forwarder::start(proxy.url(), &token_of(&kubeconfig)?).await?;
        point_at(&kubeconfig, &forwarder.url())?;
        Ok(Self {
            bin: bin.to_path_buf(),
            cache: dir.join("kube-cache"),
            kubeconfig,
            ns: ns.to_string(),
            dir: dir.to_path_buf(),
            _forwarder: forwarder,
        })
    }

    /// Runs `flux ARGS -n NS`; its wall time in ms; fails on a non-zero exit.
    pub async fn run(&self, args: &[&str]) -> anyhow::Result<f64> {
        Cli {
            bin: &self.bin,
            kubeconfig: &self.kubeconfig,
            cache: &self.cache,
            ns: &self.ns,
        }
        .run(args)
        .await
    }

    /// Stops the forwarder and removes the directory.
    pub fn close(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How the `flux` processes are started.
struct Cli<'a> {
    bin: &'a Path,
    kubeconfig: &'a Path,
    cache: &'a Path,
    ns: &'a str,
}

impl Cli<'_> {
    /// Runs `flux ARGS -n NS`, returns its wall time in ms; fails on a non-zero exit.
    async fn run(&self, args: &[&str]) -> anyhow::Result<f64> {
        let start = Instant::now();
        let out = Command::new(self.bin)
            .args(args)
            .args(["--namespace", self.ns, "--timeout", "1m"])
            .arg("--kubeconfig")
            .arg(self.kubeconfig)
            .env("KUBECACHEDIR", self.cache)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context("starting flux")?;
        let took = start.elapsed();
        if !out.status.success() {
            bail!(
                "flux {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(ms(took))
    }
}

/// Fails unless parent and target both have `spec.suspend == want` on the server.
async fn expect_suspend(admin: &kube::Client, ns: &str, want: bool) -> anyhow::Result<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), ns, &kustomization_resource());
    for name in [PARENT, target()] {
        let obj = api.get(name).await?;
        let got = obj.data["spec"]["suspend"].as_bool().unwrap_or(false);
        if got != want {
            bail!("after `flux`, {ns}/{name} has spec.suspend={got}, expected {want}");
        }
    }
    Ok(())
}

/// The scenario's table rows, its `bench:` line and its JSON: `s.reps` runs, or one line
/// saying it was skipped when no `flux` binary was given (the build failed; `cargo xtask bench`
/// said why).
pub async fn scenario(
    admin: &kube::Client,
    s: &Settings,
    scratch: &Path,
) -> anyhow::Result<(Vec<String>, String, serde_json::Value)> {
    let Some(flux) = s.flux_bin.clone().filter(|b| b.is_file()) else {
        eprintln!("flux-bench: no --flux-bin; the flux CLI peer is skipped");
        return Ok((
            vec!["| flux CLI peer | skipped | no flux binary (see the xtask line) |".into()],
            "bench: flux_cli suspend_ms=n/a resume_ms=n/a requests=n/a handoff_ms=n/a".into(),
            serde_json::json!({ "skipped": "no flux binary" }),
        ));
    };
    let mut runs = Vec::new();
    for rep in 0..s.reps {
        eprintln!("flux-bench: flux CLI peer {}/{}", rep + 1, s.reps);
        runs.push(Box::pin(run_once(admin, s, &flux, scratch)).await?);
    }
    #[allow(clippy::cast_precision_loss)] // request counts are small
    let f = |g: fn(&Run) -> f64| Summary::of(&runs.iter().map(g).collect::<Vec<_>>());
    let suspend = f(|r| r.suspend_ms);
    let resume = f(|r| r.resume_ms);
    #[allow(clippy::cast_precision_loss)] // request counts are small
    let requests = f(|r| r.requests as f64);
    let lib = f(|r| r.handoff_ms);
    #[allow(clippy::cast_precision_loss)] // request counts are small
    let lib_req = f(|r| r.handoff_requests as f64);
    let verbs = runs.last().map(|r| r.by_verb.clone()).unwrap_or_default();
    let table = vec![
        format!(
            "| flux CLI peer | `flux suspend kustomization` ms (parent + target) | {} |",
            suspend.show(0)
        ),
        format!(
            "| flux CLI peer | `flux resume kustomization` ms (target + parent) | {} |",
            resume.show(0)
        ),
        format!(
            "| flux CLI peer | API requests (both commands) | {} |",
            requests.show(0)
        ),
        format!(
            "| flux CLI peer | requests by verb (last run) | {} |",
            verbs
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "| flux CLI peer | library pause (proven) + resume ms, same chain | {} |",
            lib.show(0)
        ),
        format!(
            "| flux CLI peer | library pause + resume API requests | {} |",
            lib_req.show(0)
        ),
    ];
    let line = format!(
        "bench: flux_cli suspend_ms={:.0} resume_ms={:.0} requests={:.0} handoff_ms={:.0}",
        suspend.median, resume.median, requests.median, lib.median
    );
    let v = serde_json::json!({
        "flux": flux.display().to_string(),
        "suspend_ms": suspend, "resume_ms": resume, "requests": requests,
        "handoff_ms": lib, "handoff_requests": lib_req, "runs": runs,
    });
    Ok((table, line, v))
}
