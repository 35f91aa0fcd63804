//! End to end: a resume adopts the Lease the holder's fences were taken under, never a free
//! default Lease. While `run --lease NS/other` works, `resume --holder H` and `resume OBJECT`
//! under the default Lease are refused (exit 3), and so is `fences release OBJECT --holder H`
//! (its holder holds the Lease the fence names: its work may still run); the server holds
//! exactly what it held.

mod common;

use std::process::Stdio;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;

/// Each member's resourceVersion and owner annotation, and the default Lease as found.
async fn held(c: &Cluster) -> Vec<Value> {
    let mut v = Vec::new();
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        v.push(o["metadata"]["resourceVersion"].clone());
        v.push(Value::from(annotation(&o, OWNER_KEY)));
    }
    let default = c.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap();
    v.push(Value::from(
        default.and_then(|l| l.metadata.resource_version),
    ));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_engine_resume_and_fences_release_of_a_live_run_are_refused_and_change_nothing() {
    let c = Cluster::seeded("engine-lease").await;
    let ns = c.ns.name.clone();
    let marker = std::env::temp_dir().join(format!("fh-engine-{}", testkit::random_suffix(6)));
    let m = marker.display();
    let script = format!("touch {m} && while [ -e {m} ]; do sleep 0.1; done");
    let holder = format!("engine-{}", testkit::random_suffix(6));
    let other = format!("{ns}/other");
    let controller = format!("{ns}/kustomize-controller");
    let mut cmd = c.cli();
    cmd.args(["run", "--holder", &holder, "--target", TARGET])
        .args(["--lease", &other, "--controller", &controller])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let run = cmd.spawn().unwrap();
    wait_for_file(&marker, "the command to start").await;
    let before = held(&c).await;
    let flags = c.handoff_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();

    let by_holder = [&["resume", "--holder", &holder][..], &flags].concat();
    let target = format!("ks/{ns}/{TARGET}");
    let by_object = [&["resume", &target][..], &flags].concat();
    for args in [by_holder, by_object] {
        let out = c.run(&args).await;
        let err = stderr(&out);
        assert_eq!(code(&out), 3, "{args:?}: {err}");
        assert!(
            err.contains(&format!("lease {other} is held by {holder}")),
            "{err}"
        );
        assert_eq!(held(&c).await, before, "{args:?} changed the server: {err}");
    }
    // Before, this released the live run's target with exit 0 (its pause watch then stopped
    // the work with exit 8, after it had run under a released fence).
    let default = format!("{ns}/flux-handoff");
    let release = [
        "fences", "release", &target, "--holder", &holder, "--lease", &default,
    ];
    let out = c.run(&release).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 3, "{err}");
    assert!(
        err.contains(&format!(
            "its holder {holder} still holds the Lease {other} and may still be working; nothing \
             changed"
        )),
        "{err}"
    );
    assert_eq!(
        held(&c).await,
        before,
        "fences release changed the server: {err}"
    );

    std::fs::remove_file(&marker).unwrap();
    let out = tokio::task::spawn_blocking(move || run.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [PARENT, TARGET] {
        assert_eq!(annotation(&c.get(name).await, OWNER_KEY), None, "{name}");
    }
}
