//! End to end (issue 48, item 2): a transient fault never ejects a waiter. B waits for the
//! Lease behind a live A (`--wait-lease`); B's connection to the API server is refused for
//! 3 s (a managed control plane restarting its API server, a load balancer reset) while it
//! waits. B must go on waiting and run once A has finished — before, B exited 3 at once,
//! "fenced by A", and never ran.
//!
//! A Lease read of B that hangs (no answer, the connection open: a wedged load balancer) is
//! bounded by the wait, not by kube's request timeout alone: B reads again and still runs
//! after A; and when A never ends, B's wait ends with its budget (exit 3, naming A) instead of
//! hanging on past it.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use fault_proxy::Proxy;
use k8s_openapi::api::coordination::v1::Lease;

/// `run --target TARGET --holder H --wait-lease 2m -- bash -c SCRIPT` against `kubeconfig`.
fn queued(c: &Cluster, kubeconfig: &std::path::Path, holder: &str, script: &str) -> Command {
    queued_for(c, kubeconfig, holder, script, "2m")
}

/// As [`queued`], with a wait of `budget`.
fn queued_for(
    c: &Cluster,
    kubeconfig: &std::path::Path,
    holder: &str,
    script: &str,
    budget: &str,
) -> Command {
    let mut cmd = c.cli_with(kubeconfig, "30s");
    cmd.args(["run", "--target", TARGET]);
    cmd.args(c.handoff_flags());
    cmd.args([
        "--holder",
        holder,
        "--wait-lease",
        budget,
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

/// A holds the Lease (its command runs until `go` exists); B waits behind it through a proxy
/// with a wait of `budget`. Returns once B watches the Lease (it is waiting).
struct Queue {
    dir: std::path::PathBuf,
    log: std::path::PathBuf,
    go: std::path::PathBuf,
    a: String,
    first: tokio::task::JoinHandle<std::process::Output>,
    proxy: Proxy,
    child: std::process::Child,
}

async fn queue(c: &Cluster, budget: &str) -> Queue {
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
    let mut first = queued(c, &c.kubeconfig, &a, &a_script);
    let first = tokio::task::spawn_blocking(move || first.output().unwrap());
    wait_for_file(&started, "the first run's command").await;
    let proxy = Proxy::start().await.unwrap();
    let kc = dir.join("kubeconfig");
    proxy.write_kubeconfig(&kc).unwrap();
    let mut second = queued_for(c, &kc, &b, &b_script, budget);
    second.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = second.spawn().unwrap();
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
    Queue {
        dir,
        log,
        go,
        a,
        first,
        proxy,
        child,
    }
}

/// The path of the test's Lease, as B's reads of it name it.
const LEASE_PATH: &str = "/leases/flux-handoff";

/// B's reads of the Lease the proxy never forwarded (hung).
fn hung_reads(proxy: &Proxy) -> usize {
    proxy
        .log()
        .iter()
        .filter(|r| r.kind == "get leases" && r.path.ends_with(LEASE_PATH) && !r.forwarded)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fault_a_hung_lease_read_while_waiting_does_not_eject_the_run() {
    let c = Cluster::seeded("wf-hung").await;
    let mut q = queue(&c, "2m").await;
    // Every read of the Lease by B now hangs: no answer, no error.
    q.proxy.hang_reads(LEASE_PATH);
    // B gives up on a hung read and reads again (a second hung read), still waiting.
    let give_up = tokio::time::Instant::now() + Duration::from_mins(1);
    while hung_reads(&q.proxy) < 2 {
        assert!(
            tokio::time::Instant::now() < give_up,
            "B never read the Lease again after a read hung: {:?}",
            q.proxy.log()
        );
        assert!(
            q.child.try_wait().unwrap().is_none(),
            "B ended while A held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The connection mends; A finishes; B must then take the Lease and run.
    q.proxy.unhang_reads(LEASE_PATH);
    std::fs::write(&q.go, "").unwrap();
    let first = q.first.await.unwrap();
    let (b_code, b_err) = ended(q.child).await;
    eprintln!("--- A ---\n{}\n--- B ---\n{b_err}", stderr(&first));
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(b_code, 0, "{b_err}");
    assert!(b_err.contains("got no answer in time"), "{b_err}");
    assert_eq!(
        std::fs::read_to_string(&q.log).unwrap(),
        "A-start\nA-end\nB-start\n"
    );
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity), None);
    for name in [PARENT, TARGET] {
        assert_eq!(annotation(&c.get(name).await, OWNER_KEY), None, "{name}");
    }
    let _ = std::fs::remove_dir_all(&q.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fault_a_hung_lease_read_ends_the_wait_with_its_budget() {
    let c = Cluster::seeded("wf-hung-budget").await;
    let budget = Duration::from_secs(6);
    let mut q = queue(&c, "6s").await;
    // B's budget started before it watched; every read of the Lease by B hangs from now on,
    // and A never ends while B waits.
    let watching = tokio::time::Instant::now();
    q.proxy.hang_reads(LEASE_PATH);
    // B's wait is bounded by its budget, not by kube's request timeout (20 s per hung read,
    // then the session's own reads hang alike): it ends well before a hung read could.
    let bound = watching + budget + Duration::from_secs(12);
    while q.child.try_wait().unwrap().is_none() {
        if tokio::time::Instant::now() >= bound {
            let _ = q.child.kill();
            let (_, b_err) = ended(q.child).await;
            std::fs::write(&q.go, "").unwrap();
            panic!(
                "B was still waiting 12s past its {budget:?} budget ({} hung reads):\n{b_err}",
                hung_reads(&q.proxy)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (b_code, b_err) = ended(q.child).await;
    std::fs::write(&q.go, "").unwrap();
    let first = q.first.await.unwrap();
    eprintln!("--- A ---\n{}\n--- B ---\n{b_err}", stderr(&first));
    assert!(hung_reads(&q.proxy) >= 1, "{:?}", q.proxy.log());
    // Refused as a wait behind a live holder is: exit 3, naming A; B never ran.
    assert_eq!(b_code, 3, "{b_err}");
    assert!(b_err.contains(&q.a), "{b_err}");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(std::fs::read_to_string(&q.log).unwrap(), "A-start\nA-end\n");
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    assert_eq!(lease.spec.and_then(|s| s.holder_identity), None);
    let _ = std::fs::remove_dir_all(&q.dir);
}
