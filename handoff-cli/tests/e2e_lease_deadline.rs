//! End to end (issue 25): a holder whose API connection hangs fences itself. `flux-handoff
//! run` talks through a proxy that then freezes (connections open, nothing moves); a healthy
//! client runs `fences recover --yes`, which watches the Lease for a full duration, takes it
//! over and releases the fences. The command must be gone before recovery's first release
//! reaches the server, and the holder must exit by itself with exit 6.
//!
//! Ordering evidence, not timing: recovery's first release is held at its own proxy; at that
//! moment the command's process must be gone, and its tick file then never grows again.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use fault_proxy::Proxy;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

/// Ends a child still running when the test fails.
struct Reap(Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `flux-handoff` for this test's namespace, talking through `kubeconfig`.
fn cli_at(c: &Cluster, kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    cmd.env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .env_remove("FLUX_HANDOFF_LOG")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--namespace",
            &c.ns.name,
            "--interval",
            "200ms",
            "--timeout",
            "30s",
        ])
        .stdin(Stdio::null());
    cmd
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fh-dl-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ticks(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Whether process `pid` still exists (a zombie counts as gone: it runs nothing).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

/// Waits (bounded, so a broken holder fails the test instead of hanging it) for `child`.
async fn wait_exit(child: &mut Reap, bound: Duration) -> i32 {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        if let Some(s) = child.0.as_mut().unwrap().try_wait().unwrap() {
            child.0 = None;
            return s.code().unwrap_or(-1);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the process did not exit by itself within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `flux-handoff run` through `kubeconfig` with `script` as its command; its stderr is
/// collected as it comes.
fn spawn_holder(
    c: &Cluster,
    kubeconfig: &Path,
    cfg: &Path,
    script: &str,
) -> (Reap, Arc<Mutex<String>>) {
    let mut cmd = cli_at(c, kubeconfig);
    cmd.arg("--config").arg(cfg);
    cmd.args(["run", "--target", TARGET, "--grace", "5s"]);
    cmd.args(c.handoff_flags());
    cmd.args(["--", "sh", "-c", script]);
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let mut err = child.stderr.take().unwrap();
    let sink = log.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (Reap(Some(child)), log)
}

/// The acceptance line: the command's last tick, the holder's self-fence (its log line's
/// time), recovery's first release (when it reached the proxy), on one line.
fn print_times(last_tick: Option<&String>, log: &str, first_release: Timestamp) {
    let last_tick = last_tick
        .and_then(|t| t.parse::<i128>().ok())
        .and_then(|n| Timestamp::from_nanosecond(n).ok())
        .map_or_else(|| "?".to_string(), |t| t.to_string());
    let self_fence = log
        .lines()
        .find(|l| l.contains("lease lost while the work runs"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or("?");
    println!(
        "lease_deadline: last_tick={last_tick} self_fence={self_fence} first_release={first_release}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_deadline_a_frozen_holder_ends_its_command_before_recovery_releases() {
    let c = Cluster::seeded("lease-dl").await;
    let dir = scratch();
    let cfg = dir.join("flux-handoff.toml");
    std::fs::write(&cfg, "[lease]\nduration = \"10s\"\n").unwrap();
    let holder_proxy = Proxy::start().await.unwrap();
    let holder_kc = dir.join("holder.kubeconfig");
    holder_proxy.write_kubeconfig(&holder_kc).unwrap();
    let recover_proxy = Proxy::start().await.unwrap();
    let recover_kc = dir.join("recover.kubeconfig");
    recover_proxy.write_kubeconfig(&recover_kc).unwrap();

    let (tick_file, pid_file) = (dir.join("ticks"), dir.join("pid"));
    let script = format!(
        "echo $$ > {p}; while true; do date +%s%N >> {t}; sleep 0.2; done",
        p = pid_file.display(),
        t = tick_file.display()
    );
    let (mut holder, log) = spawn_holder(&c, &holder_kc, &cfg, &script);
    let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
    while ticks(&tick_file).len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never ran: {}",
            log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();

    // The holder's connection freezes; a healthy client recovers.
    holder_proxy.freeze();
    let release = recover_proxy.hold_on("patch kustomizations", 1);
    let mut rcmd = cli_at(&c, &recover_kc);
    rcmd.args(["fences", "--lease", &format!("{}/flux-handoff", c.ns.name)]);
    rcmd.arg("--config").arg(&cfg);
    rcmd.args(["recover", "--yes"]);
    rcmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let recovery = rcmd.spawn().unwrap();
    tokio::time::timeout(Duration::from_mins(2), release.arrived())
        .await
        .expect("recovery never released a fence");
    // Recovery's first release is at the server's door, not yet forwarded.
    let at_release = ticks(&tick_file);
    let first_release = Timestamp::now();
    assert!(
        !alive(&pid),
        "the command still ran when recovery's first release reached the server"
    );
    release.forward();
    assert_eq!(release.answered().await, 200);
    let out = tokio::task::spawn_blocking(move || recovery.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let exit = wait_exit(&mut holder, Duration::from_mins(2)).await;
    let text = log.lock().unwrap().clone();
    assert_eq!(exit, 6, "{text}");
    assert!(text.contains("fenced itself"), "{text}");
    assert_eq!(
        ticks(&tick_file),
        at_release,
        "the command ticked after recovery's first release"
    );
    // The server: recovery released everything and cleared the Lease.
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}");
        assert!(!suspended(&o), "{name}");
    }
    let lease = c.ns.api::<Lease>().get("flux-handoff").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None);

    print_times(at_release.last(), &text, first_release);
    let _ = std::fs::remove_dir_all(&dir);
}
