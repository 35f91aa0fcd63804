//! crash: SIGKILL the CLI right after the server applied mutation k, then check the fence
//! report against the server and recover.

use std::time::Duration;

use fault_proxy::Fault;

use super::cell::{Cell, Site, State, listed};
use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally, finish};

/// How one point went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Killed after mutation k; listed and recovered to the pre-run state.
    Ok,
    /// The run finished before reaching mutation k (fewer writes this time); nothing to kill.
    Unreached,
    /// What was wrong.
    Failed(Vec<Finding>),
}

/// Crash at every point of the clean run.
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let n = base.points.len();
    let (mut ok, mut unreached, mut failed) = (0, 0, 0);
    let mut findings = Vec::new();
    for (i, kind) in base.points.iter().enumerate() {
        let k = i + 1;
        match point(s, base, u64::try_from(k)?).await? {
            Outcome::Ok => ok += 1,
            Outcome::Unreached => unreached += 1,
            Outcome::Failed(p) => {
                failed += 1;
                findings.extend(p.into_iter().map(|f| Finding {
                    text: format!("crash k={k} ({kind}): {}", f.text),
                    ..f
                }));
            }
        }
        eprintln!("flux-chaos: crash {k}/{n} done");
    }
    Ok(Tally {
        scenario: "crash",
        count: ok + failed,
        line: format!("chaos: crash points={n} ok={ok} unreached={unreached} failed={failed}"),
        findings,
    })
}

/// Kills a run at point `k` (1-based) in a fresh cell.
pub async fn point(s: &Settings, base: &Baseline, k: u64) -> anyhow::Result<Outcome> {
    let cell = Cell::new(s, "chaos-crash").await?;
    let before = cell.state().await?;
    // Mutation k is forwarded and applied, then its response is held back: the window in
    // which the CLI is killed, so the server has applied k and the CLI never learns of it.
    cell.proxy.arm(k, Fault::Delay(Duration::from_secs(30)));
    let mut child = cell.run_cmd().spawn()?;
    let deadline = tokio::time::Instant::now() + s.run_bound;
    let reached = loop {
        if cell.proxy.mutations() >= k {
            break true;
        }
        if child.try_wait()?.is_some() || tokio::time::Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    if !reached {
        let _ = finish(child, s.run_bound).await;
        cell.shutdown().await;
        return Ok(Outcome::Unreached);
    }
    // The request arrived; give the proxy a moment to forward it before the kill.
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.start_kill()?;
    let _ = finish(child, s.run_bound).await;
    let problems = check_and_recover(&cell, &before, base).await?;
    cell.shutdown().await;
    Ok(if problems.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Failed(problems)
    })
}

/// After a run exited 0: everything on the server is as before the run (but what the baseline
/// allows to change). Returns what differs.
pub async fn unchanged_after_success(
    cell: &Site,
    before: &State,
    base: &Baseline,
) -> anyhow::Result<Vec<Finding>> {
    let after = cell.state().await?;
    Ok(after
        .diff(before, &base.allowed)
        .into_iter()
        .map(|d| Finding::new(Kind::UnexpectedChange, format!("exit 0 but {d}")))
        .collect())
}

/// After a run died or failed: every fence and the Lease on the server are listed by
/// `fences`; after the Lease expired, `fences recover --yes --include-paused` restores the
/// pre-run state. Returns what was wrong.
pub async fn check_and_recover(
    cell: &Site,
    before: &State,
    base: &Baseline,
) -> anyhow::Result<Vec<Finding>> {
    let mut problems = Vec::new();
    let left = cell.state().await?;
    let report = cell.fences().await?;
    let shown = listed(&report);
    for name in left.fenced() {
        if !shown.contains(&name) {
            problems.push(Finding::new(
                Kind::LeakedFence,
                format!("fence on {name} not listed by fences"),
            ));
        }
    }
    if let Some(h) = &left.lease_holder
        && report["lease"]["holder"].as_str() != Some(h)
    {
        problems.push(Finding::new(
            Kind::LeakedFence,
            format!("Lease held by {h} not shown by fences"),
        ));
    }
    cell.wait_lease_expired(Duration::from_mins(1)).await?;
    let (code, _, err) = cell
        .direct(&["fences", "recover", "--yes", "--include-paused"])
        .await?;
    if code != 0 {
        problems.push(Finding::new(
            Kind::LeakedFence,
            format!("fences recover exited {code}: {}", err.trim()),
        ));
    }
    let after = cell.state().await?;
    for d in after.diff(before, &base.allowed) {
        problems.push(Finding::new(
            Kind::UnexpectedChange,
            format!("after recovery: {d}"),
        ));
    }
    Ok(problems)
}
