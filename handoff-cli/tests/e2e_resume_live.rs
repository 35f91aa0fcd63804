//! End to end: `resume --holder H` while H's run is still working under its fences must be
//! refused without a write (the model check of issue 18 found the old resume adopting the
//! live holder's Lease at the same epoch and releasing the fences under the running command).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;

/// Waits until `path` holds a complete line and returns it.
async fn read_line(path: &Path) -> String {
    for _ in 0..1200 {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_string();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} never appeared: the command did not start",
        path.display()
    );
}

/// Kills the run and removes the files whatever happened, so nothing outlives the test.
struct Cleanup(Child, Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        for p in &self.1 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_of_a_live_holder_is_refused_and_changes_nothing() {
    let c = Cluster::seeded("cli-resume-live").await;
    let tmp = std::env::temp_dir();
    let holder_file = tmp.join(format!("flux-handoff-{}.holder", c.ns.name));
    let gate = tmp.join(format!("flux-handoff-{}.gate", c.ns.name));
    // The command reports its holder, then works until the test opens the gate.
    let script = "echo \"$FLUX_HANDOFF_HOLDER\" > \"$HOLDER_FILE\"; \
                  while [ ! -e \"$GATE\" ]; do sleep 0.1; done";
    let mut cmd = c.cli();
    cmd.args(["run", "--target", TARGET])
        .args(c.handoff_flags())
        .args(["--", "sh", "-c", script])
        .env("HOLDER_FILE", &holder_file)
        .env("GATE", &gate)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut run = Cleanup(
        cmd.spawn().unwrap(),
        vec![holder_file.clone(), gate.clone()],
    );
    let holder = read_line(&holder_file).await;
    let before = [c.get(PARENT).await, c.get(TARGET).await];
    assert_eq!(
        annotation(&before[1], OWNER_KEY).map(|o| o.split(';').next()),
        Some(Some(holder.as_str())),
        "the run holds the target while its command runs"
    );

    let mut args = vec!["resume", "--holder", holder.as_str()];
    let flags = c.handoff_flags();
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("looks live"), "{}", stderr(&out));
    let after = [c.get(PARENT).await, c.get(TARGET).await];
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            a["metadata"]["resourceVersion"], b["metadata"]["resourceVersion"],
            "nothing changed"
        );
    }

    // The run itself ends normally and releases everything.
    std::fs::write(&gate, "").unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let s = run.0.wait().unwrap();
        drop(run);
        s
    })
    .await
    .unwrap();
    assert!(status.success(), "the run exited {status}");
    for name in [PARENT, TARGET] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
        assert!(!suspended(&o), "{name} still suspended");
    }
}
