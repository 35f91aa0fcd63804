//! End to end: a signal while the API server holds back an answer the session start waits
//! for. A read before anything is taken is dropped at once (exit 130, nothing changed); the
//! Lease create gets a short grace, not the client's read timeout (minutes), and then the run
//! says what it may hold.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use fault_proxy::{Fault, Proxy};
use k8s_openapi::api::coordination::v1::Lease;

/// Longer than any bound below: the run must not wait for this answer.
const HELD: Duration = Duration::from_mins(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_lease_create_is_unanswered_exits_7_naming_the_holder_to_look_for() {
    let c = Cluster::seeded("cli-sigslow").await;
    // The Lease create reaches the server and is applied; its answer is held back.
    let proxy = Proxy::start().await.unwrap();
    let kc = std::env::temp_dir().join(format!("fh-slow-{}.json", testkit::random_suffix(6)));
    proxy.write_kubeconfig(&kc).unwrap();
    proxy.arm_on("create leases", 1, Fault::Delay(HELD));
    let child = spawn_pause(&c, &kc);
    // The create landed: the Lease names a holder on the server.
    let leases = c.ns.api::<Lease>();
    let mut holder = None;
    for _ in 0..600 {
        holder = leases
            .get_opt("flux-handoff")
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity);
        if holder.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let holder = holder.expect("the Lease create never reached the server");
    let out = term_and_wait(child).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 7, "{err}");
    let last = outcome_after_the_signal_line(&err);
    assert!(
        last.contains(&holder) && last.contains("flux-handoff fences"),
        "the last line names the holder to look for and the command that shows it: {err}"
    );
    // Nothing was fenced; the Lease it may hold is the one on the server, named in the line.
    for name in [PARENT, TARGET] {
        assert_eq!(annotation(&c.get(name).await, OWNER_KEY), None, "{name}");
    }
    let now = leases.get("flux-handoff").await.unwrap();
    assert_eq!(
        now.spec.and_then(|s| s.holder_identity).as_deref(),
        Some(holder.as_str())
    );
    let _ = std::fs::remove_file(kc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_first_target_read_is_unanswered_exits_130_with_nothing_taken() {
    let c = Cluster::seeded("cli-sigread").await;
    let before = [c.get(PARENT).await, c.get(TARGET).await];
    let proxy = Proxy::start().await.unwrap();
    let kc = std::env::temp_dir().join(format!("fh-slow-{}.json", testkit::random_suffix(6)));
    proxy.write_kubeconfig(&kc).unwrap();
    proxy.arm_on("get kustomizations", 1, Fault::Delay(HELD));
    let child = spawn_pause(&c, &kc);
    let mut seen = false;
    for _ in 0..600 {
        seen = proxy
            .counts()
            .get("get kustomizations")
            .copied()
            .unwrap_or(0)
            >= 1;
        if seen {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen, "the run never read its target");
    let out = term_and_wait(child).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 130, "{err}");
    assert!(
        outcome_after_the_signal_line(&err).contains("nothing was changed"),
        "{err}"
    );
    // Nothing was written: no Lease, both objects exactly as before (same resourceVersion).
    let lease = c.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap();
    assert!(lease.is_none(), "a Lease was created: {lease:?}");
    for (name, b) in [PARENT, TARGET].into_iter().zip(before) {
        assert_eq!(
            c.get(name).await["metadata"]["resourceVersion"],
            b["metadata"]["resourceVersion"],
            "{name} was written"
        );
    }
    assert!(
        proxy.mutations() == 0,
        "no mutating request may reach the proxy: {:?}",
        proxy.counts()
    );
    let _ = std::fs::remove_file(kc);
}

/// `flux-handoff pause --target TARGET` through kubeconfig `kc`, outputs piped.
fn spawn_pause(c: &Cluster, kc: &std::path::Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
        .env_remove("GITHUB_ACTIONS")
        .arg("--kubeconfig")
        .arg(kc)
        .args(["--namespace", &c.ns.name, "--interval", "200ms"])
        .args(["pause", "--target", TARGET])
        .args(c.handoff_flags())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// SIGTERM to `child`, then its output, bounded far below the held answer: the run must not
/// be waiting for it.
async fn term_and_wait(child: std::process::Child) -> std::process::Output {
    let pid = child.id();
    let sent = testkit::signal::to_process(pid, "TERM");
    assert!(sent.is_ok(), "SIGTERM to {pid}: {sent:?}");
    tokio::time::timeout(
        Duration::from_mins(1),
        tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()),
    )
    .await
    .expect("the signalled run kept waiting for the held answer")
    .unwrap()
}

/// The last line of `err`, after checking that the line about the signal was printed before
/// it: the person who pressed Ctrl-C reads that it was seen, and the outcome comes last.
fn outcome_after_the_signal_line(err: &str) -> &str {
    let lines: Vec<&str> = err.lines().collect();
    let Some((last, before)) = lines.split_last() else {
        panic!("the signalled run printed nothing")
    };
    assert!(
        before
            .iter()
            .any(|l| l.starts_with("interrupted: stopping")),
        "the signal's line must come before the outcome: {err}"
    );
    last
}
