//! End to end: the session's options are checked before any request, and `--holder` names
//! the run.

mod common;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;

/// A kubeconfig whose server is a closed port: a request would end in exit 6, not 2.
fn unreachable_kubeconfig() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("unreachable-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\n\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n\
         users:\n- name: u\n  user:\n    token: t\n",
    )
    .unwrap();
    path
}

#[test]
fn session_options_without_room_for_the_proof_exit_2_before_any_request() {
    let kc = unreachable_kubeconfig();
    for (interval, timeout) in [("20s", "30s"), ("1s", "1s"), ("0s", "30s")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
            .env_remove("FLUX_HANDOFF_CONFIG")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["pause", "--target", "apps", "--interval", interval])
            .args(["--timeout", timeout])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(
            code(&out),
            2,
            "--interval {interval} --timeout {timeout}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("interval"), "{err}");
    }
    for bad in ["", "UPPER", "a b", "x/y"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["run", "--target", "apps", "--holder", bad, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "--holder {bad:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--holder"), "{}", stderr(&out));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_holder_flag_names_the_run_in_the_lease_and_the_fences() {
    let c = Cluster::seeded("session-holder").await;
    let holder = "gh4242.1-abc123";
    let mut args = vec!["run", "--target", TARGET, "--holder", holder];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--", "sh", "-c", "echo \"$FLUX_HANDOFF_HOLDER\""]);
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), holder);
    assert!(
        stderr(&out).contains(&format!("(holder {holder}, epoch ")),
        "{}",
        stderr(&out)
    );
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    let left = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(left.is_empty(), "the Lease is still held by {left}");
}
