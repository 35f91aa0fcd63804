//! writer: a competing writer on the target during the stable-pause proof.
//!
//! 1. Each run: a fresh cell, `run --target infrastructure -- true` through the recorder with
//!    `--interval 500ms --timeout 5s --output json`; its stderr is read live.
//! 2. Once the CLI printed that the target acknowledged the suspend (the proof starts next), a
//!    writer changes the target, a new value each time:
//!    - the controller model's competing-writer knob sets the annotation [`WRITER_KEY`]
//!      (`touch_now`, or `touch_at` on the `apps` reconcile a bumped source revision starts),
//!      or a plain client sets it, or a plain client sets `spec.timeout` (merge patches);
//!    - forever (every [`EVERY`], until the CLI exits) or once. A plain client writing once
//!      does it while the recorder holds the proof's first read of the target
//!      ([`first_proof_read`]): the proof's baseline is the version the acknowledgement was
//!      seen at, and no proof read of the target came before the write landed — so the first
//!      pass sees the change and the reset is certain, not a race.
//! 3. Forever: the proof can never hold, so the run must exit 4 with the redacted counter line
//!    of the proof as its last stderr line (its next step on the line before: `kubectl …
//!    --show-managed-fields` naming the writer's field manager, `competing-writer` for the
//!    model's knob and `chaos-writer` for a plain client, never `--retire restart`, which
//!    cannot stop another writer), and the counters must show resets (`version_changes` > 0). Once: the run must
//!    exit 0 with a proof whose counters show the reset it survived.
//! 4. Both: afterwards no fence, the Lease free (state compared with the pre-run snapshot,
//!    plus the writer's last value), and that value is still on the target (read back from
//!    the server): never overwritten by the release.
//!
//! `chaos: writer runs=N timed_out=a completed=b violations=c`.

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use flux_model::model::{BUMP_ANNOTATION, ModelEvent, Phase, Touch};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use super::cell::{Cell, State, TARGET};
use super::crash::check_and_recover;
use super::discover::Baseline;
use super::recorder::{Entry, Hold, HoldRule};
use super::{Finding, Kind, Settings, Tally};

/// The annotation every writer sets on the target.
pub const WRITER_KEY: &str = "chaos.flux-handoff.io/writer";
/// Pause between two writes of a writer that never stops.
const EVERY: Duration = Duration::from_millis(150);
/// The run's budget on the command line (`--timeout`: the whole pause); the proof gets what is
/// left of it, and its timeout line prints that, at most this many seconds.
const TIMEOUT: &str = "5s";
const TIMEOUT_SECS: u64 = 5;
/// Exit codes.
const SUCCESS: i32 = 0;
const TIMED_OUT: i32 = 4;
/// The counter names of the proof line, in order.
const COUNTERS: [&str; 6] = [
    "observations",
    "unreadable",
    "child_not_owned",
    "parent_not_owned",
    "parent_changed",
    "version_changes",
];

/// Who writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// The controller model's competing-writer knob.
    Model,
    /// A plain client of the API server, setting the annotation.
    Client,
    /// A plain client of the API server, setting a spec field (`spec.timeout`).
    Spec,
}

impl Who {
    /// The `tag`-th value this writer writes.
    fn value(self, tag: u32) -> String {
        match self {
            Who::Spec => format!("{}s", 100 + tag),
            Who::Model | Who::Client => format!("w-{tag}"),
        }
    }

    /// The value of this writer's field on the target in `state`.
    fn held(self, state: &State) -> Option<String> {
        let target = state.objects.get(TARGET)?;
        match self {
            Who::Spec => target.spec["timeout"].as_str().map(str::to_string),
            Who::Model | Who::Client => target.annotations.get(WRITER_KEY).cloned(),
        }
    }

    /// `state` with this writer's `value` in it.
    fn apply(self, state: &mut State, value: &str) {
        if let Some(target) = state.objects.get_mut(TARGET) {
            match self {
                Who::Spec => target.spec["timeout"] = json!(value),
                Who::Model | Who::Client => {
                    target.annotations.insert(WRITER_KEY.into(), value.into());
                }
            }
        }
    }
}

/// How long it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Forever,
    Once,
}

/// Competing writers during the proof.
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let rounds = if s.quick { 1 } else { 3 };
    let (mut runs, mut timed_out, mut completed, mut bad) = (0, 0, 0, 0);
    let mut findings = Vec::new();
    for _ in 0..rounds {
        for how in [How::Forever, How::Once] {
            for who in [Who::Model, Who::Client, Who::Spec] {
                runs += 1;
                let (code, detail, problems) = one(s, base, who, how).await?;
                eprintln!(
                    "flux-chaos: writer {runs}: {who:?} {how:?}: exit {code}, {} problems ({})",
                    problems.len(),
                    detail
                );
                match code {
                    TIMED_OUT => timed_out += 1,
                    SUCCESS => completed += 1,
                    _ => {}
                }
                if !problems.is_empty() {
                    bad += 1;
                }
                findings.extend(problems.into_iter().map(|f| Finding {
                    text: format!("writer {who:?} {how:?}: {}", f.text),
                    ..f
                }));
            }
        }
    }
    Ok(Tally {
        scenario: "writer",
        count: runs,
        line: format!(
            "chaos: writer runs={runs} timed_out={timed_out} completed={completed} violations={bad}"
        ),
        findings,
    })
}

/// The run under test: the cell's flags with a slower interval, a short timeout and JSON.
fn run_cmd(s: &Settings, cell: &Cell) -> Command {
    let mut c = Command::new(&s.bin);
    c.env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .env_remove("KUBECONFIG")
        .arg("--kubeconfig")
        .arg(&cell.through_proxy)
        .arg("--config")
        .arg(&cell.config)
        .args(["--namespace", &cell.ns.name])
        .args([
            "--interval",
            "500ms",
            "--timeout",
            TIMEOUT,
            "--output",
            "json",
        ])
        .args(["run", "--target", TARGET, "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// One write by `who`: the value written, or why it failed.
async fn write(cell: &Cell, who: Who, value: &str) -> anyhow::Result<()> {
    match who {
        Who::Model => {
            cell.model
                .touch_now(
                    TARGET,
                    &Touch::Annotate {
                        key: WRITER_KEY.into(),
                        value: value.into(),
                    },
                )
                .await
        }
        Who::Client | Who::Spec => {
            let api = flux_suspend::object::api(
                &cell.ns.client,
                &flux_suspend::object::kustomization(&cell.ns.name, TARGET),
            );
            let pp = PatchParams {
                field_manager: Some("chaos-writer".into()),
                ..PatchParams::default()
            };
            let body = if who == Who::Spec {
                json!({ "spec": { "timeout": value } })
            } else {
                json!({ "metadata": { "annotations": { WRITER_KEY: value } } })
            };
            api.patch(TARGET, &pp, &Patch::Merge(body)).await?;
            Ok(())
        }
    }
}

/// The CLI under test with its stderr read live.
struct Live {
    child: tokio::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
    stdout: tokio::task::JoinHandle<String>,
}

impl Live {
    fn spawn(mut cmd: Command) -> anyhow::Result<Self> {
        let mut child = cmd.spawn()?;
        let stderr = child.stderr.take().context("no stderr")?;
        let mut stdout = child.stdout.take().context("no stdout")?;
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let reader = {
            let lines = lines.clone();
            tokio::spawn(async move {
                let mut r = BufReader::new(stderr).lines();
                while let Ok(Some(l)) = r.next_line().await {
                    lines.lock().unwrap_or_else(PoisonError::into_inner).push(l);
                }
            })
        };
        let stdout = tokio::spawn(async move {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s).await;
            s
        });
        Ok(Self {
            child,
            lines,
            reader,
            stdout,
        })
    }

    /// Whether stderr printed a line containing `needle` so far.
    fn seen(&self, needle: &str) -> bool {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|l| l.contains(needle))
    }

    fn running(&mut self) -> anyhow::Result<bool> {
        Ok(self.child.try_wait()?.is_none())
    }

    /// Waits within `bound` (killed on drop after it); (exit code or `None`, stdout, stderr),
    /// both [`super::record`]ed.
    async fn finish(mut self, bound: Duration) -> anyhow::Result<(Option<i32>, String, String)> {
        let code = if let Ok(status) = tokio::time::timeout(bound, self.child.wait()).await {
            Some(status?.code().unwrap_or(-1))
        } else {
            self.child.start_kill()?;
            None
        };
        let _ = self.reader.await;
        let out = self.stdout.await.unwrap_or_default();
        let err = self
            .lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .join("\n");
        super::record("stdout", &out);
        super::record("stderr", &err);
        Ok((code, out, err))
    }
}

/// Picks the proof's first read of the target: the first GET of it after its last PATCH (the
/// fence carrying the nonce) and after the acknowledgement's watch of its kind. The
/// acknowledgement sends no read of the target (it watches from the fence's version), and the
/// proof follows it directly, so that GET belongs to the proof's first pass, whose reads run
/// concurrently (the parent's may come before or after it). The proof compares that pass with
/// the versions the acknowledgement was seen at, so a write landing while the read is held is
/// seen by the proof whatever the timing: no pass could have completed without this read.
///
/// Were the acknowledgement ever to poll instead (its watch refused or broken), the picked GET
/// would be an acknowledgement read and the scenario would report the missing reset: loud, not
/// silent.
fn first_proof_read(namespace: &str) -> HoldRule {
    let kind_path = format!("/namespaces/{namespace}/kustomizations");
    let target = format!("{kind_path}/{TARGET}");
    Box::new(move |log: &[Entry], e: &Entry| {
        if e.mutating || !e.path.ends_with(&target) {
            return false;
        }
        let since = log
            .iter()
            .rposition(|x| x.mutating && x.path.ends_with(&target))
            .map_or(log.len(), |i| i + 1);
        let watched = log[since..]
            .iter()
            .any(|x| x.kind.starts_with("watch ") && x.path.ends_with(&kind_path));
        let read_since = log[since..]
            .iter()
            .any(|x| !x.mutating && x.path.ends_with(&target));
        watched && !read_since
    })
}

/// The writer's part, from the opening of the proof window; its last value written.
async fn compete(
    cell: &Cell,
    live: &mut Live,
    who: Who,
    how: How,
    hold: Option<Hold>,
    deadline: tokio::time::Instant,
) -> anyhow::Result<Option<String>> {
    let mut last = None;
    match (who, how) {
        (_, How::Forever) => {
            let mut i = 0u32;
            while live.running()? && tokio::time::Instant::now() < deadline {
                i += 1;
                let v = who.value(i);
                if write(cell, who, &v).await.is_ok() {
                    last = Some(v);
                }
                tokio::time::sleep(EVERY).await;
            }
        }
        (Who::Model, How::Once) => {
            // The knob fires inside the next reconcile of `apps` (a sibling the fence does not
            // stop): a new source revision starts one.
            let v = who.value(rand::random_range(1000..10_000));
            let mark = cell.model.mark();
            cell.model.touch_at(
                "apps",
                Phase::Fetch,
                TARGET,
                Touch::Annotate {
                    key: WRITER_KEY.into(),
                    value: v.clone(),
                },
            );
            let _ = cell.model.bump_source_revision("apps");
            if cell
                .model
                .wait_for(mark, |e| matches!(e, ModelEvent::Touched { .. }))
                .await
                .is_ok()
            {
                last = Some(v);
            }
        }
        (Who::Client | Who::Spec, How::Once) => {
            let mut hold = hold.context("a plain client writing once needs the recorder hold")?;
            let mut engaged = false;
            while !engaged && live.running()? && tokio::time::Instant::now() < deadline {
                engaged = tokio::select! {
                    e = hold.engaged() => e,
                    () = tokio::time::sleep(Duration::from_millis(50)) => false,
                };
            }
            if engaged {
                let v = who.value(rand::random_range(1000..10_000));
                write(cell, who, &v).await?;
                last = Some(v);
            }
            hold.release();
        }
    }
    Ok(last)
}

/// Runs one handoff with a competing writer; (exit code, the proof's counters, what was
/// wrong).
async fn one(
    s: &Settings,
    base: &Baseline,
    who: Who,
    how: How,
) -> anyhow::Result<(i32, String, Vec<Finding>)> {
    let cell = Cell::new(s, "chaos-writer").await?;
    let before = cell.state().await?;
    let hold = (how == How::Once && who != Who::Model)
        .then(|| cell.recorder.hold_once(first_proof_read(&cell.ns.name)));
    let mut live = Live::spawn(run_cmd(s, &cell))?;
    let mut problems = Vec::new();
    // The proof window opens once the target acknowledged the suspend.
    let deadline = tokio::time::Instant::now() + s.run_bound;
    while !live.seen("target acknowledged the suspend")
        && live.running()?
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let last = if live.running()? {
        let last = compete(&cell, &mut live, who, how, hold, deadline).await?;
        if last.is_none() && how == How::Once {
            problems.push(Finding::new(
                Kind::Other,
                "the single write never happened (for a plain client: the proof's first read \
                 of the target, after the acknowledgement's watch, was never held)",
            ));
        }
        last
    } else {
        problems.push(Finding::new(
            Kind::Other,
            "the run ended before its proof window opened",
        ));
        None
    };
    let (code, out, err) = live.finish(s.run_bound).await?;
    let code = code.unwrap_or_else(|| {
        problems.push(Finding::new(
            Kind::Other,
            format!("the CLI did not finish within {:?}", s.run_bound),
        ));
        -1
    });
    let mut tail = err.lines().rev();
    let last_line = tail.next().unwrap_or_default().to_string();
    let next_line = tail.next().unwrap_or_default();
    match how {
        How::Forever => problems.extend(timed_out_findings(who, code, &last_line, next_line)),
        How::Once => problems.extend(completed_findings(code, &out, &last_line)),
    }
    problems.extend(afterwards(&cell, base, &before, who, last.as_deref(), code).await?);
    cell.shutdown().await;
    let detail = if how == How::Once {
        proof_counters(&out)
    } else {
        last_line
    };
    Ok((code, detail, problems))
}

/// The writer's value survives the release (read back from the server), and nothing else
/// differs from `before` plus the writer's value; anything left must be listed and
/// recoverable.
async fn afterwards(
    cell: &Cell,
    base: &Baseline,
    before: &State,
    who: Who,
    last: Option<&str>,
    code: i32,
) -> anyhow::Result<Vec<Finding>> {
    let mut problems = Vec::new();
    let after = cell.state().await?;
    let held = who.held(&after);
    let mut expected = before.clone();
    match last {
        None => problems.push(Finding::new(Kind::Other, "the writer never wrote")),
        Some(v) => {
            if held.as_deref() != Some(v) {
                problems.push(Finding::new(
                    Kind::UnexpectedChange,
                    format!(
                        "the writer's last value {v} was overwritten: the target holds {held:?}"
                    ),
                ));
            }
            who.apply(&mut expected, v);
        }
    }
    let mut allowed = base.allowed.clone();
    allowed.push(BUMP_ANNOTATION.to_string());
    let left = after.diff(&expected, &allowed);
    if !left.is_empty() {
        problems.push(Finding::new(
            Kind::LeakedFence,
            format!("after exit {code}: the server holds {}", left.join(", ")),
        ));
        problems.extend(check_and_recover(cell, &expected, base).await?);
    }
    Ok(problems)
}

/// The counters of a proof line `... observations=N ... version_changes=N`, when every name is
/// there, in order, with a number.
fn counters(line: &str) -> Option<Vec<u64>> {
    let parts: Vec<&str> = line.split(' ').collect();
    (parts.len() == COUNTERS.len())
        .then_some(())
        .and_then(|()| {
            parts
                .iter()
                .zip(COUNTERS)
                .map(|(p, name)| p.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
                .collect()
        })
}

/// A writer that never stops: exit 4, the counter line last, resets counted, and the next
/// step on the line before it (`next`), never on the counter line.
fn timed_out_findings(who: Who, code: i32, last: &str, next: &str) -> Vec<Finding> {
    let mut f = Vec::new();
    if code != TIMED_OUT {
        f.push(Finding::new(
            Kind::Other,
            format!("exit {code}, not {TIMED_OUT} (timeout): {last}"),
        ));
    }
    // `error: stable pause not proven within <n>s: <counters>`, n at most the run's budget.
    let rest = last
        .strip_prefix("error: stable pause not proven within ")
        .and_then(|r| r.split_once("s: "))
        .filter(|(n, _)| n.parse::<u64>().is_ok_and(|n| n <= TIMEOUT_SECS))
        .map(|(_, counters)| counters);
    match rest.and_then(counters) {
        None => f.push(Finding::new(
            Kind::Other,
            format!("the last stderr line is not the proof's counter line: {last}"),
        )),
        Some(c) if c[5] == 0 => f.push(Finding::new(
            Kind::Other,
            format!("the counters show no reset by the writer: {last}"),
        )),
        Some(_) => {}
    }
    // Another writer is named by its field manager (the model's knob writes as
    // `competing-writer`, a plain client as `chaos-writer`): no restart stops it.
    let manager = match who {
        // flux-model's `COMPETING_WRITER` (its knobs module is private).
        Who::Model => "competing-writer",
        Who::Client | Who::Spec => "chaos-writer",
    };
    let expected = next.starts_with("next: kubectl -n ")
        && next.contains("--show-managed-fields")
        && next.contains(&format!("field manager {manager} "))
        && !next.contains("--retire restart");
    if !expected {
        f.push(Finding::new(
            Kind::Other,
            format!("the line before the counter line is not its next step: {next}"),
        ));
    }
    f
}

/// The proof's counter line in the JSON result on stdout (empty when absent).
fn proof_counters(stdout: &str) -> String {
    let doc: Value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    doc.pointer("/facts/proof/counters")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// A writer that touched once: exit 0 with a proof whose counters show the reset.
fn completed_findings(code: i32, stdout: &str, last: &str) -> Vec<Finding> {
    if code != SUCCESS {
        return vec![Finding::new(
            Kind::Other,
            format!("exit {code} after a single touch: {last}"),
        )];
    }
    let line = proof_counters(stdout);
    match counters(&line) {
        None => vec![Finding::new(
            Kind::Other,
            format!("no proof counters in the JSON result: {}", stdout.trim()),
        )],
        Some(c) if c[5] == 0 => vec![Finding::new(
            Kind::Other,
            format!("the proof did not see the touch (no reset): {line}"),
        )],
        Some(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::cell::PARENT;
    use super::*;

    #[test]
    fn the_counter_line_parses_only_in_its_fixed_form() {
        let line = "observations=9 unreadable=0 child_not_owned=0 parent_not_owned=0 \
                    parent_changed=0 version_changes=7";
        assert_eq!(counters(line), Some(vec![9, 0, 0, 0, 0, 7]));
        assert_eq!(counters("observations=9"), None);
        assert_eq!(counters(&line.replace("=7", "=x")), None);
    }

    #[test]
    fn a_timeout_without_the_counter_line_last_is_a_finding() {
        let ok = "error: stable pause not proven within 5s: observations=9 unreadable=0 \
                  child_not_owned=0 parent_not_owned=0 parent_changed=0 version_changes=7";
        let named = "next: kubectl -n n get kustomizations.kustomize.toolkit.fluxcd.io \
                     infrastructure --show-managed-fields -o yaml (field manager chaos-writer \
                     changed it during the proof, seen 7 time(s): a restart cannot stop another \
                     writer; stop it, then try again)";
        let findings =
            |code, last: &str, next: &str| timed_out_findings(Who::Client, code, last, next).len();
        assert_eq!(findings(4, ok, named), 0);
        // The proof gets what is left of the whole pause's budget.
        assert_eq!(findings(4, &ok.replace("within 5s", "within 4s"), named), 0);
        assert_eq!(findings(4, &ok.replace("within 5s", "within 9s"), named), 1);
        assert_eq!(findings(7, ok, named), 1);
        assert_eq!(findings(4, "lease released", named), 1);
        assert_eq!(
            findings(
                4,
                &ok.replace("version_changes=7", "version_changes=0"),
                named
            ),
            1
        );
        // The next step belongs on a line of its own, never on the counter line.
        let suffixed = format!("{ok}; next: flux-handoff run ks/n/infrastructure --retire restart");
        assert_eq!(findings(4, &suffixed, "✗ pause failed"), 2);
        assert_eq!(findings(4, ok, "✗ pause failed"), 1);
        // Another writer named with kubectl, never a restart, which cannot stop it.
        let restart = "next: flux-handoff run ks/n/infrastructure --retire restart -- …";
        assert_eq!(findings(4, ok, restart), 1);
        assert!(timed_out_findings(Who::Spec, 4, ok, named).is_empty());
        // The model's knob is named as what it is.
        let model = named.replace("chaos-writer", "competing-writer");
        assert!(timed_out_findings(Who::Model, 4, ok, &model).is_empty());
        assert_eq!(timed_out_findings(Who::Model, 4, ok, named).len(), 1);
    }

    fn get(path: &str) -> Entry {
        Entry {
            kind: "get kustomizations".into(),
            path: path.into(),
            mutating: false,
            status: Some(200),
            conditional: false,
        }
    }

    #[test]
    fn the_hold_picks_the_first_target_read_after_the_acknowledgement_watch() {
        const NS: &str = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/n/kustomizations";
        let (t, p) = (format!("{NS}/{TARGET}"), format!("{NS}/{PARENT}"));
        let patch = Entry {
            kind: "patch kustomizations".into(),
            mutating: true,
            ..get(&t)
        };
        let watch = Entry {
            kind: "watch kustomizations".into(),
            ..get(NS)
        };
        let rule = first_proof_read("n");
        // Pass 1 of the proof, the parent's read first or not at all yet.
        for log in [
            vec![patch.clone(), watch.clone()],
            vec![patch.clone(), watch.clone(), get(&p)],
        ] {
            assert!(rule(&log, &get(&t)), "{log:?}");
        }
        // Not a proof read: before the acknowledgement's watch, or a later pass's read, or
        // not the target.
        assert!(!rule(std::slice::from_ref(&patch), &get(&t)));
        assert!(!rule(&[watch.clone(), patch.clone()], &get(&t)));
        assert!(!rule(&[patch.clone(), watch.clone(), get(&t)], &get(&t)));
        assert!(!rule(&[patch.clone(), watch.clone()], &get(&p)));
        assert!(!rule(&[patch.clone(), watch], &patch));
    }
}
