//! End to end (issue 48, deliverable 3): `resume` releases first, then reports. A Ready wait
//! that fails after a resume is a report of its own (exit 10: everything handed back, an
//! object not Ready in time), never a Lease left held and parked; a stop during that wait ends
//! it at once (exit 130), after the release.

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};

use common::*;
use flux_model::model::Phase;
use k8s_openapi::api::coordination::v1::Lease;

const PARKED_KEY: &str = "flux-handoff.io/parked";
const CHAIN_KEY: &str = "flux-handoff.io/chain";
/// `exit::NOT_READY`: released, but not Ready in time.
const NOT_READY: i32 = 10;

/// `Cluster::cli` with `--timeout` of its own (the global flag is given once).
fn cli_timeout(c: &Cluster, timeout: &str) -> Command {
    c.cli_with(&c.kubeconfig, timeout)
}

/// `pause --target TARGET --reason maint`; returns the holder.
async fn pause(c: &Cluster) -> String {
    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--target", TARGET, "--reason", "maint"];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

async fn lease(c: &Cluster) -> Lease {
    c.ns.api::<Lease>().get("flux-handoff").await.unwrap()
}

/// The Lease is free: no holder, no parked mark, no chain record.
fn assert_lease_free(l: &Lease) {
    let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone());
    assert_eq!(holder, None, "Lease still held: {l:?}");
    let annotations = l.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(PARKED_KEY), None, "still parked: {l:?}");
    assert_eq!(annotations.get(CHAIN_KEY), None, "chain record left: {l:?}");
}

/// No fence and no suspension left on the chain.
async fn assert_unfenced(c: &Cluster) {
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced: {o}");
        assert!(!suspended(&o), "{name} still suspended: {o}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_report_a_failed_ready_wait_hands_everything_back_and_frees_the_lease() {
    let c = Cluster::seeded("rr-fail").await;
    let holder = pause(&c).await;
    // The controller is stuck: every reconcile of the target parks in its build, so the
    // target never becomes Ready after the resume.
    c.model.hang_at(TARGET, Phase::Build);
    let mut cmd = cli_timeout(&c, "5s");
    cmd.args(["resume", TARGET]).args(c.handoff_flags());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), NOT_READY, "{err}");
    assert!(
        err.contains(&format!("Kustomization {}/{TARGET}", c.ns.name)) && err.contains("not Ready"),
        "the line names the object not Ready: {err}"
    );
    assert!(err.contains("handed back"), "{err}");
    assert!(!err.contains("cleanup failed"), "{err}");
    assert_lease_free(&lease(&c).await);
    assert_unfenced(&c).await;

    // The queue goes on: the next run waits for nothing and deploys.
    c.model.release(TARGET);
    let flags = c.handoff_flags();
    let mut args = vec!["run", "--target", TARGET, "--wait-lease", "30s"];
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--", "true"]);
    let out = c.run(&args).await;
    assert_eq!(
        code(&out),
        0,
        "after the resume of {holder}: {}",
        stderr(&out)
    );
    assert_lease_free(&lease(&c).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_report_sigint_during_the_ready_wait_ends_it_after_the_release() {
    let c = Cluster::seeded("rr-int").await;
    pause(&c).await;
    c.model.hang_at(TARGET, Phase::Build);
    // A budget far longer than a signal takes: only the signal can end the wait early.
    let mut cmd = cli_timeout(&c, "60s");
    cmd.args(["resume", TARGET])
        .args(c.handoff_flags())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let mut lines = Vec::new();
    let mut signalled = false;
    let got = tokio::task::spawn_blocking(move || {
        let read = std::io::BufReader::new(stderr).lines();
        for line in read.map_while(Result::ok) {
            // The Lease goes back before the Ready wait begins.
            let released = line.contains("lease released");
            lines.push(line);
            if released && !signalled {
                signalled = true;
                let sent = testkit::signal::to_process(pid, "INT");
                assert!(sent.is_ok(), "SIGINT to {pid}: {sent:?}");
            }
        }
        let status = child.wait().unwrap();
        (status.code().unwrap_or(-1), lines.join("\n"), signalled)
    })
    .await
    .unwrap();
    let (code, err, signalled) = got;
    assert!(
        signalled,
        "the Lease was never released before the wait: {err}"
    );
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_lease_free(&lease(&c).await);
    assert_unfenced(&c).await;
    c.model.release(TARGET);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_report_a_ready_resume_exits_0_with_its_reconcile_request_handled() {
    let c = Cluster::seeded("rr-ok").await;
    pause(&c).await;
    let mut cmd = cli_timeout(&c, "60s");
    cmd.args(["resume", TARGET]).args(c.handoff_flags());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_lease_free(&lease(&c).await);
    assert_unfenced(&c).await;
    // The request was sent (a JSON patch the real API server accepted) and handled.
    let target = c.get(TARGET).await;
    let requested = annotation(&target, "reconcile.fluxcd.io/requestedAt");
    assert!(requested.is_some(), "{target}");
    assert_eq!(
        target["status"]["lastHandledReconcileAt"].as_str(),
        requested,
        "{target}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_report_a_write_moving_the_object_during_the_request_does_not_fail_it() {
    use kube::api::{DynamicObject, Patch, PatchParams};
    let c = Cluster::seeded("rr-moved").await;
    pause(&c).await;
    // The resume goes through a proxy; the pause did not.
    let proxy = fault_proxy::Proxy::start().await.unwrap();
    let kc = std::env::temp_dir().join(format!("fh-rr-{}.json", testkit::random_suffix(6)));
    proxy.write_kubeconfig(&kc).unwrap();
    // Its patches: the target's release, the parent's, then the target's reconcile request.
    let held = proxy.hold_on("patch kustomizations", 3);
    let mut cmd = c.cli_with(&kc, "60s");
    cmd.args(["resume", TARGET]).args(c.handoff_flags());
    let resume = tokio::task::spawn_blocking(move || cmd.output().unwrap());
    tokio::time::timeout(std::time::Duration::from_mins(2), held.arrived())
        .await
        .expect("the reconcile request never came");
    // Between the resume's read and its request, a status write moves the object's
    // resourceVersion, as the controller's do after every release.
    let ks: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        c.ns.client.clone(),
        &c.ns.name,
        &testkit::fixtures::kustomization_resource(),
    );
    let before = c.get(TARGET).await["metadata"]["resourceVersion"].clone();
    let status = serde_json::json!({ "status": { "lastAttemptedRevision": "rr-moved" } });
    ks.patch_status(TARGET, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
    assert_ne!(c.get(TARGET).await["metadata"]["resourceVersion"], before);
    held.forward();
    let out = resume.await.unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // One request was enough: nothing it tests moved.
    let on_target = format!("/kustomizations/{TARGET}");
    let patches = proxy
        .log()
        .into_iter()
        .filter(|r| r.kind == "patch kustomizations" && r.path.ends_with(&on_target))
        .count();
    assert_eq!(
        patches,
        2,
        "the release and one reconcile request: {:?}",
        proxy.log()
    );
    assert_lease_free(&lease(&c).await);
    let _ = std::fs::remove_file(kc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_report_a_stop_before_the_first_write_writes_nothing() {
    use std::str::FromStr;
    let c = Cluster::seeded("rr-stop").await;
    let holder = pause(&c).await;
    let before = lease(&c).await;
    let scope = flux_fence::discover::Scope::Namespaces(vec![c.ns.name.clone()]);
    let mut opts =
        flux_suspend::ResumeOptions::new(flux_fence::Holder::from_str(&holder).unwrap(), scope);
    opts.lease = flux_fence::LeaseConfig::new(c.ns.name.clone(), "flux-handoff");
    opts.cancel.stop();
    let got = flux_suspend::resume_holder(&c.ns.client, &opts, |_| {}).await;
    let Err(e) = got else {
        panic!("a stopped resume went on: {got:?}")
    };
    assert!(matches!(e, flux_suspend::ResumeError::Cancelled), "{e}");
    assert!(e.nothing_changed(), "{e}");
    assert_eq!(e.class(), flux_fence::ErrorClass::Cancelled);
    // Nothing was written: the Lease is as the pause left it, the fences stay.
    let after = lease(&c).await;
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "{after:?}"
    );
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert!(annotation(&o, OWNER_KEY).is_some(), "{name}: {o}");
    }
}
