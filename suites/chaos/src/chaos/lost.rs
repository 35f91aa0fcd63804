//! lost response: the response of mutation k is dropped after the server applied it.

use fault_proxy::Fault;

use super::cell::Cell;
use super::crash::{check_and_recover, unchanged_after_success};
use super::discover::Baseline;
use super::recorder::blind_repeats;
use super::{Finding, Kind, Settings, Tally, finish};

/// How one point went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0 and the cluster back to its pre-run state (the lost write was adopted or redone
    /// after a re-read).
    Completed,
    /// Non-zero exit; everything held was listed by `fences`, and recovery restored it.
    FailedClosed(i32),
    /// The run never sent mutation k.
    Unreached,
    /// What was wrong.
    Violation(Vec<Finding>),
}

/// A lost response at every point of the clean run.
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let n = base.points.len();
    let (mut completed, mut closed, mut unreached, mut bad) = (0, 0, 0, 0);
    let mut findings = Vec::new();
    for (i, kind) in base.points.iter().enumerate() {
        let k = i + 1;
        match point(s, base, u64::try_from(k)?).await? {
            Outcome::Completed => completed += 1,
            Outcome::FailedClosed(code) => {
                closed += 1;
                eprintln!("flux-chaos: lost k={k} ({kind}): failed closed with exit {code}");
            }
            Outcome::Unreached => unreached += 1,
            Outcome::Violation(p) => {
                bad += 1;
                findings.extend(p.into_iter().map(|f| Finding {
                    text: format!("lost k={k} ({kind}): {}", f.text),
                    ..f
                }));
            }
        }
        eprintln!("flux-chaos: lost {k}/{n} done");
    }
    Ok(Tally {
        scenario: "lost",
        count: completed + closed + bad,
        line: format!(
            "chaos: lost points={n} completed={completed} failed_closed={closed} unreached={unreached} violations={bad}"
        ),
        findings,
    })
}

/// Drops the response of mutation `k` (1-based) in a fresh cell.
pub async fn point(s: &Settings, base: &Baseline, k: u64) -> anyhow::Result<Outcome> {
    let cell = Cell::new(s, "chaos-lost").await?;
    let before = cell.state().await?;
    cell.proxy.arm(k, Fault::DropResponse);
    let child = cell.run_cmd().spawn()?;
    let (code, _, err) = finish(child, s.run_bound).await?;
    let log = cell.recorder.entries();
    let mut problems: Vec<Finding> = blind_repeats(&log)
        .into_iter()
        .map(|r| {
            Finding::new(
                Kind::UnexpectedChange,
                format!("write repeated without a re-read: {r}"),
            )
        })
        .collect();
    if cell.proxy.mutations() < k {
        cell.shutdown().await;
        return Ok(Outcome::Unreached);
    }
    let outcome = if code == 0 {
        problems.extend(unchanged_after_success(&cell, &before, base).await?);
        Outcome::Completed
    } else {
        problems.extend(check_and_recover(&cell, &before, base).await?);
        Outcome::FailedClosed(code)
    };
    if problems.is_empty() {
        cell.shutdown().await;
        return Ok(outcome);
    }
    let last = err.lines().last().unwrap_or_default();
    for p in &mut problems {
        p.text = format!("{} (exit {code}: {last})", p.text);
    }
    cell.shutdown().await;
    Ok(Outcome::Violation(problems))
}
