//! End to end (issue 48, item 2): a transient fault never ejects a waiter. B waits for the
//! Lease behind a live A (`--wait-lease`); B's connection to the API server is refused for
//! 3 s (a managed control plane restarting its API server, a load balancer reset) while it
//! waits. B must go on waiting and run once A has finished — before, B exited 3 at once,
//! "fenced by A", and never ran.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use fault_proxy::Proxy;
use k8s_openapi::api::coordination::v1::Lease;

/// `run --target TARGET --holder H --wait-lease 2m -- bash -c SCRIPT` against `kubeconfig`.
fn queued(c: &Cluster, kubeconfig: &std::path::Path, holder: &str, script: &str) -> Command {
    let mut cmd = c.cli_with(kubeconfig, "30s");
    cmd.args(["run", "--target", TARGET]);
    cmd.args(c.handoff_flags());
    cmd.args([
        "--holder",
        holder,
        "--wait-lease",
        "2m",
        "--",
        "bash",
        "-c",
        script,
    ]);
    cmd.stdin(Stdio::null());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fault_a_refused_connection_while_waiting_does_not_eject_the_run() {
    let c = Cluster::seeded("wf-refused").await;
    let dir = std::env::temp_dir().join(format!("fh-wf-{}", c.ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, started, go) = (dir.join("log"), dir.join("a-started"), dir.join("go"));
    let suffix = testkit::random_suffix(6);
    let (a, b) = (format!("wfa-{suffix}"), format!("wfb-{suffix}"));
    let a_script = format!(
        "echo A-start >> '{l}'; touch '{s}'; while [ ! -e '{g}' ]; do sleep 0.1; done; echo A-end >> '{l}'",
        l = log.display(),
        s = started.display(),
        g = go.display()
    );
    let b_script = format!("echo B-start >> '{}'", log.display());

    // A talks to the API server directly and holds the Lease and the chain.
    let first = queued(&c, &c.kubeconfig, &a, &a_script);
    let first = tokio::task::spawn_blocking(move || {
        let mut first = first;
        first.output().unwrap()
    });
    wait_for_file(&started, "the first run's command").await;

    // B talks through a proxy, and waits behind A.
    let proxy = Proxy::start().await.unwrap();
    let kc = dir.join("kubeconfig");
    proxy.write_kubeconfig(&kc).unwrap();
    let mut second = queued(&c, &kc, &b, &b_script);
    second.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = second.spawn().unwrap();
    // B is waiting once it has read the Lease (held by A) and opened its watch on it.
    let give_up = tokio::time::Instant::now() + Duration::from_mins(1);
    while !proxy.log().iter().any(|r| r.kind == "watch leases") {
        assert!(
            tokio::time::Instant::now() < give_up,
            "B never watched the Lease: {:?}",
            proxy.log()
        );
        assert!(child.try_wait().unwrap().is_none(), "B ended while A held");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The API server is unreachable for B for 3 s: its watch breaks, its reads are refused.
    let before = proxy.log().len();
    proxy.refuse_for(Duration::from_secs(3)).await.unwrap();
    // B reaches the server again (a request arrives once the proxy listens again) before A
    // is let go: whatever B made of the fault, it has made it by then.
    let give_up = tokio::time::Instant::now() + Duration::from_mins(1);
    while proxy.log().len() <= before && child.try_wait().unwrap().is_none() {
        assert!(
            tokio::time::Instant::now() < give_up,
            "B sent nothing after the fault"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A finishes; B must then take the Lease and run.
    std::fs::write(&go, "").unwrap();
    let first = first.await.unwrap();
    let (b_code, b_err) = ended(child).await;
    eprintln!("--- A ---\n{}\n--- B ---\n{b_err}", stderr(&first));
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(b_code, 0, "{b_err}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "A-start\nA-end\nB-start\n"
    );
    // Nothing held afterwards.
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity), None);
    for name in [PARENT, TARGET] {
        assert_eq!(annotation(&c.get(name).await, OWNER_KEY), None, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
