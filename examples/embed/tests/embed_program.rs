//! The embedder's program (`src/main.rs`, at most 30 lines) against the real API server with
//! the controller model: it pauses with proof, applies, resumes; and a SIGINT then a SIGTERM
//! during its work leave nothing held — not a fence, not `spec.suspend`, not the Lease.

use std::process::Stdio;
use std::time::Duration;

use flux_model::model::{ModelHandle, start_seeded};
use flux_suspend::object::{get_json, kustomization};
use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{WatchEvent, WatchParams};
use rustix::process::{Pid, Signal, kill_process};
use testkit::TestNs;
use testkit::fenced::{OWNER_KEY, annotation, suspended};

const PARENT: &str = "flux-system";
const TARGET: &str = "infrastructure";
/// A bound on every wait of these tests, far above what they take.
const BOUND: Duration = Duration::from_secs(90);

struct Tree {
    ns: TestNs,
    _model: ModelHandle,
}

impl Tree {
    async fn new(prefix: &str) -> Self {
        let ns = TestNs::new(prefix).await.unwrap();
        let model = start_seeded(&ns.client, &ns.name, |c| c).await.unwrap();
        Self { ns, _model: model }
    }

    fn program(&self, seconds: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_embed"));
        cmd.args([self.ns.name.as_str(), TARGET, "release", "v2", seconds])
            .env("KUBECONFIG", testkit::plane::kubeconfig().unwrap())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    async fn assert_nothing_held(&self) {
        for name in [PARENT, TARGET] {
            let o = get_json(&self.ns.client, &kustomization(&self.ns.name, name))
                .await
                .unwrap();
            assert_eq!(annotation(&o, OWNER_KEY), None, "{name} still fenced");
            assert!(!suspended(&o), "{name} still suspended");
        }
        let lease = self
            .ns
            .api::<Lease>()
            .get_opt("flux-handoff")
            .await
            .unwrap();
        let holder = lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty());
        assert_eq!(holder, None, "the Lease is still held");
    }

    async fn applied(&self) -> Option<String> {
        let cm = self
            .ns
            .api::<ConfigMap>()
            .get_opt("release")
            .await
            .unwrap()?;
        cm.data.and_then(|d| d.get("v").cloned())
    }
}

#[test]
fn embed_the_program_fits_in_thirty_lines_and_is_the_one_the_readme_teaches() {
    let program = include_str!("../src/main.rs");
    let lines = program.lines().count();
    assert!(lines <= 30, "src/main.rs has {lines} lines");
    let readme = include_str!("../../../flux-suspend/README.md");
    assert!(
        readme.contains(program),
        "flux-suspend/README.md must show src/main.rs as is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_pauses_applies_and_hands_back() {
    let t = Tree::new("embed-ok").await;
    let out = tokio::time::timeout(BOUND, t.program("0").output())
        .await
        .expect("the program ends")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("Step(Prove)"), "the pause was proven: {err}");
    assert_eq!(t.applied().await.as_deref(), Some("v2"));
    t.assert_nothing_held().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embed_sigint_then_sigterm_during_the_work_leaves_nothing_held() {
    let t = Tree::new("embed-signals").await;
    // The work applies, then waits an hour (and ignores its Cancel, as careless work does).
    let child = t.program("3600").spawn().unwrap();
    // In the work: the ConfigMap it applies under the pause exists (watched, not polled).
    let watch = WatchParams::default()
        .fields("metadata.name=release")
        .timeout(110);
    let applied = async {
        let api = t.ns.api::<ConfigMap>();
        let mut events = Box::pin(api.watch(&watch, "0").await.unwrap());
        while let Some(e) = events.try_next().await.unwrap() {
            if matches!(e, WatchEvent::Added(_) | WatchEvent::Modified(_)) {
                return;
            }
        }
        panic!("the watch ended before the ConfigMap appeared");
    };
    tokio::time::timeout(BOUND, applied)
        .await
        .expect("the work applied the ConfigMap");
    let pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    kill_process(pid, Signal::INT).unwrap();
    kill_process(pid, Signal::TERM).unwrap();
    let out = tokio::time::timeout(BOUND, child.wait_with_output())
        .await
        .expect("the hurried program ends: its work is dropped, what it holds released")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an interrupted run is not a success: {err}"
    );
    assert!(err.contains("Error: Cancelled"), "{err}");
    assert_eq!(t.applied().await.as_deref(), Some("v2"));
    t.assert_nothing_held().await;
}
