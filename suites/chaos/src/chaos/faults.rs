//! faults: the API server answers 500, 503 or 429 (with `Retry-After`), resets the connection,
//! or stops accepting for a while — at a mutation point or at a read — and the run either
//! completes with the cluster back to its pre-run state or fails closed.
//!
//! 1. A clean run straight through the proxy (no recorder, so a reset or a refused connect
//!    reaches the CLI as such) gives the read kinds and how often each is sent.
//! 2. Each cell: a fresh [`Cell`], one fault armed at one point, `run --target infrastructure
//!    -- true` through the proxy.
//! 3. Exit 0: the cluster must be back to its pre-run state. Non-zero: a documented exit code
//!    for an API failure (4 timeout, 6 Kubernetes API, 7 cleanup), exactly one `error:` line
//!    on stderr, the last one, without a Rust debug dump in it, and [`check_and_recover`] finds
//!    everything listed and restores it. A run that does not end within the bound is a finding (a hang).
//! 4. Never a double application: among the requests the proxy FORWARDED (a request answered
//!    with a status, reset or cut was never applied), no write to the same object is sent again
//!    without a read of it in between.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use fault_proxy::{Fault, Received};

use super::cell::{Cell, TARGET};
use super::crash::{check_and_recover, unchanged_after_success};
use super::discover::Baseline;
use super::recorder::{Entry, blind_repeats};
use super::{Finding, Kind, Settings, Tally, error_line_problem, finish, last_line};

/// Exit codes a run may end with when the API failed under it.
const FAIL_CLOSED_CODES: [i32; 3] = [4, 6, 7];

/// The faults every point is tried with.
const FAULTS: [&str; 5] = [
    "500",
    "503+Retry-After:1",
    "429+Retry-After:1",
    "reset",
    "refuse-2s",
];

/// The proxy fault a name in [`FAULTS`] stands for.
fn fault(name: &str) -> Fault {
    let status = |code, retry_after| Fault::Status { code, retry_after };
    match name {
        "500" => status(500, None),
        "503+Retry-After:1" => status(503, Some(1)),
        "429+Retry-After:1" => status(429, Some(1)),
        "refuse-2s" => Fault::Refuse(Duration::from_secs(2)),
        _ => Fault::Reset,
    }
}

/// Where a fault is armed.
#[derive(Debug, Clone)]
enum Point {
    /// The k-th mutating request (1-based).
    Mutation(u64),
    /// The n-th request of this kind (`verb resource`), a read or a write.
    Nth(String, u64),
}

impl Point {
    fn arm(&self, cell: &Cell, fault: Fault) {
        match self {
            Self::Mutation(k) => cell.proxy.arm(*k, fault),
            Self::Nth(kind, n) => cell.proxy.arm_on(kind, *n, fault),
        }
    }

    fn reached(&self, cell: &Cell) -> bool {
        match self {
            Self::Mutation(k) => cell.proxy.mutations() >= *k,
            Self::Nth(kind, n) => cell.proxy.counts().get(kind).copied().unwrap_or(0) >= *n,
        }
    }

    fn label(&self, base: &Baseline) -> String {
        match self {
            Self::Mutation(k) => {
                let i = usize::try_from(*k).unwrap_or(usize::MAX).saturating_sub(1);
                let kind = base.points.get(i).map_or("?", String::as_str);
                format!("mutation {k} ({kind})")
            }
            Self::Nth(kind, n) => format!("{kind} #{n}"),
        }
    }
}

/// How one cell went.
#[derive(Debug)]
enum Outcome {
    Completed,
    /// The exit code and the error line.
    FailedClosed(i32, String),
    Unreached,
    Violation(Vec<Finding>),
}

/// Every fault at a sample of points (`--quick`: seven cells).
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let reads = clean_reads(s).await?;
    eprintln!("flux-chaos: faults: reads of a clean run: {reads:?}");
    // FLUX_CHAOS_FAULTS=<text> keeps only the cells whose label contains it (for debugging).
    let only = std::env::var("FLUX_CHAOS_FAULTS").unwrap_or_default();
    let cells: Vec<_> = plan(s.quick, base, &reads)
        .into_iter()
        .filter(|(name, _, p)| format!("{name} at {}", p.label(base)).contains(&only))
        .collect();
    let n = cells.len();
    let (mut completed, mut closed, mut unreached, mut bad) = (0, 0, 0, 0);
    let mut findings = Vec::new();
    for (i, (name, fault, point)) in cells.into_iter().enumerate() {
        let label = format!("{name} at {}", point.label(base));
        match cell(s, base, &point, fault).await? {
            Outcome::Completed => {
                completed += 1;
                eprintln!("flux-chaos: faults {label}: completed");
            }
            Outcome::FailedClosed(code, line) => {
                closed += 1;
                eprintln!("flux-chaos: faults {label}: failed closed with exit {code}: {line}");
            }
            Outcome::Unreached => {
                unreached += 1;
                eprintln!("flux-chaos: faults {label}: point not reached");
            }
            Outcome::Violation(p) => {
                bad += 1;
                findings.extend(p.into_iter().map(|f| Finding {
                    text: format!("faults {label}: {}", f.text),
                    ..f
                }));
            }
        }
        eprintln!("flux-chaos: faults {}/{n} done", i + 1);
    }
    Ok(Tally {
        scenario: "faults",
        count: completed + closed + bad,
        line: format!(
            "chaos: faults cells={n} completed={completed} failed_closed={closed} violations={bad} unreached={unreached}"
        ),
        findings,
    })
}

/// Which (fault, point) pairs to run.
fn plan(
    quick: bool,
    base: &Baseline,
    reads: &BTreeMap<String, u64>,
) -> Vec<(&'static str, Fault, Point)> {
    let n = u64::try_from(base.points.len()).unwrap_or(0);
    let nth = |kind: &str, i: u64| Point::Nth(kind.into(), i);
    // Reads: the first kustomization read, the second, and one in the middle of the proof.
    let gets = reads.get("get kustomizations").copied().unwrap_or(1).max(1);
    // Writes by kind are stable from run to run (Lease renewals are not): patch #1 fences the
    // parent, #2 the target, #3 releases the target, #4 the parent.
    let patch = |i: u64| nth("patch kustomizations", i);
    if quick {
        return [
            ("500", patch(1)),
            ("503+Retry-After:1", nth("create leases", 1)),
            ("429+Retry-After:1", nth("get kustomizations", 2)),
            ("reset", patch(2)),
            ("reset", nth("get kustomizations", 1)),
            ("500", nth("get kustomizations", 2)),
            ("refuse-2s", patch(3)),
        ]
        .into_iter()
        .map(|(name, p)| (name, fault(name), p))
        .collect();
    }
    let mut points: Vec<Point> = (1..=4).map(patch).collect();
    points.extend([nth("create leases", 1), nth("update leases", 1)]);
    points.extend(
        [1, n / 2, n]
            .into_iter()
            .filter(|k| *k >= 1)
            .map(Point::Mutation),
    );
    // The count varies by one or two from run to run: the last point stays a little short.
    let late = gets.saturating_sub(2);
    points.extend([1, 2, gets / 2, late].map(|i| nth("get kustomizations", i.max(1))));
    if reads.contains_key("get leases") {
        points.push(nth("get leases", 1));
    }
    let mut out = Vec::new();
    for name in FAULTS {
        for p in &points {
            out.push((name, fault(name), p.clone()));
        }
    }
    out
}

/// The kinds and counts of non-mutating requests in one clean run through the proxy.
async fn clean_reads(s: &Settings) -> anyhow::Result<BTreeMap<String, u64>> {
    let cell = Cell::new(s, "chaos-faults").await?;
    let child = cell.cli(&kubeconfig(s, &cell)?).args(run_args()).spawn()?;
    let (code, _, err) = finish(child, s.run_bound).await?;
    let seen = cell.proxy.log();
    cell.shutdown().await;
    anyhow::ensure!(code == 0, "the clean run exited {code}: {}", err.trim());
    let mut reads = BTreeMap::new();
    for r in seen.iter().filter(|r| !r.mutating) {
        *reads.entry(r.kind.clone()).or_insert(0) += 1;
    }
    Ok(reads)
}

/// A kubeconfig straight to the proxy (not through the recorder, which would turn a reset or
/// a refused connect into a plain close).
fn kubeconfig(s: &Settings, cell: &Cell) -> anyhow::Result<PathBuf> {
    let path = s.scratch.join(&cell.ns.name).join("kubeconfig-faults");
    cell.proxy.write_kubeconfig(&path)?;
    Ok(path)
}

fn run_args() -> [&'static str; 5] {
    ["run", "--target", TARGET, "--", "true"]
}

/// One fault at one point in a fresh cell.
async fn cell(
    s: &Settings,
    base: &Baseline,
    point: &Point,
    fault: Fault,
) -> anyhow::Result<Outcome> {
    let cell = Cell::new(s, "chaos-faults").await?;
    let before = cell.state().await?;
    point.arm(&cell, fault);
    let child = cell.cli(&kubeconfig(s, &cell)?).args(run_args()).spawn()?;
    let mut problems = Vec::new();
    let ended = finish(child, s.run_bound).await;
    let reached = point.reached(&cell);
    let seen = cell.proxy.log();
    if std::env::var_os("FLUX_CHAOS_TRACE").is_some() {
        for r in &seen {
            let mark = if r.forwarded { ' ' } else { 'X' };
            eprintln!("  {mark} {} {}", r.kind, r.path);
        }
        if let Ok((code, _, err)) = &ended {
            eprintln!("  exit {code}; stderr:\n{err}");
        }
    }
    problems.extend(double_applications(&seen));
    let outcome = match ended {
        Err(e) => {
            problems.push(Finding::new(Kind::Other, format!("hang: {e}")));
            problems.extend(check_and_recover(&cell, &before, base).await?);
            Outcome::FailedClosed(-1, String::new())
        }
        Ok(_) if !reached => {
            cell.shutdown().await;
            return Ok(Outcome::Unreached);
        }
        Ok((0, _, _)) => {
            problems.extend(unchanged_after_success(&cell, &before, base).await?);
            Outcome::Completed
        }
        Ok((code, _, err)) => {
            if !FAIL_CLOSED_CODES.contains(&code) {
                problems.push(Finding::new(
                    Kind::Other,
                    format!("exit {code} is not a documented code for an API failure"),
                ));
            }
            if let Some(p) = error_line_problem(&err) {
                problems.push(Finding::new(Kind::Other, p));
            }
            problems.extend(check_and_recover(&cell, &before, base).await?);
            for p in &mut problems {
                p.text = format!("{} (exit {code}: {})", p.text, last_line(&err));
            }
            Outcome::FailedClosed(code, last_line(&err).to_string())
        }
    };
    cell.shutdown().await;
    Ok(if problems.is_empty() {
        outcome
    } else {
        Outcome::Violation(problems)
    })
}

/// Writes the server received twice without a read in between. Requests the proxy answered
/// itself were never applied and are left out.
fn double_applications(seen: &[Received]) -> Vec<Finding> {
    let forwarded: Vec<Entry> = seen
        .iter()
        .filter(|r| r.forwarded)
        .map(|r| Entry {
            kind: r.kind.clone(),
            path: r.path.clone(),
            mutating: r.mutating,
            status: None,
            conditional: r.conditional,
        })
        .collect();
    blind_repeats(&forwarded)
        .into_iter()
        .map(|r| {
            Finding::new(
                Kind::UnexpectedChange,
                format!("write applied twice without a re-read: {r}"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Received, double_applications};

    fn seen(kind: &str, path: &str, forwarded: bool) -> Received {
        Received {
            kind: kind.into(),
            path: path.into(),
            mutating: !kind.starts_with("get"),
            forwarded,
            conditional: false,
            at: std::time::Duration::ZERO,
            took: None,
        }
    }

    #[test]
    fn a_write_the_proxy_answered_itself_is_not_a_double_application() {
        let retried = [
            seen("patch k", "/k/a", false),
            seen("patch k", "/k/a", true),
        ];
        assert!(double_applications(&retried).is_empty());
        let twice = [
            seen("patch k", "/k/a", true),
            seen("get k", "/k/a", false),
            seen("patch k", "/k/a", true),
        ];
        assert_eq!(
            double_applications(&twice).len(),
            1,
            "a read the proxy cut gave the client nothing new"
        );
    }
}
