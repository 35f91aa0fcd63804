//! deadline (issue 25): the holder's own deadline and late writes, with the real binary.
//!
//! 1. **hang**: `run` with a command that ticks into a file, through the proxy; the proxy then
//!    freezes (requests get no answer and no error, connections stay open) while a healthy
//!    client runs `fences recover --yes` through a proxy of its own, whose first release is
//!    held. At that moment the command must be gone; its file never grows after; the holder
//!    exits 6 by itself; recovery restores the pre-run state.
//! 2. **partition**: the same, but the holder's proxy closes every connection and refuses new
//!    ones (a partition of the holder) during `fences recover`.
//! 3. **late**: the parent's fence write is held by the proxy; the run is interrupted twice (the
//!    write is abandoned); once it exited, the proxy forwards the write: it must not land.
//!
//! Findings: a command alive or ticking after recovery's first release, or a late write that
//! landed, is an unexpected change; a fence left is a leaked fence; a holder that does not
//! exit by itself within the bound, or exits with another code, is "other".

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fault_proxy::Proxy;

use super::cell::{Cell, TARGET};
use super::crash::check_and_recover;
use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally, finish};

/// The cases, in the order they run.
const CASES: [&str; 3] = ["hang", "partition", "late"];

/// Every case once (the same with `--quick`: each is one run).
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let mut findings = Vec::new();
    for case in CASES {
        let found = match case {
            "late" => late(s, base).await,
            cut => cut_off(s, base, cut == "partition").await,
        }
        .with_context(|| format!("deadline {case}"))?;
        eprintln!(
            "flux-chaos: deadline {case}: {}",
            if found.is_empty() { "ok" } else { "FOUND" }
        );
        findings.extend(found);
    }
    Ok(Tally {
        scenario: "deadline",
        count: CASES.len(),
        line: format!(
            "chaos: deadline cases={} findings={}",
            CASES.len(),
            findings.len()
        ),
        findings,
    })
}

fn ticks(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// Whether process `pid` still runs (a zombie runs nothing).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'))
}

/// Cases 1 and 2: the holder is cut off (frozen, or partitioned) while recovery acts.
async fn cut_off(s: &Settings, base: &Baseline, partition: bool) -> anyhow::Result<Vec<Finding>> {
    let cell = Cell::new(s, if partition { "dl-part" } else { "dl-hang" }).await?;
    let before = cell.state().await?;
    let (tick_file, pid_file) = (cell.dir.join("ticks"), cell.dir.join("pid"));
    let script = format!(
        "echo $$ > {p}; while true; do date +%s%N >> {t}; sleep 0.2; done",
        p = pid_file.display(),
        t = tick_file.display()
    );
    let mut cmd = cell.cli(&cell.through_proxy);
    cmd.args([
        "run", "--target", TARGET, "--grace", "5s", "--", "sh", "-c", &script,
    ]);
    let holder = cmd.spawn()?;
    let started = tokio::time::Instant::now() + s.run_bound;
    while ticks(&tick_file) < 3 {
        anyhow::ensure!(
            tokio::time::Instant::now() < started,
            "the command never ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid = std::fs::read_to_string(&pid_file)?.trim().to_string();
    if partition {
        // Not awaited to its end: the listener stays closed for longer than the case.
        cell.proxy.refuse_for(Duration::from_mins(10)).await?;
    } else {
        cell.proxy.freeze();
    }
    let healthy = Proxy::start().await?;
    let kc = cell.dir.join("kubeconfig-recover");
    healthy.write_kubeconfig(&kc)?;
    let release = healthy.hold_on("patch kustomizations", 1);
    let recovery = cell.cli(&kc).args(["fences", "recover", "--yes"]).spawn()?;
    let mut found = Vec::new();
    let arrived = tokio::time::timeout(s.run_bound, release.arrived()).await;
    let at_release = ticks(&tick_file);
    if arrived.is_err() {
        found.push(Finding::new(Kind::Other, "recovery never released a fence"));
    } else if alive(&pid) {
        found.push(Finding::new(
            Kind::UnexpectedChange,
            "the command still ran when recovery's first release reached the server",
        ));
    }
    release.forward();
    let (code, _, err) = finish(recovery, s.run_bound).await?;
    if code != 0 {
        found.push(Finding::new(
            Kind::Other,
            format!("fences recover exited {code}: {}", super::last_line(&err)),
        ));
    }
    match finish(holder, s.run_bound * 2).await {
        Ok((6, _, _)) => {}
        Ok((code, _, err)) => found.push(Finding::new(
            Kind::Other,
            format!(
                "the cut-off holder exited {code}, not 6: {}",
                super::last_line(&err)
            ),
        )),
        Err(e) => found.push(Finding::new(
            Kind::Other,
            format!("the cut-off holder did not exit by itself: {e}"),
        )),
    }
    if ticks(&tick_file) != at_release {
        found.push(Finding::new(
            Kind::UnexpectedChange,
            "the command ticked after recovery's first release",
        ));
    }
    found.extend(check_and_recover(&cell, &before, base).await?);
    cell.shutdown().await;
    Ok(found)
}

/// Case 3: a fence write held by the proxy and forwarded after its client gave up on it.
async fn late(s: &Settings, base: &Baseline) -> anyhow::Result<Vec<Finding>> {
    let cell = Cell::new(s, "dl-late").await?;
    let before = cell.state().await?;
    let held = cell.proxy.hold_on("patch kustomizations", 1);
    let child = cell.run_cmd().spawn()?;
    let pid = child.id().context("the run has no pid")?.to_string();
    let mut found = Vec::new();
    if tokio::time::timeout(s.run_bound, held.arrived())
        .await
        .is_err()
    {
        found.push(Finding::new(
            Kind::Other,
            "the parent's fence write never came",
        ));
    }
    // Two interrupts: stop, then hurry (the write in flight is abandoned at once).
    for _ in 0..2 {
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, _, err) = finish(child, s.run_bound).await?;
    held.forward();
    let status = held.answered().await;
    let after = cell.state().await?;
    if !after.fenced().is_empty() || status == 200 {
        found.push(Finding::new(
            Kind::UnexpectedChange,
            format!(
                "a fence write forwarded after the run gave up on it landed (answered {status}, run exited {code}: {})",
                super::last_line(&err)
            ),
        ));
    }
    found.extend(check_and_recover(&cell, &before, base).await?);
    cell.shutdown().await;
    Ok(found)
}
