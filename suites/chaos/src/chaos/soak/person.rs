//! A person's maintenance among the queue (issue 48, deliverable 8): `flux-handoff pause apps
//! --reason ... --wait-lease 4m` (it queues like every job), held a while, then `resume apps
//! --timeout 3s`, which releases everything and then waits for Ready. When the plan says so
//! the controller model fails every reconcile of `apps` from before the resume until it ended
//! (a controller that does not report Ready for that object for a while): the resume must then
//! exit 10 ("released, not Ready"), and in every case leave no Lease behind.
//!
//! The person talks to the API server directly (not through the fault proxy): what is judged
//! here is the jobs around the pause, and the resume's own promise.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use flux_model::model::{ModelHandle, Phase};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};

use super::schedule::{Person, RESUME_TIMEOUT_S};
use crate::chaos::cell::LEASE;
use crate::chaos::nemesis::checker::Outcome;

/// The Kustomization a person pauses (a sibling of the jobs' target, under the same parent).
pub const PAUSED: &str = "apps";
/// A bound no step of the person reaches unless something hangs.
const BOUND: Duration = Duration::from_mins(5);

/// How to run the CLI as the person.
#[derive(Debug, Clone)]
pub struct As {
    pub bin: PathBuf,
    /// Kubeconfig straight to the API server.
    pub direct: PathBuf,
    pub config: PathBuf,
    pub namespace: String,
}

/// What the person did.
#[derive(Debug, Clone, Default)]
pub struct Done {
    /// The pause's holder (empty when the pause failed before printing it).
    pub holder: String,
    /// The checker's outcomes of the pause and the resume.
    pub outcomes: Vec<Outcome>,
    /// When the resume started and ended (none when the pause failed).
    pub resume_span: Option<(Instant, Instant)>,
    /// The resume's exit code.
    pub resume_code: Option<i32>,
    /// Whether the model was failing `apps` during the resume.
    pub ready_failed: bool,
    /// Broken promises: the resume's exit code, a Lease left behind.
    pub problems: Vec<String>,
}

impl As {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bin);
        c.env_remove("GITHUB_ACTIONS")
            .env_remove("FLUX_HANDOFF_CONFIG")
            .env_remove("FLUX_HANDOFF_HOLDER")
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(&self.direct)
            .arg("--config")
            .arg(&self.config)
            .args(["--namespace", &self.namespace, "--interval", "200ms"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs `args`: (exit code, stdout, stderr); a run past [`BOUND`] is `None` (killed).
    async fn output(&self, args: &[&str]) -> anyhow::Result<(Option<i32>, String, String)> {
        match tokio::time::timeout(BOUND, self.command(args).output()).await {
            Ok(out) => {
                let out = out?;
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                Ok((out.status.code(), text(&out.stdout), text(&out.stderr)))
            }
            Err(_) => Ok((None, String::new(), "killed at the harness's bound".into())),
        }
    }
}

fn last_line(err: &str) -> String {
    err.lines()
        .rev()
        .find(|l| l.contains("error"))
        .or_else(|| err.lines().last())
        .unwrap_or_default()
        .to_string()
}

/// Plays `p` from `start` (the group's start).
pub async fn play(
    who: &As,
    client: &kube::Client,
    model: &ModelHandle,
    p: &Person,
    (group, start): (usize, Instant),
) -> anyhow::Result<Done> {
    tokio::time::sleep_until((start + Duration::from_millis(p.at_ms)).into()).await;
    let reason = format!("maintenance of group {group}");
    let (code, out, err) = who
        .output(&["pause", PAUSED, "--reason", &reason, "--wait-lease", "4m"])
        .await?;
    let holder = out.lines().last().unwrap_or_default().trim().to_string();
    let mut done = Done {
        holder: holder.clone(),
        ..Done::default()
    };
    done.outcomes.push(Outcome {
        holder: holder.clone(),
        verb: "pause",
        code,
        killed: false,
        last: last_line(&err),
    });
    if code != Some(0) || holder.is_empty() {
        done.problems.push(format!(
            "the person's pause exited {code:?}: {}",
            last_line(&err)
        ));
        return Ok(done);
    }
    tokio::time::sleep(Duration::from_millis(p.hold_ms)).await;
    if p.ready_fails {
        model.fail_at(PAUSED, Phase::Health);
    }
    // Ready comes within 3 s on an idle machine; a loaded one gets 10 s unless it must fail.
    let timeout = format!("{}s", if p.ready_fails { RESUME_TIMEOUT_S } else { 10 });
    let r0 = Instant::now();
    let resumed = resume(who, &timeout).await;
    let r1 = Instant::now();
    if p.ready_fails {
        model.heal(PAUSED);
        // Ready again for the next person: a reconcile requested once the failures stopped.
        request_reconcile(client, &who.namespace).await;
    }
    let (code, _, err) = resumed?;
    done.resume_span = Some((r0, r1));
    done.resume_code = code;
    done.ready_failed = p.ready_fails;
    // Exit 10 released everything as exit 0 does: for the checker, nothing is held.
    done.outcomes.push(Outcome {
        holder: holder.clone(),
        verb: "resume",
        code: code.map(|c| if c == 10 { 0 } else { c }),
        killed: false,
        last: last_line(&err),
    });
    let expected = if p.ready_fails { 10 } else { 0 };
    if code != Some(expected) {
        done.problems.push(format!(
            "the person's resume exited {code:?}, not {expected} (apps {}): {}",
            if p.ready_fails {
                "kept from Ready"
            } else {
                "free to be Ready"
            },
            last_line(&err)
        ));
    }
    let still = held_by(client, &who.namespace)
        .await?
        .is_some_and(|h| h == holder);
    if still {
        done.problems.push(format!(
            "the Lease is still held by the person's pause {holder} after its resume exited \
             {code:?}"
        ));
    }
    Ok(done)
}

/// `resume apps`, run again (at most 3 times, 1 s apart) while it exits 6 — an API error
/// with nothing changed, e.g. its first read refused while the API server restarts — as the
/// person would (the 200-job soak of 0dc991b counted each such first attempt's parked Lease).
async fn resume(who: &As, timeout: &str) -> anyhow::Result<(Option<i32>, String, String)> {
    let mut tries = 0;
    loop {
        let out = who
            .output(&["--timeout", timeout, "resume", PAUSED])
            .await?;
        tries += 1;
        if out.0 != Some(6) || tries == 3 {
            return Ok(out);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The Lease's holder, read again while the API server restarts (a fault of the group).
async fn held_by(client: &kube::Client, ns: &str) -> anyhow::Result<Option<String>> {
    let api = Api::<Lease>::namespaced(client.clone(), ns);
    let mut tries = 0;
    loop {
        match api.get_opt(LEASE).await {
            Ok(l) => return Ok(l.and_then(|l| l.spec?.holder_identity)),
            Err(e) if tries >= 60 => return Err(e.into()),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// `reconcile.fluxcd.io/requestedAt` on [`PAUSED`] (best effort: the next person's resume
/// requests one too).
async fn request_reconcile(client: &kube::Client, ns: &str) {
    let api = flux_suspend::object::api(client, &flux_suspend::object::kustomization(ns, PAUSED));
    let at = format!("soak-person-{}", testkit::random_suffix(6));
    let body = serde_json::json!({ "metadata": { "annotations": {
        "reconcile.fluxcd.io/requestedAt": at } } });
    let _ = api
        .patch(PAUSED, &PatchParams::default(), &Patch::Merge(&body))
        .await;
}
