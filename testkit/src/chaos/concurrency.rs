//! concurrency: n `pause` runs started at once on the same target; exactly one proceeds, the
//! others exit 3 (refused) and change nothing; the winner is resumed between rounds.

use anyhow::Context;
use futures::future::join_all;

use super::cell::{Cell, TARGET, listed};
use super::discover::Baseline;
use super::{Settings, finish};

/// Refused: another holder has the Lease or a fence.
const REFUSED: i32 = 3;

/// Result of `rounds` rounds with `n` contenders.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub rounds: usize,
    /// Rounds in which exactly one run proceeded.
    pub single_winner: usize,
    pub violations: Vec<String>,
}

/// Runs the rounds for `n` contenders in one cell.
pub async fn run(s: &Settings, base: &Baseline, n: usize) -> anyhow::Result<Tally> {
    let cell = Cell::new(s, &format!("chaos-race{n}")).await?;
    let mut t = Tally::default();
    for round in 1..=s.rounds {
        let before = cell.state().await?;
        let mut children = Vec::new();
        for _ in 0..n {
            let mut c = cell.cli(&cell.direct);
            c.args(["pause", "--target", TARGET]);
            children.push(c.spawn()?);
        }
        let results = join_all(children.into_iter().map(|c| finish(c, s.run_bound))).await;
        let mut winners = Vec::new();
        for r in results {
            let (code, out, err) = r?;
            match code {
                0 => winners.push(out.trim().to_string()),
                REFUSED => {}
                other => t.violations.push(format!(
                    "n={n} round {round}: a run exited {other}: {}",
                    err.lines().last().unwrap_or_default()
                )),
            }
        }
        t.rounds += 1;
        if winners.len() == 1 {
            t.single_winner += 1;
        } else {
            t.violations.push(format!(
                "n={n} round {round}: {} runs proceeded",
                winners.len()
            ));
        }
        // Only the winner's fences exist, and it holds the Lease.
        let report = cell.fences().await?;
        let holders: Vec<&str> = report["fences"]
            .as_array()
            .context("fences without rows")?
            .iter()
            .filter_map(|r| r["holder"].as_str())
            .collect();
        if let Some(w) = winners.first() {
            if holders.iter().any(|h| h != w) || listed(&report).len() != 2 {
                t.violations.push(format!(
                    "n={n} round {round}: fences {holders:?} besides the winner's two"
                ));
            }
            let (code, _, err) = cell
                .direct(&["resume", "--holder", w, "--target", TARGET])
                .await?;
            if code != 0 {
                t.violations.push(format!(
                    "n={n} round {round}: resume exited {code}: {}",
                    err.trim()
                ));
            }
        }
        for d in cell.state().await?.diff(&before, &base.allowed) {
            t.violations
                .push(format!("n={n} round {round}: after resume: {d}"));
        }
    }
    cell.shutdown().await;
    Ok(t)
}
