//! End to end, issue 35: a person's `flux resume` of the paused child while `run`'s command
//! works. They asked for Flux back, so the cleanup keeps their `spec.suspend: false`, restores
//! the child's other marks, removes its fence and goes on with the chain: the parent is
//! resumed and the Lease let go in the same run. The run still ends with exit 8 (the pause
//! broke under the command, which was stopped), with nothing left held.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use common::*;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

/// The command: records its pid, then sleeps. Bounded, so on code that does not watch the
/// pause the run ends by itself and the test fails on what the server holds, not on a clock.
const WORKS: &str = "exec >/dev/null 2>&1; echo $$ > \"$MARKER\"; exec sleep 20";

const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";
const FENCED_LABEL: &str = "flux-handoff.io/fenced";

fn start_run(c: &Cluster, marker: &Path) -> Child {
    let mut cmd = c.cli();
    cmd.args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c", WORKS])
        .env("MARKER", marker)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

fn marker(c: &Cluster) -> PathBuf {
    std::env::temp_dir().join(format!("flux-handoff-{}.resume", c.ns.name))
}

fn ks(c: &Cluster) -> kube::Api<DynamicObject> {
    kube::Api::namespaced_with(
        c.ns.client.clone(),
        &c.ns.name,
        &testkit::fixtures::kustomization_resource(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_engine_a_persons_flux_resume_of_the_child_is_kept_and_the_chain_resumes() {
    // `flux resume`: spec.suspend false under its own field manager.
    resumed_mid_run(
        "flux-resume",
        json!({"spec": {"suspend": false}}),
        Some(json!(false)),
    )
    .await;
}

/// Flux Operator's resume removes `spec.suspend` instead of setting it false: the same
/// request for Flux back (issue 38). Before, the release withheld the child's fence as a
/// moved mark, and the parent and the Lease stayed held with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_kinds_a_removed_suspend_ends_the_run_with_exit_8_and_the_chain_resumes() {
    resumed_mid_run("op-resume", json!({"spec": {"suspend": null}}), None).await;
}

/// A person resumes the paused child with `patch` while the run's command works; the child
/// then holds `want` at `spec.suspend`.
async fn resumed_mid_run(name: &str, patch: serde_json::Value, want: Option<serde_json::Value>) {
    let c = Cluster::seeded(name).await;
    let (target_before, parent_before) = (c.get(TARGET).await, c.get(PARENT).await);
    let m = marker(&c);
    let child = start_run(&c, &m);
    wait_for_file(&m, "the run's command (the pause proven)").await;
    let pp = PatchParams {
        field_manager: Some("flux-client-side-apply".into()),
        ..PatchParams::default()
    };
    ks(&c)
        .patch(TARGET, &pp, &Patch::Merge(patch))
        .await
        .unwrap();
    let (code, err) = ended(child).await;
    let _ = std::fs::remove_file(&m);

    // No fence on any member: the child released keeping the person's value, the parent too.
    let fenced = ks(&c)
        .list(&ListParams::default().labels(FENCED_LABEL))
        .await
        .unwrap();
    let names: Vec<_> = fenced
        .items
        .iter()
        .map(|o| o.metadata.name.clone())
        .collect();
    assert!(names.is_empty(), "still fenced: {names:?}\n{err}");
    let target = c.get(TARGET).await;
    assert_eq!(annotation(&target, OWNER_KEY), None, "{target}\n{err}");
    assert_eq!(
        target["spec"].get("suspend"),
        want.as_ref(),
        "the person's resume stays: {target}"
    );
    assert_eq!(
        annotation(&target, RECONCILE),
        annotation(&target_before, RECONCILE),
        "the child's other marks restored: {target}"
    );
    let parent = c.get(PARENT).await;
    assert_eq!(annotation(&parent, OWNER_KEY), None, "{parent}\n{err}");
    assert_eq!(
        parent["spec"].get("suspend"),
        parent_before["spec"].get("suspend"),
        "the parent resumed to its prior value: {parent}"
    );
    assert!(!suspended(&parent), "{parent}");
    let holder = c.ns.lease_holder().await;
    assert_eq!(holder, None, "Lease still held\n{err}");

    // Exit 8: the pause broke under the command, which was stopped; nothing is left held.
    assert_eq!(code, 8, "{err}");
    assert!(
        err.contains("keeping spec.suspend as another writer left it"),
        "{err}"
    );
    assert!(!err.contains("still held or unsettled"), "{err}");
    assert!(!err.contains("--keep-moved"), "{err}");
}

/// A person's `flux resume` of the child while the stable pause is being proven: no later pass
/// can mend that, so the run ends at the next pass with exit 8 (pause broken), naming the
/// child, instead of waiting out `--timeout` for exit 4. The proof is slowed by a 5 s interval
/// and the resume sent once the CLI says the target acknowledged (the proof starts next), so it lands
/// inside the proof, not before. Afterwards nothing is held and the child keeps the person's
/// `spec.suspend: false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proof_a_flux_resume_during_the_proof_ends_it_at_once_with_exit_8() {
    use std::io::BufRead;
    let c = Cluster::seeded("proof-resumed").await;
    // `Cluster::cli`'s flags with a slow proof: passes 5 s apart.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    cmd.env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .args([
            "--namespace",
            &c.ns.name,
            "--interval",
            "5s",
            "--timeout",
            "60s",
        ])
        .stdin(Stdio::null())
        .args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    for line in &rx {
        // The proof starts right after this line (as the chaos suite's writer scenario knows).
        let proving = line.contains("target acknowledged the suspend");
        lines.push(line);
        if proving {
            ks(&c)
                .patch(
                    TARGET,
                    &PatchParams::apply("flux"),
                    &Patch::Merge(json!({ "spec": { "suspend": false } })),
                )
                .await
                .unwrap();
            break;
        }
    }
    lines.extend(rx.iter());
    reader.join().unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    let err = lines.join("\n");
    assert_eq!(code, 8, "{err}");
    assert!(
        err.contains("broken during the stable-pause proof")
            && err.contains(&format!("{}/{TARGET}", c.ns.name)),
        "{err}"
    );
    for name in [PARENT, TARGET] {
        assert_eq!(
            annotation(&c.get(name).await, OWNER_KEY),
            None,
            "{name}: {err}"
        );
    }
    assert!(
        !suspended(&c.get(TARGET).await),
        "the person's resume is kept: {err}"
    );
    assert!(!suspended(&c.get(PARENT).await), "{err}");
}
