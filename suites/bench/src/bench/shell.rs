//! Scenario 2, the shell way: the same handoff as scenario 1 done as the shell tool did it —
//! one `kubectl` process (piped into `jq` where a field is needed) per step, against the same
//! server through the proxy (`Proxy::write_kubeconfig`).
//!
//! Steps: create the Lease; before every mutation read the Lease and renew it with a JSON
//! Patch `test`ing its resourceVersion; fence parent then target with a JSON Patch `test`ing
//! uid and resourceVersion; poll each acknowledgement; prove with two passes that read both
//! objects; for each Secret read it, `kubectl apply` it, read it back; resume target then
//! parent with `test` ops on uid, owner and suspend; release the Lease. The proof keeps the
//! acknowledged resourceVersions as its baseline, exactly like the library, so both sides have
//! the same mandated quiet time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use secrecy::ExposeSecret;
use serde::Serialize;
use serde_json::json;
use tokio::process::Command;

use super::handoff::{BUDGET, CONSUMERS, ROOT_SECRET, SECRET, mandated_quiet, prepare, target};
use super::{Settings, ms, setup};
use fault_proxy::Proxy;
use fault_proxy::pass::{Forwarder, token_of};
use flux_model::model::seed::PARENT;

const OWNER_KEY: &str = "flux-handoff.io/owner";
const LEASE: &str = "flux-handoff";

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub wall_ms: f64,
    pub overhead_ms: f64,
    pub requests: u64,
    /// `kubectl` and `jq` processes started.
    pub processes: u64,
    pub by_verb: std::collections::BTreeMap<String, u64>,
}

/// Runs scenario 2 once.
pub async fn run_once(admin: &kube::Client, s: &Settings, scratch: &Path) -> anyhow::Result<Run> {
    let (tree, consumers) = prepare(admin, s, "bench-sh").await?;
    let proxy = Proxy::start().await?;
    let dir = scratch.join(format!("shell-{}", tree.ns));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    proxy.write_kubeconfig(&kubeconfig)?;
    let forwarder = Forwarder::start(proxy.url(), &token_of(&kubeconfig)?).await?;
    point_at(&kubeconfig, &forwarder.url())?;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin)?;
    std::os::unix::fs::symlink(kubectl_binary()?, bin.join("kubectl"))?;
    let config = setup::credential()?;
    let mut sh = Shell {
        kubeconfig,
        cache: dir.join("kube-cache"),
        ns: tree.ns.clone(),
        holder: format!("shell-{}", testkit::random_suffix(8)),
        path: format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
        dockerconfig_b64: base64::engine::general_purpose::STANDARD
            .encode(config.render().expose_secret()),
        processes: 0,
    };
    let start = Instant::now();
    sh.handoff(&consumers, s.interval).await?;
    let wall = start.elapsed();
    tree.model.shutdown().await;
    drop(forwarder);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Run {
        wall_ms: ms(wall),
        overhead_ms: ms(wall.saturating_sub(mandated_quiet(s.interval))),
        requests: proxy.total(),
        processes: sh.processes,
        by_verb: proxy.counts(),
    })
}

struct Shell {
    kubeconfig: PathBuf,
    cache: PathBuf,
    ns: String,
    holder: String,
    path: String,
    dockerconfig_b64: String,
    processes: u64,
}

impl Shell {
    /// Runs one shell step (`sh -c`), returns its stdout; fails on a non-zero exit.
    async fn step(&mut self, script: &str) -> anyhow::Result<String> {
        // Each `kubectl` and each `jq` in the pipeline is one process.
        self.processes +=
            (script.matches("kubectl ").count() + script.matches("jq ").count()) as u64;
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache)
            .env("PATH", &self.path)
            .env("NS", &self.ns)
            .env("HOLDER", &self.holder)
            .env("DOCKERCONFIG_B64", &self.dockerconfig_b64)
            .output()
            .await
            .context("running sh")?;
        if !out.status.success() {
            bail!(
                "shell step failed ({}): {script}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    async fn handoff(&mut self, consumers: &[String], interval: Duration) -> anyhow::Result<()> {
        let now = now();
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": { "name": LEASE, "namespace": self.ns },
            "spec": { "holderIdentity": self.holder, "leaseDurationSeconds": 60,
                      "acquireTime": now, "renewTime": now, "leaseTransitions": 1 },
        });
        self.step(&format!(
            "kubectl get lease {LEASE} -n \"$NS\" -o json 2>/dev/null | jq -r '.spec.holderIdentity // empty'"
        ))
        .await?;
        self.step(&format!("echo '{lease}' | kubectl create -f - -o name"))
            .await?;

        let parent_nonce = self.fence(PARENT, false).await?;
        let (_, parent_rv) = self.await_ack(PARENT, &parent_nonce, interval).await?;
        let target_nonce = self.fence(target(), true).await?;
        let (_, target_rv) = self.await_ack(target(), &target_nonce, interval).await?;
        self.prove(parent_rv, target_rv, interval).await?;

        let mut secrets: Vec<(String, &str)> =
            consumers.iter().map(|c| (c.clone(), SECRET)).collect();
        secrets.push((self.ns.clone(), ROOT_SECRET));
        debug_assert_eq!(secrets.len(), CONSUMERS + 1);
        for (ns, name) in secrets {
            self.assert_lease().await?;
            self.secret(&ns, name).await?;
        }

        self.resume(target(), true).await?;
        self.resume(PARENT, false).await?;
        let rv = self
            .step(&format!(
                "kubectl get lease {LEASE} -n \"$NS\" -o json | jq -r .metadata.resourceVersion"
            ))
            .await?;
        let patch = json!([
            { "op": "test", "path": "/metadata/resourceVersion", "value": rv },
            { "op": "test", "path": "/spec/holderIdentity", "value": self.holder },
            { "op": "remove", "path": "/spec/holderIdentity" },
        ]);
        self.step(&format!(
            "kubectl patch lease {LEASE} -n \"$NS\" --type=json -p '{patch}' -o name"
        ))
        .await?;
        Ok(())
    }

    /// Reads the Lease (ours?) and renews it with a CAS on its resourceVersion.
    async fn assert_lease(&mut self) -> anyhow::Result<()> {
        let rv = self
            .step(&format!(
                "kubectl get lease {LEASE} -n \"$NS\" -o json | jq -r --arg h \"$HOLDER\" 'select(.spec.holderIdentity == $h) | .metadata.resourceVersion'"
            ))
            .await?;
        if rv.is_empty() {
            bail!("the shell lost its Lease");
        }
        let patch = json!([
            { "op": "test", "path": "/metadata/resourceVersion", "value": rv },
            { "op": "replace", "path": "/spec/renewTime", "value": now() },
        ]);
        self.step(&format!(
            "kubectl patch lease {LEASE} -n \"$NS\" --type=json -p '{patch}' -o name"
        ))
        .await?;
        Ok(())
    }

    /// Fences a Kustomization with a CAS patch; returns the requestedAt nonce.
    async fn fence(&mut self, name: &str, child: bool) -> anyhow::Result<String> {
        self.assert_lease().await?;
        let read = self
            .step(&format!(
                "kubectl get kustomization {name} -n \"$NS\" -o json | jq -r '[.metadata.uid, .metadata.resourceVersion, (.metadata.annotations != null | tostring)] | @tsv'"
            ))
            .await?;
        let [uid, rv, has_annotations] = fields(&read)?;
        let nonce = format!("shell-{}", testkit::random_suffix(8));
        let mut ops = vec![
            json!({ "op": "test", "path": "/metadata/uid", "value": uid }),
            json!({ "op": "test", "path": "/metadata/resourceVersion", "value": rv }),
        ];
        if has_annotations != "true" {
            ops.push(json!({ "op": "add", "path": "/metadata/annotations", "value": {} }));
        }
        ops.push(json!({ "op": "add", "path": "/metadata/annotations/flux-handoff.io~1owner", "value": format!("{};1", self.holder) }));
        ops.push(json!({ "op": "add", "path": "/metadata/annotations/reconcile.fluxcd.io~1requestedAt", "value": nonce }));
        if child {
            ops.push(json!({ "op": "add", "path": "/metadata/annotations/kustomize.toolkit.fluxcd.io~1reconcile", "value": "disabled" }));
        }
        ops.push(json!({ "op": "add", "path": "/spec/suspend", "value": true }));
        let patch = serde_json::Value::Array(ops);
        self.step(&format!(
            "kubectl patch kustomization {name} -n \"$NS\" --type=json -p '{patch}' -o name"
        ))
        .await?;
        Ok(nonce)
    }

    /// Polls until `status.lastHandledReconcileAt == nonce`; returns (uid, resourceVersion).
    async fn await_ack(
        &mut self,
        name: &str,
        nonce: &str,
        interval: Duration,
    ) -> anyhow::Result<(String, String)> {
        let deadline = Instant::now() + BUDGET;
        loop {
            let read = self
                .step(&format!(
                    "kubectl get kustomization {name} -n \"$NS\" -o json | jq -r '[.metadata.uid, .metadata.resourceVersion, (.status.lastHandledReconcileAt // \"-\")] | @tsv'"
                ))
                .await?;
            let [uid, rv, handled] = fields(&read)?;
            if handled == nonce {
                return Ok((uid, rv));
            }
            if Instant::now() + interval > deadline {
                bail!("{name} did not acknowledge within {BUDGET:?}");
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// Two consecutive passes in which both objects are ours, suspended and unchanged.
    async fn prove(
        &mut self,
        parent_rv: String,
        target_rv: String,
        interval: Duration,
    ) -> anyhow::Result<()> {
        let mut previous = vec![parent_rv, target_rv];
        let mut streak = 0;
        let deadline = Instant::now() + BUDGET;
        loop {
            let mut seen = Vec::new();
            let mut ok = true;
            for name in [PARENT, target()] {
                let read = self
                    .step(&format!(
                        "kubectl get kustomization {name} -n \"$NS\" -o json | jq -r '[.metadata.resourceVersion, (.metadata.annotations[\"{OWNER_KEY}\"] // \"-\"), (.spec.suspend | tostring)] | @tsv'"
                    ))
                    .await?;
                let [rv, owner, suspend] = fields(&read)?;
                ok &= owner == format!("{};1", self.holder) && suspend == "true";
                seen.push(rv);
            }
            streak = if ok && seen == previous {
                streak + 1
            } else {
                0
            };
            previous = seen;
            if streak >= 2 {
                return Ok(());
            }
            if Instant::now() + interval > deadline {
                bail!("stable pause not proven within {BUDGET:?}");
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// Reads the Secret, applies it when it differs, reads it back.
    async fn secret(&mut self, ns: &str, name: &str) -> anyhow::Result<()> {
        let get = format!(
            "kubectl get secret {name} -n {ns} -o json 2>/dev/null | jq -r '.data[\".dockerconfigjson\"] // empty'"
        );
        if self.step(&get).await? == self.dockerconfig_b64 {
            return Ok(());
        }
        self.step(&format!(
            "jq -n --arg d \"$DOCKERCONFIG_B64\" '{{apiVersion: \"v1\", kind: \"Secret\", type: \"kubernetes.io/dockerconfigjson\", metadata: {{name: \"{name}\", namespace: \"{ns}\"}}, data: {{\".dockerconfigjson\": $d}}}}' | kubectl apply -f - -o name"
        ))
        .await?;
        if self.step(&get).await? != self.dockerconfig_b64 {
            bail!("read-back of {ns}/{name} differs");
        }
        Ok(())
    }

    /// Releases one fenced Kustomization with a CAS patch.
    async fn resume(&mut self, name: &str, child: bool) -> anyhow::Result<()> {
        self.assert_lease().await?;
        let uid = self
            .step(&format!(
                "kubectl get kustomization {name} -n \"$NS\" -o json | jq -r .metadata.uid"
            ))
            .await?;
        let mut ops = vec![
            json!({ "op": "test", "path": "/metadata/uid", "value": uid }),
            json!({ "op": "test", "path": "/metadata/annotations/flux-handoff.io~1owner", "value": format!("{};1", self.holder) }),
            json!({ "op": "test", "path": "/spec/suspend", "value": true }),
            json!({ "op": "replace", "path": "/spec/suspend", "value": false }),
            json!({ "op": "remove", "path": "/metadata/annotations/flux-handoff.io~1owner" }),
        ];
        if child {
            ops.push(json!({ "op": "remove", "path": "/metadata/annotations/kustomize.toolkit.fluxcd.io~1reconcile" }));
        }
        let patch = serde_json::Value::Array(ops);
        self.step(&format!(
            "kubectl patch kustomization {name} -n \"$NS\" --type=json -p '{patch}' -o name"
        ))
        .await?;
        Ok(())
    }
}

/// Splits a `@tsv` line into exactly `N` fields.
fn fields<const N: usize>(line: &str) -> anyhow::Result<[String; N]> {
    let parts: Vec<String> = line.split('\t').map(str::to_string).collect();
    parts
        .try_into()
        .map_err(|p: Vec<String>| anyhow::anyhow!("expected {N} fields, got {}", p.len()))
}

/// RFC 3339 with microseconds, as `MicroTime` wants.
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// Points the kubeconfig's cluster at `server`.
pub fn point_at(kubeconfig: &Path, server: &str) -> anyhow::Result<()> {
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(kubeconfig)?)?;
    for cluster in doc["clusters"].as_array_mut().into_iter().flatten() {
        cluster["cluster"]["server"] = json!(server);
    }
    std::fs::write(kubeconfig, serde_json::to_vec(&doc)?)?;
    Ok(())
}

/// The real `kubectl`: where `kubectl` on `PATH` is the Cloud SDK's version dispatcher (which
/// first asks the server for `/version`, then runs `kubectl.<minor>`), the newest
/// `kubectl.1.<minor>` beside it, else `kubectl` itself.
fn kubectl_binary() -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .context("kubectl is not on PATH")?;
    let real = std::fs::canonicalize(&found)?;
    let dir = real.parent().map(Path::to_path_buf).unwrap_or_default();
    let newest = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let minor: u32 = name.strip_prefix("kubectl.1.")?.parse().ok()?;
            Some((minor, e.path()))
        })
        .max_by_key(|(m, _)| *m)
        .map(|(_, p)| p);
    Ok(newest.unwrap_or(real))
}
