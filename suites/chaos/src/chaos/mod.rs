//! The chaos scenarios `flux-chaos` runs (issue 8, first part): the real `flux-handoff` binary
//! against a control plane of its own, through the fault-injecting proxy.
//!
//! 1. [`discover`]: one clean `run --target infrastructure -- true`; its ordered mutating
//!    requests are the points k = 1..N, and the annotation keys it changed are what a run is
//!    meant to change (the retire nonce); everything else must come back exactly.
//! 2. [`crash`]: SIGKILL after mutation k; `fences` lists every fence left; `fences recover
//!    --yes --include-paused` after the Lease expired restores the pre-run spec and annotations.
//! 3. [`lost`]: the response of mutation k is dropped; the run completes or fails closed with
//!    everything it holds listed; no write repeated without a re-read; recovery restores.
//! 4. [`concurrency`]: n `pause` runs at once: exactly one wins, the others exit 3.
//! 5. [`leaks`]: every secret registered with [`secret`] is looked for, raw and base64-encoded,
//!    in everything the runs printed ([`record`]) and in the annotations and Events on the
//!    server afterwards.
//!
//! Each scenario returns a [`Tally`]: how many points, rounds or cases it ran, its own
//! `chaos:` line, and its [`Finding`]s, sorted into the summary line's categories.

pub mod cell;
pub mod chain;
pub mod concurrency;
pub mod crash;
pub mod deadline;
pub mod discover;
pub mod faults;
pub mod hostile;
pub mod leaks;
pub mod liveness;
pub mod lost;
pub mod nemesis;
pub mod recorder;
pub mod restart;
pub mod security;
pub mod signals;
pub mod soak;
pub mod writer;

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// What every scenario needs.
#[derive(Debug, Clone)]
#[allow(dead_code)] // `quick`, `launcher` and `crds` are read by the scenarios that need them
pub struct Settings {
    /// The `flux-handoff` binary under test.
    pub bin: PathBuf,
    /// Per-cell scratch files (kubeconfigs, config files).
    pub scratch: PathBuf,
    /// Lease duration written to each cell's config file (short, so recovery waits little).
    pub lease_seconds: u64,
    /// Rounds per concurrency size.
    pub rounds: usize,
    /// Bound on one CLI run.
    pub run_bound: Duration,
    /// `--quick`: a sample of each scenario.
    pub quick: bool,
    /// The control-plane launcher (`xtask/envtest`), for scenarios that run a plane of their own.
    pub launcher: Option<PathBuf>,
    /// The CRD directory the launcher installs.
    pub crds: Option<PathBuf>,
}

/// What kind of wrong a finding is, as the summary line counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A fence or a held Lease that `fences` did not list, or that recovery could not undo.
    LeakedFence,
    /// The cluster differs from what the run was meant to leave (spec, annotations, a second
    /// winner, a repeated write).
    UnexpectedChange,
    /// A registered secret, in any form, in output, annotations or Events.
    SecretLeak,
    /// Anything else the scenario promised and did not get (a wrong exit code, a message that
    /// is not one line, a bound overrun).
    Other,
}

/// One thing a scenario found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    pub text: String,
}

impl Finding {
    #[must_use]
    pub fn new(kind: Kind, text: impl Into<String>) -> Self {
        Self {
            kind,
            text: text.into(),
        }
    }
}

/// One scenario's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// `crash`, `lost`, `concurrency`, `restart`, `hostile`, ...
    pub scenario: &'static str,
    /// Points, rounds, restarts or cases it ran (what the summary line counts for it).
    pub count: usize,
    /// Its own `chaos: <scenario> ...` line.
    pub line: String,
    pub findings: Vec<Finding>,
}

/// Everything the runs printed, for the leak scan: (label, text).
static TRANSCRIPT: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
/// Secret values no output, annotation or Event may carry.
static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Keeps `text` (what a command printed) for the leak scan.
pub fn record(label: &str, text: &str) {
    if !text.is_empty() {
        TRANSCRIPT
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((label.to_string(), text.to_string()));
    }
}

/// Registers a secret value the leak scan looks for.
pub fn secret(value: &str) {
    let mut s = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    if !value.is_empty() && !s.iter().any(|v| v == value) {
        s.push(value.to_string());
    }
}

/// What was recorded so far.
#[must_use]
pub fn transcript() -> Vec<(String, String)> {
    TRANSCRIPT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// The registered secrets.
#[must_use]
pub fn secrets() -> Vec<String> {
    SECRETS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Waits for `child` within `bound` (it is killed when the bound passes: `kill_on_drop`);
/// (exit code, stdout, stderr). Both outputs are [`record`]ed.
pub async fn finish(
    child: tokio::process::Child,
    bound: Duration,
) -> anyhow::Result<(i32, String, String)> {
    match tokio::time::timeout(bound, child.wait_with_output()).await {
        Ok(out) => Ok(outputs(&out?)),
        Err(_) => anyhow::bail!("the CLI did not finish within {bound:?}"),
    }
}

/// What is wrong with the stderr of a failed run, if anything. It must hold exactly one
/// `error:` line, the last one (clap may follow it with its `Usage:` and `For more
/// information` hints, and list missing arguments, indented, before them), no panic,
/// backtrace, parser snippet or ANSI code, and no Rust debug dump of an API answer. Log lines
/// before it are allowed: a run that failed mid-way may have logged why (a lost Lease).
#[must_use]
pub fn error_line_problem(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("error:") || lines[i].starts_with("::error::"))
        .collect();
    let [i] = errors.as_slice() else {
        return Some(format!(
            "{} error lines in stderr: {:?}",
            errors.len(),
            lines.iter().rev().take(3).rev().collect::<Vec<_>>()
        ));
    };
    let clap = lines.iter().any(|l| l.starts_with("Usage: "));
    if let Some(extra) = lines[i + 1..].iter().find(|l| {
        !l.starts_with("Usage:")
            && !l.starts_with("For more information")
            && (!clap || !l.starts_with("  "))
    }) {
        return Some(format!("stderr goes on after the error line: {extra:?}"));
    }
    let noise = ["panicked", "backtrace", "\u{1b}[", " --> ", " | "];
    if let Some(l) = lines.iter().find(|l| noise.iter().any(|n| l.contains(n))) {
        return Some(format!("stderr carries a dump: {l:?}"));
    }
    let line = lines[*i];
    if ["Status {", "Some(", "None,"]
        .iter()
        .any(|m| line.contains(m))
    {
        return Some(format!("the error line carries a debug dump: {line}"));
    }
    (line.len() > 1000).then(|| format!("error line of {} characters", line.len()))
}

/// The last non-empty line of `text`.
#[must_use]
pub fn last_line(text: &str) -> &str {
    text.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or_default()
}

/// (exit code, stdout, stderr) of a finished command, both [`record`]ed.
#[must_use]
pub fn outputs(out: &std::process::Output) -> (i32, String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    record("stdout", &stdout);
    record("stderr", &stderr);
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

/// The summary line (always the last line printed) and whether the run passed: every
/// finding count is zero.
#[must_use]
pub fn summary(tallies: &[Tally]) -> (String, bool) {
    let count = |name: &str| -> usize {
        tallies
            .iter()
            .filter(|t| t.scenario == name)
            .map(|t| t.count)
            .sum()
    };
    let kind = |k: Kind| -> usize {
        tallies
            .iter()
            .flat_map(|t| &t.findings)
            .filter(|f| f.kind == k)
            .count()
    };
    let line = format!(
        "chaos: crash_points={} lost_responses={} concurrent_rounds={} restarts={} hostile_inputs={} leaked_fences={} unexpected_changes={} secret_leaks={}",
        count("crash"),
        count("lost"),
        count("concurrency"),
        count("restart"),
        count("hostile"),
        kind(Kind::LeakedFence),
        kind(Kind::UnexpectedChange),
        kind(Kind::SecretLeak),
    );
    let passed = tallies.iter().all(|t| t.findings.is_empty());
    (line, passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(scenario: &'static str, count: usize, findings: Vec<Finding>) -> Tally {
        Tally {
            scenario,
            count,
            line: String::new(),
            findings,
        }
    }

    #[test]
    fn one_error_line_passes_and_more_lines_dumps_or_noise_fail() {
        assert_eq!(
            error_line_problem("lease acquired (0.1s)\nerror: refused\n"),
            None
        );
        assert_eq!(
            error_line_problem("2026Z ERROR lease lost\nerror: fencing: lease lost\n"),
            None,
            "a run that failed mid-way may have logged why"
        );
        assert_eq!(
            error_line_problem("error: bad\n\nUsage: x\n\nFor more information, try '--help'.\n"),
            None
        );
        for bad in [
            "",
            "error: a\nerror: b\n",
            "error: boom\n  caused by: x\n",
            "error: a\n --> <input>:1:1\n  |\n",
            "\u{1b}[31mERROR\u{1b}[0m failed\nerror: x\n",
            "thread 'main' panicked at x\n",
            "error: reading x: ApiError: boom (Status { status: Some(Failure), code: 500 })",
        ] {
            assert!(error_line_problem(bad).is_some(), "{bad:?}");
        }
        assert_eq!(last_line("a\nerror: b\n\n"), "error: b");
    }

    #[test]
    fn the_summary_counts_per_scenario_and_per_kind_and_fails_on_any_finding() {
        let clean = [
            tally("crash", 12, vec![]),
            tally("concurrency", 5, vec![]),
            tally("concurrency", 5, vec![]),
        ];
        let (line, passed) = summary(&clean);
        assert_eq!(
            line,
            "chaos: crash_points=12 lost_responses=0 concurrent_rounds=10 restarts=0 hostile_inputs=0 leaked_fences=0 unexpected_changes=0 secret_leaks=0"
        );
        assert!(passed);
        let (line, passed) = summary(&[
            tally("lost", 3, vec![Finding::new(Kind::UnexpectedChange, "x")]),
            tally("hostile", 25, vec![Finding::new(Kind::Other, "exit 1")]),
        ]);
        assert!(line.ends_with("leaked_fences=0 unexpected_changes=1 secret_leaks=0"));
        assert!(!passed);
        let (_, passed) = summary(&[tally("hostile", 25, vec![Finding::new(Kind::Other, "y")])]);
        assert!(
            !passed,
            "a finding outside the three counters still fails the run"
        );
    }
}
