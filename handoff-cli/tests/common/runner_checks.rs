//! What the `runner_cancel_` tests check after an emulated job, and how they build its steps:
//! the flags that point flux-handoff at a test's namespace, the `run:` scripts, the commands
//! (one that stops at SIGTERM, one that ignores it), and the checks — nothing held, the specs as
//! before, no process of the command left, Events that say the run was cancelled, no secret in
//! what the job leaves behind.

#![allow(dead_code)] // each test binary uses a different part

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use serde_json::Value;

use super::runner::{self, Ended};
use super::{Cluster, OWNER_KEY, PARENT, TARGET, annotation};

/// A command that stops at SIGTERM (flux-handoff's first move on a signal).
pub const PROMPT: &str = "exec sleep 600";
/// A command that ignores SIGTERM (so does its `sleep`: an ignored signal stays ignored across
/// exec); only SIGKILL stops it.
pub const STUBBORN: &str = "trap '' TERM; while :; do sleep 1; done";

/// The Flux objects' specs before the run.
pub async fn specs(c: &Cluster) -> Vec<Value> {
    let mut out = Vec::new();
    for name in [PARENT, TARGET] {
        out.push(c.get(name).await["spec"].clone());
    }
    out
}

/// Nothing held (no fence, Lease free), the specs as before the run.
pub async fn assert_restored(c: &Cluster, before: &[Value]) {
    for (name, spec) in [PARENT, TARGET].into_iter().zip(before) {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
        assert_eq!(&o["spec"], spec, "{name}: spec not as before the run");
    }
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.is_empty(), "Lease still held by {holder}");
}

/// Messages of the `HandoffReleased` Events on object `name`.
pub async fn released_events(c: &Cluster, name: &str) -> Vec<String> {
    let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
    let events = c.ns.api::<Event>().list(&lp).await.unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("HandoffReleased"))
        .filter_map(|e| e.message)
        .collect()
}

/// The Events of both objects say their release was a cancellation.
pub async fn assert_events_say_cancelled(c: &Cluster) {
    for name in [PARENT, TARGET] {
        let msgs = released_events(c, name).await;
        assert!(
            msgs.iter().any(|m| m.to_lowercase().contains("cancel")),
            "no HandoffReleased Event on {name} says the run was cancelled: {msgs:?}"
        );
    }
}

/// The flags that point flux-handoff at this test's namespace, target, Lease and controller.
pub fn flux_args(c: &Cluster) -> Vec<String> {
    let ns = &c.ns.name;
    [
        "--namespace",
        ns,
        "--interval",
        "200ms",
        "--timeout",
        "30s",
        "--target",
        TARGET,
        "--lease",
        &format!("{ns}/flux-handoff"),
        "--controller",
        &format!("{ns}/kustomize-controller"),
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

/// Shell quoting for the `run:` scripts.
pub fn sh(a: &str) -> String {
    format!("'{}'", a.replace('\'', r"'\''"))
}

/// The `run:` script: `exec` (the documented safe form) or not.
pub fn run_script(c: &Cluster, exec: bool, command: &str) -> String {
    let args: Vec<String> = flux_args(c).iter().map(|a| sh(a)).collect();
    format!(
        "echo starting the handoff\n{}flux-handoff --kubeconfig {} run {} -- bash -c {}\n",
        if exec { "exec " } else { "" },
        sh(&c.kubeconfig.display().to_string()),
        args.join(" "),
        sh(command)
    )
}

/// `command` after writing its shell's pid to `marker`, so the test knows the pause is proven,
/// the command runs, and which process group is the command's (flux-handoff starts it as the
/// leader of a group of its own).
pub fn marked(marker: &Path, command: &str) -> String {
    let m = sh(&marker.display().to_string());
    format!("echo $$ > {m}.tmp && mv {m}.tmp {m}; {command}")
}

/// Waits until the command started; returns its process group. Fails at once when the step
/// ended first (the command can no longer start).
pub async fn wait_for_command(marker: &Path, step: &mut runner::Step) -> u32 {
    for _ in 0..2400 {
        if let Ok(pid) = std::fs::read_to_string(marker) {
            return pid.trim().parse().unwrap();
        }
        assert!(
            !step.exited(),
            "the step ended before the command started:\n{}",
            step.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} never appeared: the command never started",
        marker.display()
    );
}

/// Nothing of the command's process group outlived the cancelled run (a command left running
/// would still be working on objects handed back to Flux). Kills what is left, then fails.
pub fn assert_command_gone(pgid: u32) {
    let left = runner::group_members(pgid);
    if !left.is_empty() {
        let _ = testkit::signal::to_group(pgid, "KILL");
    }
    assert!(
        left.is_empty(),
        "the command's processes {left:?} outlived the cancelled run"
    );
}

pub async fn cancel(step: runner::Step) -> Ended {
    let ended = tokio::task::spawn_blocking(move || step.cancel())
        .await
        .unwrap();
    eprintln!(
        "cancelled: signals {:?}, over {:.2}s after the first, exit {}",
        ended.signals,
        ended.took.unwrap_or_default().as_secs_f64(),
        ended.code()
    );
    ended
}

pub async fn finish(step: runner::Step) -> Ended {
    tokio::task::spawn_blocking(move || step.wait())
        .await
        .unwrap()
}

/// A fake registry token in the job's environment, and the control plane's own credential: the
/// texts a run leaves behind must hold neither, nor their base64 forms.
pub struct Secrets(Vec<String>);

impl Secrets {
    pub fn new(c: &Cluster) -> (Self, String) {
        let token = format!("ghp_{}", testkit::random_suffix(36));
        let mut all = vec![token.clone()];
        let kc = kube::config::Kubeconfig::read_from(&c.kubeconfig).unwrap();
        for a in kc.auth_infos.iter().filter_map(|a| a.auth_info.as_ref()) {
            if let Some(t) = &a.token {
                all.push(secrecy::ExposeSecret::expose_secret(t).to_string());
            }
        }
        let b64: Vec<String> = all
            .iter()
            .map(|s| base64::engine::general_purpose::STANDARD.encode(s))
            .collect();
        all.extend(b64);
        (Self(all), token)
    }

    pub fn assert_absent(&self, what: &str, text: &str) {
        for s in &self.0 {
            assert!(!text.contains(s.as_str()), "a secret appears in {what}");
        }
    }
}

pub fn inputs<'a>(args: &'a str, kubeconfig: &'a str, run: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("command", "run"),
        ("args", args),
        ("run", run),
        ("kubeconfig", kubeconfig),
    ]
}
