//! `--wait-lease` (issue 27, item 5): two overlapping runs both succeed, one after the other —
//! the second waits while the first holds the Lease, says who holds it, and takes it once it is
//! free — and a parked pause is not waited for.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;

fn run_args<'a>(
    c: &'a Cluster,
    flags: &'a [String],
    holder: &'a str,
    script: &'a str,
) -> Vec<&'a str> {
    let _ = c;
    let mut a = vec!["run", "--target", TARGET];
    a.extend(flags.iter().map(String::as_str));
    a.extend([
        "--holder",
        holder,
        "--wait-lease",
        "2m",
        "--",
        "bash",
        "-c",
        script,
    ]);
    a
}

async fn lease(c: &Cluster) -> Option<Lease> {
    c.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_wait_two_overlapping_runs_both_succeed_one_after_the_other() {
    let c = Cluster::seeded("lw-two").await;
    let dir = std::env::temp_dir().join(format!("fh-lw-{}", testkit::random_suffix(8)));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, started, go) = (dir.join("log"), dir.join("a-started"), dir.join("go"));
    let suffix = testkit::random_suffix(6);
    let (a, b) = (format!("lwa-{suffix}"), format!("lwb-{suffix}"));
    let flags = c.handoff_flags();
    let a_script = format!(
        "echo A-start >> '{l}'; touch '{s}'; while [ ! -e '{g}' ]; do sleep 0.1; done; echo A-end >> '{l}'",
        l = log.display(),
        s = started.display(),
        g = go.display()
    );
    let b_script = format!("echo B-start >> '{}'", log.display());

    let mut first = c.cli();
    first.args(run_args(&c, &flags, &a, &a_script));
    let first = tokio::task::spawn_blocking(move || first.output().unwrap());
    // A's command runs: A holds the Lease and the chain.
    for _ in 0..1200 {
        if started.exists() || first.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(started.exists(), "the first run's command never started");

    // B starts while A holds the Lease; it must wait, saying who holds it.
    let mut second = c.cli();
    second
        .args(run_args(&c, &flags, &b, &b_script))
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    let mut child = second.spawn().unwrap();
    let pipe = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    let waiting = tokio::task::spawn_blocking(move || {
        while let Ok(line) = rx.recv_timeout(Duration::from_mins(1)) {
            if line.contains("waiting for lease") {
                return Some(line);
            }
        }
        None
    })
    .await
    .unwrap();
    // Let A finish, whatever B said.
    std::fs::write(&go, "").unwrap();
    let first = first.await.unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let b_err = reader.join().unwrap();
    eprintln!("--- first run ---\n{}", stderr(&first));
    eprintln!("--- second run ---\n{b_err}");
    let line = waiting.expect("the second run never said it was waiting for the Lease");
    assert!(line.contains(&format!("held by {a}")), "{line}");
    assert!(line.contains(" since "), "{line}");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(status.code(), Some(0), "{b_err}");
    // One after the other: B's command ran after A's had ended.
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "A-start\nA-end\nB-start\n"
    );
    assert!(
        b_err.contains(&format!(
            "lease acquired: {}/flux-handoff (holder {b}",
            c.ns.name
        )),
        "{b_err}"
    );
    // Nothing held afterwards.
    let l = lease(&c).await.unwrap();
    let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_wait_a_parked_pause_is_refused_at_once_with_the_resume_line() {
    let c = Cluster::seeded("lw-parked").await;
    let flags = c.handoff_flags();
    let p = format!("lwp-{}", testkit::random_suffix(6));
    let mut pause = vec!["pause", "--target", TARGET, "--holder", &p];
    pause.extend(flags.iter().map(String::as_str));
    let parked = c.run(&pause).await;
    assert_eq!(code(&parked), 0, "{}", stderr(&parked));
    let before = lease(&c).await.unwrap().metadata.resource_version;

    let b = format!("lwb-{}", testkit::random_suffix(6));
    let out = c.run(&run_args(&c, &flags, &b, "true")).await;
    let err = stderr(&out);
    eprintln!("{err}");
    assert_eq!(code(&out), 3, "{err}");
    assert!(!err.contains("waiting for lease"), "it waited:\n{err}");
    assert!(err.contains("parked pause"), "{err}");
    assert!(
        err.contains(&format!(
            "flux-handoff resume --holder {p} --lease {}/flux-handoff",
            c.ns.name
        )),
        "{err}"
    );
    // Nothing was written: the Lease and the pause are as the pause left them.
    assert_eq!(lease(&c).await.unwrap().metadata.resource_version, before);
    let target = c.get(TARGET).await;
    assert!(suspended(&target));
    assert!(annotation(&target, OWNER_KEY).is_some_and(|o| o.starts_with(&format!("{p};"))));
}
