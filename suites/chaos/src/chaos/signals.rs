//! signals: SIGINT or SIGTERM (alternating) at a random point of `run -- sleep 3`.
//!
//! 1. One clean `run --target infrastructure -- sleep 3` measures how long a run takes.
//! 2. For each signal: a fresh cell, the run started through the recorder, and a trigger drawn
//!    with a seeded RNG (`CHAOS_SEED` replays a run; the seed is printed): two of every four
//!    signals (so SIGINT and SIGTERM both get each trigger) after a delay uniform in
//!    `[0, clean duration)` (most of a run is the command, so these land mostly there), the
//!    other two when the recorder sees the CLI's k-th request, k uniform
//!    over the clean run's requests (these land in the pause and the release, often with a
//!    request in flight). Then `kill -INT` / `kill -TERM` of the CLI. Three more runs play a
//!    hung API server: the proxy holds back the answer to the first read, the Lease create
//!    and the first fence write for [`HELD`] (longer than the bound), and the signal comes
//!    while the answer is held.
//! 3. The CLI must exit within [`BOUND`] with 130 (interrupted), 0 (the signal came after the
//!    command finished, while releasing), or 7 (something could not be released, or the Lease
//!    create was cut short while the API server did not answer, so the Lease may be held; a
//!    signal during the reads before it exits 130 at once).
//! 4. The server must hold no fence and a free Lease (state compared with the pre-run
//!    snapshot); anything left must come with exit 7, be listed by `fences` and be recoverable
//!    ([`check_and_recover`]), else it is a leaked fence.
//! 5. Release order, from the recorder: the last write of the target comes before the last
//!    write of the parent, and the last Lease update (its release) after both.
//!
//! `chaos: signals runs=R sent=N released=a within_bound=b violations=c unsent=u`: `released`
//! and `within_bound` count runs; `unsent` runs finished before their trigger (a request count
//! this run did not reach); they are still checked as clean runs.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use fault_proxy::Fault;

use super::cell::{Cell, LEASE, PARENT, TARGET};
use super::crash::check_and_recover;
use super::discover::Baseline;
use super::recorder::Entry;
use super::{Finding, Kind, Settings, Tally, finish};

/// How long the CLI may take to exit after the signal.
const BOUND: Duration = Duration::from_secs(30);
/// How long a held response is held back (longer than [`BOUND`]).
const HELD: Duration = Duration::from_secs(45);
/// Requests held while the signal comes: the first read of the run (resolving the target),
/// the Lease create, the target's fence write.
const HELD_KINDS: [&str; 3] = [
    "get kustomizations",
    "create leases",
    "patch kustomizations",
];
/// Exit codes of `flux-handoff` a signal may end in.
const SUCCESS: i32 = 0;
const CLEANUP: i32 = 7;
const INTERRUPTED: i32 = 130;

/// Signals at random points of a run.
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let n = if s.quick { 8 } else { 40 };
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
    eprintln!("flux-chaos: signals seed={seed} (CHAOS_SEED={seed} replays the same delays)");
    let mut rng = StdRng::seed_from_u64(seed);
    let (clean, requests) = clean_run(s).await?;
    eprintln!("flux-chaos: signals: a clean run takes {clean:?} and {requests} requests");
    let clean_ms = u64::try_from(clean.as_millis())?.max(1);
    let (mut sent, mut released, mut within, mut violations) = (0, 0, 0, 0);
    let mut findings = Vec::new();
    let held = HELD_KINDS.len();
    for i in 0..n + held {
        let sig = if i % 2 == 0 { "INT" } else { "TERM" };
        let at = if i >= n {
            At::Held(HELD_KINDS[i - n])
        } else if i % 4 < 2 {
            At::Delay(Duration::from_millis(rng.random_range(0..clean_ms)))
        } else {
            At::Request(rng.random_range(1..=requests.max(1)))
        };
        let p = point(s, base, sig, at).await?;
        eprintln!(
            "flux-chaos: signals {}/{}: SIG{sig} {at}: exit {} ({})",
            i + 1,
            n + held,
            p.code,
            p.last
        );
        if p.sent {
            sent += 1;
        }
        if p.released {
            released += 1;
        }
        if p.within {
            within += 1;
        }
        if !p.findings.is_empty() {
            violations += 1;
        }
        findings.extend(p.findings.into_iter().map(|f| Finding {
            text: format!("signals SIG{sig} {at} (seed {seed}): {}", f.text),
            ..f
        }));
    }
    Ok(Tally {
        scenario: "signals",
        count: sent,
        line: format!(
            "chaos: signals runs={} sent={sent} released={released} within_bound={within} violations={violations} unsent={}",
            n + held,
            n + held - sent
        ),
        findings,
    })
}

/// `run --target infrastructure -- sleep 3` through the cell's recorder (not started).
fn run_sleep(cell: &Cell) -> tokio::process::Command {
    let mut c = cell.cli(&cell.through_proxy);
    c.args(["run", "--target", TARGET, "--", "sleep", "3"]);
    c
}

/// How long one undisturbed run takes, from spawn to exit, and how many requests it sends.
async fn clean_run(s: &Settings) -> anyhow::Result<(Duration, usize)> {
    let cell = Cell::new(s, "chaos-sig-clean").await?;
    let started = Instant::now();
    let (code, _, err) = finish(run_sleep(&cell).spawn()?, s.run_bound).await?;
    let took = started.elapsed();
    let requests = cell.recorder.entries().len();
    cell.shutdown().await;
    anyhow::ensure!(code == 0, "the clean run exited {code}: {}", err.trim());
    Ok((took, requests))
}

/// When the signal is sent.
#[derive(Debug, Clone, Copy)]
enum At {
    /// This long after the CLI was started.
    Delay(Duration),
    /// As soon as the recorder saw the CLI's k-th request (1-based).
    Request(usize),
    /// While the first request of this kind (`verb resource`) is held by the proxy for
    /// [`HELD`]: a slow or hung API server.
    Held(&'static str),
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Delay(d) => write!(f, "after {d:?}"),
            At::Request(k) => write!(f, "at request {k}"),
            At::Held(kind) => write!(f, "while `{kind}` is held"),
        }
    }
}

/// Waits for the trigger; false when the run exited first.
async fn wait_for(cell: &Cell, child: &mut tokio::process::Child, at: At) -> anyhow::Result<bool> {
    match at {
        At::Delay(d) => tokio::time::sleep(d).await,
        At::Held(kind) => {
            let deadline = tokio::time::Instant::now() + BOUND;
            while !cell.recorder.entries().iter().any(|e| e.kind == kind) {
                if child.try_wait()?.is_some() || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // Forwarded on loopback in milliseconds: the server has it, the CLI waits.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        At::Request(k) => {
            let deadline = tokio::time::Instant::now() + BOUND;
            while cell.recorder.entries().len() < k {
                if child.try_wait()?.is_some() || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    Ok(child.try_wait()?.is_none())
}

/// What one signal did.
struct Point {
    /// The run was still going when its trigger came, so the signal was sent.
    sent: bool,
    code: i32,
    /// The last stderr line.
    last: String,
    /// Nothing left on the server afterwards.
    released: bool,
    /// Exited within [`BOUND`].
    within: bool,
    findings: Vec<Finding>,
}

/// One run, signalled with `sig` at `at`.
async fn point(s: &Settings, base: &Baseline, sig: &str, at: At) -> anyhow::Result<Point> {
    let cell = Cell::new(s, "chaos-sig").await?;
    let before = cell.state().await?;
    if let At::Held(kind) = at {
        cell.proxy.arm_on(kind, 1, Fault::Delay(HELD));
    }
    let mut child = run_sleep(&cell).spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| anyhow::anyhow!("the CLI has no pid"))?;
    let mut findings = Vec::new();
    // The run may have finished already: then there is no one to signal (and the pid may be
    // someone else's soon).
    let sent_at = if wait_for(&cell, &mut child, at).await? {
        let mark = cell.recorder.entries().len();
        testkit::signal::to_process(pid, sig)
            .map_err(|e| anyhow::anyhow!("SIG{sig} to {pid} failed: {e}"))?;
        Some(mark)
    } else {
        None
    };
    let (code, err, within) = match finish(child, BOUND).await {
        Ok((code, _, err)) => (code, err, true),
        Err(e) => {
            findings.push(Finding::new(Kind::Other, format!("{e}")));
            (-1, String::new(), false)
        }
    };
    let last = err.lines().last().unwrap_or_default().to_string();
    let log = cell.recorder.entries();
    let after = cell.state().await?;
    let left = after.diff(&before, &base.allowed);
    let released = left.is_empty();
    if within {
        findings.extend(exit_findings(code, &err, &log, sent_at.is_some(), released));
    }
    if !released {
        if code != CLEANUP {
            findings.push(Finding::new(
                Kind::LeakedFence,
                format!(
                    "exit {code} ({last}) but the server holds: {}",
                    left.join(", ")
                ),
            ));
        }
        // Whatever is left must be listed and recoverable.
        findings.extend(check_and_recover(&cell, &before, base).await?);
    }
    // A Lease left held (exit 7) was never released: its last update is a renewal.
    if let Some(mark) = sent_at
        && after.lease_holder.is_none()
    {
        findings.extend(order_findings(&cell.ns.name, &log[mark.min(log.len())..]));
    }
    cell.shutdown().await;
    Ok(Point {
        sent: sent_at.is_some(),
        code,
        last,
        released,
        within,
        findings,
    })
}

/// Whether the exit code says what happened.
fn exit_findings(
    code: i32,
    err: &str,
    log: &[Entry],
    signalled: bool,
    released: bool,
) -> Vec<Finding> {
    let last = err.lines().last().unwrap_or_default();
    let finished_command = err.contains("sleep exited with 0");
    let ok = match code {
        INTERRUPTED => signalled,
        // The signal came after the command finished: the run was releasing anyway.
        SUCCESS => !signalled || finished_command,
        // Something is left, or the run could not tell: its start was cut short while the
        // API server did not answer, so its Lease may be held.
        CLEANUP => !released || last.contains("may be held"),
        // Killed by the signal's default action: only before the handlers were installed,
        // i.e. before the first request.
        -1 => log.is_empty(),
        _ => false,
    };
    if ok {
        Vec::new()
    } else {
        vec![Finding::new(
            Kind::Other,
            format!(
                "exit {code} does not say what happened (command finished: {finished_command}, \
                 released: {released}): {last}"
            ),
        )]
    }
}

/// What the Lease, the parent and the target are to the recorder.
fn target_of(ns: &str, e: &Entry) -> Option<&'static str> {
    let kust = |name: &str| format!("/namespaces/{ns}/kustomizations/{name}");
    if !e.mutating {
        return None;
    }
    if e.kind.starts_with("patch") && e.path.ends_with(&kust(TARGET)) {
        Some("target")
    } else if e.kind.starts_with("patch") && e.path.ends_with(&kust(PARENT)) {
        Some("parent")
    } else if e.kind.starts_with("update")
        && e.path
            .ends_with(&format!("/namespaces/{ns}/leases/{LEASE}"))
    {
        Some("lease")
    } else {
        None
    }
}

/// Release order among the writes sent after the signal: target, then parent, then the Lease.
fn order_findings(ns: &str, after_signal: &[Entry]) -> Vec<Finding> {
    let last = |which: &str| {
        after_signal
            .iter()
            .rposition(|e| target_of(ns, e) == Some(which))
    };
    let (t, p, l) = (last("target"), last("parent"), last("lease"));
    let mut f = Vec::new();
    if let (Some(t), Some(p)) = (t, p)
        && t > p
    {
        f.push(Finding::new(
            Kind::UnexpectedChange,
            format!("the parent was released (request {p}) before the target (request {t})"),
        ));
    }
    if let Some(l) = l
        && t.into_iter().chain(p).any(|x| x > l)
    {
        f.push(Finding::new(
            Kind::UnexpectedChange,
            format!(
                "the Lease was updated (request {l}) before a fence was released ({t:?}, {p:?})"
            ),
        ));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(kind: &str, path: &str) -> Entry {
        Entry {
            kind: kind.into(),
            path: path.into(),
            mutating: true,
            status: Some(200),
            conditional: false,
        }
    }

    const K: &str = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/ns/kustomizations/";
    const L: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/flux-handoff";

    #[test]
    fn target_then_parent_then_lease_is_in_order() {
        let log = [
            e("patch kustomizations", &format!("{K}infrastructure")),
            e("create events", "/api/v1/namespaces/ns/events"),
            e("patch kustomizations", &format!("{K}flux-system")),
            e("update leases", L),
        ];
        assert!(order_findings("ns", &log).is_empty());
    }

    #[test]
    fn parent_before_target_or_lease_before_a_fence_is_out_of_order() {
        let log = [
            e("patch kustomizations", &format!("{K}flux-system")),
            e("patch kustomizations", &format!("{K}infrastructure")),
            e("update leases", L),
        ];
        assert_eq!(order_findings("ns", &log).len(), 1);
        let log = [
            e("update leases", L),
            e("patch kustomizations", &format!("{K}infrastructure")),
        ];
        assert_eq!(order_findings("ns", &log).len(), 1);
    }
}
