//! End to end: a person breaks the pause while `run`'s command works — removes the fence with
//! a plain patch under their own field manager, deletes and recreates the target, flips
//! `spec.suspend` to false. The run must stop its command and exit 8 with one line naming the
//! object and what changed (and the field manager, when the server recorded one); afterwards
//! the server holds exactly what the cleanup may leave.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The command: records its pid, then sleeps. Bounded, so on code that does not watch the
/// pause the run ends by itself (exit 0) and the test fails on its exit code, not on a clock.
const WORKS: &str = "exec >/dev/null 2>&1; echo $$ > \"$MARKER\"; exec sleep 20";

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
    std::env::temp_dir().join(format!("flux-handoff-{}.broken", c.ns.name))
}

/// The command's pid, once it runs (the pause is proven then).
async fn command_pid(path: &Path) -> i32 {
    for _ in 0..1200 {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().parse().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} never appeared: the command did not start",
        path.display()
    );
}

fn ks(c: &Cluster) -> kube::Api<DynamicObject> {
    kube::Api::namespaced_with(
        c.ns.client.clone(),
        &c.ns.name,
        &testkit::fixtures::kustomization_resource(),
    )
}

/// A plain merge patch under `manager`, as `kubectl patch --field-manager` sends it.
async fn patch_as(c: &Cluster, manager: &str, patch: Value) {
    let pp = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    ks(c)
        .patch(TARGET, &pp, &Patch::Merge(patch))
        .await
        .unwrap();
}

fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// The parent was released and the Lease let go: all that was still ours.
async fn assert_parent_and_lease_released(c: &Cluster) {
    let parent = c.get(PARENT).await;
    assert_eq!(annotation(&parent, OWNER_KEY), None, "parent still fenced");
    assert!(!suspended(&parent), "parent still suspended");
    let holder = c.ns.lease_holder().await.unwrap_or_default();
    assert!(holder.is_empty(), "Lease still held by {holder}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_broken_a_fence_removed_by_another_field_manager_stops_the_run() {
    let c = Cluster::seeded("broken-fence").await;
    let m = marker(&c);
    let child = start_run(&c, &m);
    let pid = command_pid(&m).await;
    patch_as(
        &c,
        "kubectl-annotate",
        json!({"metadata": {"annotations": {OWNER_KEY: null}}}),
    )
    .await;
    let (code, err) = ended(child).await;
    let _ = std::fs::remove_file(&m);
    assert_eq!(code, 8, "{err}");
    let line = format!(
        "Kustomization {}/{TARGET}: its fence (the owner annotation) was removed (the server \
         recorded no field manager for it)",
        c.ns.name
    );
    assert!(err.contains(&line), "{err}");
    assert!(gone(pid), "the command still runs: {err}");
    // The target is not ours any more: left as the person left it, still suspended.
    let target = c.get(TARGET).await;
    assert_eq!(annotation(&target, OWNER_KEY), None);
    assert!(suspended(&target), "the cleanup touched an object not ours");
    assert_parent_and_lease_released(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_broken_an_object_deleted_and_recreated_stops_the_run() {
    let c = Cluster::seeded("broken-recreated").await;
    let m = marker(&c);
    let child = start_run(&c, &m);
    let pid = command_pid(&m).await;
    let old = c.get(TARGET).await;
    let api = ks(&c);
    // Finalizers off first, so the delete is immediate, then the same spec under a new uid.
    patch_as(
        &c,
        "kubectl-edit",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    api.delete(TARGET, &DeleteParams::default()).await.unwrap();
    let mut fresh: DynamicObject = serde_json::from_value(json!({
        "apiVersion": old["apiVersion"],
        "kind": "Kustomization",
        "metadata": {"name": TARGET, "namespace": c.ns.name, "labels": old["metadata"]["labels"]},
        "spec": old["spec"],
    }))
    .unwrap();
    fresh.data["spec"]["suspend"] = json!(false);
    let pp = PostParams {
        field_manager: Some("kubectl-create".into()),
        ..PostParams::default()
    };
    api.create(&pp, &fresh).await.unwrap();
    let (code, err) = ended(child).await;
    let _ = std::fs::remove_file(&m);
    assert_eq!(code, 8, "{err}");
    let object = format!("Kustomization {}/{TARGET}: ", c.ns.name);
    assert!(err.contains(&object), "{err}");
    assert!(
        err.contains("it was deleted") || err.contains("is being deleted"),
        "{err}"
    );
    assert!(gone(pid), "the command still runs: {err}");
    // The new object was never ours: untouched.
    let target = c.get(TARGET).await;
    assert_ne!(target["metadata"]["uid"], old["metadata"]["uid"]);
    assert_eq!(annotation(&target, OWNER_KEY), None);
    assert!(!suspended(&target));
    assert_parent_and_lease_released(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_broken_suspend_flipped_by_a_person_stops_the_run_and_names_the_field_manager() {
    let c = Cluster::seeded("broken-suspend").await;
    let m = marker(&c);
    let child = start_run(&c, &m);
    let pid = command_pid(&m).await;
    let owner = annotation(&c.get(TARGET).await, OWNER_KEY)
        .unwrap()
        .to_string();
    patch_as(&c, "kubectl-patch", json!({"spec": {"suspend": false}})).await;
    let (code, err) = ended(child).await;
    let _ = std::fs::remove_file(&m);
    assert_eq!(code, 8, "{err}");
    let line = format!(
        "Kustomization {}/{TARGET}: spec.suspend was set to false by field manager \
         \"kubectl-patch\"",
        c.ns.name
    );
    assert!(err.contains(&line), "{err}");
    assert!(gone(pid), "the command still runs: {err}");
    // The person's resume is the only moved mark: the release keeps it and removes our fence
    // (was: kept, issue 35), and the parent and the Lease follow (tests/e2e_flux_resume.rs).
    let target = c.get(TARGET).await;
    assert_ne!(annotation(&target, OWNER_KEY), Some(owner.as_str()));
    assert!(!suspended(&target));
    assert_parent_and_lease_released(&c).await;
}

/// After a person's resume by hand mid-run — `flux resume` and `reconcile: disabled` removed
/// too, so more than the pause moved and the release is withheld — the error line ends with
/// the command that settles the target; running it (and the resume it names) leaves the
/// target as the person wanted it (spec.suspend false, no `reconcile: disabled`, no fence) and
/// the parent and Lease released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_step_withheld_release_after_a_resume_by_hand_names_the_restore_and_it_works() {
    let c = Cluster::seeded("next-withheld").await;
    let before = c.get(TARGET).await;
    let m = marker(&c);
    let child = start_run(&c, &m);
    command_pid(&m).await;
    let owner = annotation(&c.get(TARGET).await, OWNER_KEY)
        .unwrap()
        .to_string();
    let holder = owner.split(';').next().unwrap().to_string();
    patch_as(
        &c,
        "flux-client-side-apply",
        json!({
            "spec": {"suspend": false},
            "metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/reconcile": null}}
        }),
    )
    .await;
    let (ended_with, err) = ended(child).await;
    let _ = std::fs::remove_file(&m);
    assert_eq!(ended_with, 8, "{err}");
    let target = format!("ks/{}/{TARGET}", c.ns.name);
    let error = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    let restore = format!(
        "flux-handoff fences release {target} --holder {holder} --holder-exited --keep-moved"
    );
    assert!(
        error.contains(&format!(
            "; next: {restore} (keeps annotation kustomize.toolkit.fluxcd.io/reconcile and any \
             other value"
        )),
        "{err}"
    );
    assert!(
        error.ends_with(&format!(
            "then flux-handoff resume --holder {holder} --holder-exited"
        )),
        "{err}"
    );

    // The restore, as printed (plus this test's Lease).
    let lease = format!("{}/flux-handoff", c.ns.name);
    let args = [
        "fences",
        "release",
        &target,
        "--holder",
        &holder,
        "--holder-exited",
        "--keep-moved",
    ];
    let mut args = args.to_vec();
    args.extend(["--lease", lease.as_str()]);
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let t = c.get(TARGET).await;
    assert_eq!(annotation(&t, OWNER_KEY), None, "{t}");
    assert!(!suspended(&t), "the person's resume stays: {t}");
    let reconcile = "kustomize.toolkit.fluxcd.io/reconcile";
    assert_eq!(
        annotation(&t, reconcile),
        annotation(&before, reconcile),
        "{t}"
    );
    assert!(
        t["metadata"]["labels"]
            .get("flux-handoff.io/fenced")
            .is_none(),
        "{t}"
    );

    // Then the rest of the pause.
    let mut args = vec!["resume", "--holder", holder.as_str(), "--holder-exited"];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_parent_and_lease_released(&c).await;
}
