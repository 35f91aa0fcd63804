//! End to end: a fence write whose answer was lost stays unsettled until settled, and the
//! Lease is kept while it is. A gateway answers every PATCH of a Kustomization with 504 and
//! keeps the first one (the fence write), forwarding it only after the run ended. Before, the
//! run ended with exit 6 and released the Lease: the kept write then landed, leaving the
//! parent suspended and fenced under a free Lease no process held.

mod common;

use std::process::Command;

use common::*;
use fault_proxy::{Fault, Proxy};

const HOLDER: &str = "unsettled-run";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsettled_a_lost_fence_write_keeps_the_lease_and_names_the_object() {
    let c = Cluster::seeded("unsettled").await;
    let proxy = Proxy::start().await.unwrap();
    let dir = std::env::temp_dir().join(format!("fh-unsettled-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("kubeconfig");
    proxy.write_kubeconfig(&kc).unwrap();
    // The first fence write is kept by the gateway (answered 504, delivered later); every
    // later PATCH, the run's own settling writes included, is answered 504 and dropped.
    let kept = proxy.hold_answering("patch kustomizations", 1, 504);
    for n in 2..=1000 {
        let lost = Fault::Status {
            code: 504,
            retry_after: None,
        };
        proxy.arm_on("patch kustomizations", n, lost);
    }
    let mut cmd: Command = c.cli_with(&kc, "6s");
    cmd.args(["run", "--target", TARGET, "--holder", HOLDER])
        .args(c.handoff_flags())
        .args(["--", "true"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&out);
    let first = proxy
        .log()
        .into_iter()
        .find(|r| r.kind == "patch kustomizations")
        .expect("the run sent no fence write");
    let object = first.path.rsplit('/').next().unwrap().to_string();
    println!(
        "unsettled: exit={} kept write on {object}\n{err}",
        code(&out)
    );

    // Exit 7, the unsettled object named, the Lease still held by the run's holder.
    assert_eq!(code(&out), 7, "{err}");
    assert!(
        err.contains(&format!("/{object}")) && err.contains("unsettled"),
        "the unsettled object {object} is not named: {err}"
    );
    assert!(
        c.ns.lease_holder()
            .await
            .unwrap_or_default()
            .starts_with(HOLDER),
        "the Lease was released with a fence write unsettled: {err}"
    );

    // The gateway delivers the kept write late: whatever it does, nothing is fenced under a
    // free Lease — a fence on either member belongs to the holder that still has the Lease.
    kept.forward();
    let landed = kept.answered().await;
    println!("unsettled: the kept write was answered {landed}");
    let holder = c.ns.lease_holder().await.unwrap_or_default();
    for name in [PARENT, TARGET] {
        if let Some(owner) = annotation(&c.get(name).await, OWNER_KEY) {
            assert!(
                !holder.is_empty() && owner.starts_with(&holder),
                "{name} fenced by {owner} under a Lease held by {holder:?}: {err}"
            );
        }
    }

    // The holder whose fence it is settles it, straight to the API server (the Action's post
    // step after the run's process ended): every fence and the Lease released, Flux back.
    let mut args = vec!["resume", "--holder", HOLDER, "--holder-exited"];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    let rerr = stderr(&out);
    assert_eq!(code(&out), 0, "resume --holder: {rerr}");
    for name in [PARENT, TARGET] {
        let obj = c.get(name).await;
        assert_eq!(annotation(&obj, OWNER_KEY), None, "{name}: {rerr}");
        assert!(!suspended(&obj), "{name} left suspended: {rerr}");
    }
    assert_eq!(c.ns.lease_holder().await, None, "{rerr}");
    let _ = std::fs::remove_dir_all(&dir);
}
