//! Scenario 5, footprint of the real `flux-handoff` release binary: start-up to its first API
//! request (`fences`, read-only, timed from spawn to the first request the proxy sees), peak
//! RSS of a full `run -- true` handoff (`/usr/bin/time -f %M`), and the binary's size.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::Command;

use super::handoff::target;
use super::{Settings, ms, setup};
use fault_proxy::Proxy;

/// Milliseconds from spawning `flux-handoff fences` to the first request at the proxy.
pub async fn startup_once(bin: &Path, scratch: &Path, ns: &str) -> anyhow::Result<f64> {
    let proxy = Proxy::start().await?;
    let kubeconfig = scratch.join(format!("startup-{}.kubeconfig", testkit::random_suffix(6)));
    proxy.write_kubeconfig(&kubeconfig)?;
    let start = Instant::now();
    let mut child = Command::new(bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--namespace", ns, "fences"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting flux-handoff")?;
    let deadline = start + Duration::from_secs(30);
    let first = loop {
        if proxy.total() > 0 {
            break start.elapsed();
        }
        if Instant::now() > deadline {
            let _ = child.kill().await;
            bail!("flux-handoff sent no request within 30s");
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    };
    let _ = child.wait().await?;
    let _ = std::fs::remove_file(&kubeconfig);
    Ok(ms(first))
}

/// Peak RSS (MB) of `flux-handoff run --target infrastructure ... -- true` on a fresh tree.
pub async fn rss_once(
    admin: &kube::Client,
    s: &Settings,
    bin: &Path,
    scratch: &Path,
) -> anyhow::Result<f64> {
    let tree = setup::seeded(admin, "bench-rss", s).await?;
    let proxy = Proxy::start().await?;
    let kubeconfig = scratch.join(format!("rss-{}.kubeconfig", tree.ns));
    proxy.write_kubeconfig(&kubeconfig)?;
    let time_out = scratch.join(format!("rss-{}.time", tree.ns));
    let interval = format!("{}ms", s.interval.as_millis());
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&time_out)
        .arg(bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--namespace",
            &tree.ns,
            "--interval",
            &interval,
            "--timeout",
            "60s",
        ])
        .args(["run", "--target", target()])
        .args(["--lease", &format!("{}/flux-handoff", tree.ns)])
        .args(["--controller", &format!("{}/kustomize-controller", tree.ns)])
        .args(["--", "true"])
        .stdin(Stdio::null())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .output()
        .await
        .context("running /usr/bin/time flux-handoff run")?;
    tree.model.shutdown().await;
    if !out.status.success() {
        bail!(
            "flux-handoff run failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let kb: f64 = std::fs::read_to_string(&time_out)?
        .lines()
        .rev()
        .find_map(|l| l.trim().parse().ok())
        .context("no %M in the /usr/bin/time output")?;
    let _ = std::fs::remove_file(&kubeconfig);
    let _ = std::fs::remove_file(&time_out);
    Ok(kb / 1024.0)
}

/// Size of the binary in MB.
pub fn binary_mb(bin: &Path) -> anyhow::Result<f64> {
    #[allow(clippy::cast_precision_loss)] // a binary is far below 2^52 bytes
    Ok(std::fs::metadata(bin)?.len() as f64 / (1024.0 * 1024.0))
}
