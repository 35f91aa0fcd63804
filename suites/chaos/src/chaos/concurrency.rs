//! concurrency: n `pause` runs started at once on the same target; exactly one proceeds, the
//! others exit 3 (refused) and change nothing; the winner is resumed between rounds.

use anyhow::Context;
use futures::future::join_all;

use super::cell::{Cell, TARGET, listed};
use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally, finish};

/// Refused: another holder has the Lease or a fence.
const REFUSED: i32 = 3;

/// 2, 4 and 8 contenders, `s.rounds` rounds each.
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let mut t = Rounds::default();
    let mut sizes = Vec::new();
    for n in [2, 4, 8] {
        let before = t.single_winner;
        size(s, base, n, &mut t).await?;
        sizes.push(format!("n{n}={}", t.single_winner - before));
    }
    Ok(Tally {
        scenario: "concurrency",
        count: t.played,
        line: format!(
            "chaos: concurrency rounds={} single_winner={} ({}) violations={}",
            t.played,
            t.single_winner,
            sizes.join(" "),
            t.findings.len()
        ),
        findings: t.findings,
    })
}

#[derive(Debug, Default)]
struct Rounds {
    played: usize,
    /// Rounds in which exactly one run proceeded.
    single_winner: usize,
    findings: Vec<Finding>,
}

/// Runs the rounds for `n` contenders in one cell.
async fn size(s: &Settings, base: &Baseline, n: usize, t: &mut Rounds) -> anyhow::Result<()> {
    let cell = Cell::new(s, &format!("chaos-race{n}")).await?;
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
                other => t.findings.push(Finding::new(
                    Kind::Other,
                    format!(
                        "n={n} round {round}: a run exited {other}: {}",
                        err.lines().last().unwrap_or_default()
                    ),
                )),
            }
        }
        t.played += 1;
        if winners.len() == 1 {
            t.single_winner += 1;
        } else {
            t.findings.push(Finding::new(
                Kind::UnexpectedChange,
                format!("n={n} round {round}: {} runs proceeded", winners.len()),
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
                t.findings.push(Finding::new(
                    Kind::UnexpectedChange,
                    format!("n={n} round {round}: fences {holders:?} besides the winner's two"),
                ));
            }
            let (code, _, err) = cell
                .direct(&["resume", "--holder", w, "--target", TARGET])
                .await?;
            if code != 0 {
                t.findings.push(Finding::new(
                    Kind::LeakedFence,
                    format!("n={n} round {round}: resume exited {code}: {}", err.trim()),
                ));
            }
        }
        for d in cell.state().await?.diff(&before, &base.allowed) {
            t.findings.push(Finding::new(
                Kind::UnexpectedChange,
                format!("n={n} round {round}: after resume: {d}"),
            ));
        }
    }
    cell.shutdown().await;
    Ok(())
}
