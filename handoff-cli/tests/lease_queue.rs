//! `--wait-lease` under a merge queue (issue 35, item 5): three runs of the same target, one
//! of them on a clock two minutes ahead (libfaketime), all succeed one after the other. The
//! old wait judged the holder's liveness on the waiter's wall clock: the run whose clock was
//! ahead took the first holder's live Lease for an expired one, started, found the target
//! fenced and exited 3 at once — which ejects a pull request from the merge queue.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;

/// Debian's libfaketime (`cargo xtask ci` installs it as root).
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A run that waits for the Lease, its stderr read line by line on a thread of its own.
struct Waiter {
    child: Child,
    lines: mpsc::Receiver<String>,
    all: std::thread::JoinHandle<String>,
}

fn script(log: &Path, name: &str, until: Option<&Path>) -> String {
    let hold = until.map_or_else(
        || "sleep 0.3".to_string(),
        |g| format!("while [ ! -e '{}' ]; do sleep 0.1; done", g.display()),
    );
    format!(
        "echo {name}-start >> '{l}'; {hold}; echo {name}-end >> '{l}'",
        l = log.display()
    )
}

fn spawn(c: &Cluster, holder: &str, script: &str, clock_ahead: bool) -> Waiter {
    let mut cmd = c.cli();
    cmd.args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--holder", holder, "--wait-lease", "3m", "--"])
        .args(["bash", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if clock_ahead {
        // Wall clock only: monotonic time (every wait's bound) is left as it is.
        cmd.env("LD_PRELOAD", FAKETIME)
            .env("FAKETIME", "+2m")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    let mut child = cmd.spawn().unwrap();
    let pipe = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel::<String>();
    let all = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    Waiter { child, lines, all }
}

impl Waiter {
    /// Whether the run said it waits for the Lease before its stderr ended (a bound on a
    /// hang, not a timed assertion).
    fn says_waiting(&self) -> bool {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_mins(1)) {
            if line.contains("waiting for lease") {
                return true;
            }
        }
        false
    }

    fn finish(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        (status.code(), self.all.join().unwrap())
    }
}

/// Waits (bounded) until the first run's command has started.
fn started(log: &PathBuf) {
    for _ in 0..1200 {
        if std::fs::read_to_string(log).is_ok_and(|l| l.contains("A-start")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the first run's command never started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_three_runs_one_clock_two_minutes_ahead_all_succeed_one_after_the_other() {
    assert!(
        Path::new(FAKETIME).is_file(),
        "{FAKETIME} is missing: `apt-get install -y libfaketime` (cargo xtask ci does as root)"
    );
    let c = Cluster::seeded("queue").await;
    let dir = std::env::temp_dir().join(format!("fh-queue-{}", testkit::random_suffix(8)));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, go) = (dir.join("log"), dir.join("go"));
    let suffix = testkit::random_suffix(6);
    let (h1, h2, h3) = (
        format!("qa-{suffix}"),
        format!("qb-{suffix}"),
        format!("qc-{suffix}"),
    );

    // A holds the Lease and the chain until the test lets it go.
    let first = spawn(&c, &h1, &script(&log, "A", Some(&go)), false);
    let log2 = log.clone();
    tokio::task::spawn_blocking(move || started(&log2))
        .await
        .unwrap();

    // B (its clock two minutes ahead) and C queue behind A.
    let ahead = spawn(&c, &h2, &script(&log, "B", None), true);
    let equal = spawn(&c, &h3, &script(&log, "C", None), false);
    let (ahead, b_waited) = tokio::task::spawn_blocking(move || {
        let w = ahead.says_waiting();
        (ahead, w)
    })
    .await
    .unwrap();
    let (equal, c_waited) = tokio::task::spawn_blocking(move || {
        let w = equal.says_waiting();
        (equal, w)
    })
    .await
    .unwrap();
    std::fs::write(&go, "").unwrap();
    let (a_code, a_err) = tokio::task::spawn_blocking(move || first.finish())
        .await
        .unwrap();
    let (b_code, b_err) = tokio::task::spawn_blocking(move || ahead.finish())
        .await
        .unwrap();
    let (c_code, c_err) = tokio::task::spawn_blocking(move || equal.finish())
        .await
        .unwrap();
    eprintln!("--- A ---\n{a_err}--- B (clock +2m) ---\n{b_err}--- C ---\n{c_err}");
    assert!(
        b_waited,
        "the run whose clock is ahead did not wait:\n{b_err}"
    );
    assert!(c_waited, "the third run did not wait:\n{c_err}");
    assert_eq!(a_code, Some(0), "{a_err}");
    assert_eq!(b_code, Some(0), "clock +2m: {b_err}");
    assert_eq!(c_code, Some(0), "{c_err}");

    // One after the other: each command ended before the next began.
    let order = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = order.lines().collect();
    assert_eq!(lines.len(), 6, "{order}");
    for pair in lines.chunks(2) {
        let name = pair[0].trim_end_matches("-start");
        assert_eq!(
            pair,
            [format!("{name}-start"), format!("{name}-end")],
            "{order}"
        );
    }
    assert_eq!(lines[0], "A-start", "{order}");

    // Nothing held afterwards.
    let l = c.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap();
    let holder = l
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.is_empty(), "Lease still held by {holder}");
    for name in [PARENT, TARGET] {
        assert_eq!(
            annotation(&c.get(name).await, OWNER_KEY),
            None,
            "{name} still fenced"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
