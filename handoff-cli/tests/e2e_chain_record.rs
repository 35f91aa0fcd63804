//! End to end: the chain on record (issue 25). A holder records every object it fences on its
//! Lease before the fence is written, and each fence names the Lease it was taken under; so
//! `resume --holder` as `pause` prints it, `fences`, `fences recover` and `fences release`
//! find a target in a namespace nobody scans, and recovery judges a fence only by its own
//! Lease.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use flux_model::model::{FluxModel, ModelConfig, ModelHandle};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::TestNs;
use testkit::fixtures::{helmrelease_resource, kustomization, kustomization_resource};

const CHAIN_KEY: &str = "flux-handoff.io/chain";
const LEASE_KEY: &str = "flux-handoff.io/lease";

/// A namespace of its own with one Flux object applied by the seeded parent
/// (`<c.ns>/flux-system`, by its labels), and a controller model reconciling it.
struct Tenant {
    ns: TestNs,
    _model: ModelHandle,
    api: Api<DynamicObject>,
    name: &'static str,
}

impl Tenant {
    async fn kustomization(c: &Cluster, prefix: &str) -> Self {
        let ns = TestNs::new(prefix).await.unwrap();
        let obj = kustomization("app")
            .managed_by(PARENT, &c.ns.name)
            .build(&ns.name);
        let api = Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource());
        api.create(&PostParams::default(), &obj).await.unwrap();
        let model = FluxModel::start(ns.client.clone(), ModelConfig::namespaced(&ns.name));
        model.wait_settled("app", 0).await.unwrap();
        Self {
            ns,
            _model: model,
            api,
            name: "app",
        }
    }

    async fn helmrelease(c: &Cluster, prefix: &str) -> Self {
        let ns = TestNs::new(prefix).await.unwrap();
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": { "name": "podinfo", "namespace": ns.name, "labels": {
                "kustomize.toolkit.fluxcd.io/name": PARENT,
                "kustomize.toolkit.fluxcd.io/namespace": c.ns.name } },
            "spec": { "interval": "10m", "suspend": false,
                      "chart": { "spec": { "chart": "podinfo", "sourceRef": {
                          "kind": "HelmRepository", "name": "podinfo" } } } },
        }))
        .unwrap();
        let api = Api::namespaced_with(ns.client.clone(), &ns.name, &helmrelease_resource());
        api.create(&PostParams::default(), &obj).await.unwrap();
        let model = FluxModel::start(ns.client.clone(), ModelConfig::namespaced(&ns.name).helm());
        model.wait_settled("podinfo", 0).await.unwrap();
        Self {
            ns,
            _model: model,
            api,
            name: "podinfo",
        }
    }

    async fn get(&self) -> Value {
        serde_json::to_value(self.api.get(self.name).await.unwrap()).unwrap()
    }
}

fn lease_flag(c: &Cluster) -> String {
    format!("{}/flux-handoff", c.ns.name)
}

async fn lease(c: &Cluster, name: &str) -> Lease {
    c.ns.api::<Lease>().get(name).await.unwrap()
}

/// `pause` of `target` (with this test's Lease and controller); returns the holder and the
/// printed resume line.
async fn pause(c: &Cluster, extra: &[&str], target: &str) -> (String, String) {
    let flags = c.handoff_flags();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["pause", "--target", target]);
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let holder = stdout(&out).trim().to_string();
    let err = stderr(&out);
    let line = err
        .lines()
        .find_map(|l| l.split_once("resume with: ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no resume line: {err}"));
    (holder, line)
}

/// Runs a printed command line exactly as printed (no flag added).
async fn run_as_printed(line: &str) -> std::process::Output {
    let words: Vec<String> = line.split_whitespace().map(String::from).collect();
    assert_eq!(words[0], "flux-handoff", "{line}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
    cmd.env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .args(&words[1..])
        .stdin(Stdio::null());
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn assert_released(obj: &Value, what: &str) {
    assert_eq!(annotation(obj, OWNER_KEY), None, "{what}: {obj}");
    assert_eq!(annotation(obj, LEASE_KEY), None, "{what}: {obj}");
    assert!(!suspended(obj), "{what}: {obj}");
}

fn assert_lease_free_without_record(l: &Lease) {
    assert_eq!(l.spec.as_ref().unwrap().holder_identity, None, "{l:?}");
    let record = l
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CHAIN_KEY));
    assert_eq!(record, None, "{l:?}");
}

fn write_config(text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fh-{}", testkit::random_suffix(6)));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("flux-handoff.toml");
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_record_pause_of_a_target_in_another_namespace_resumes_with_the_printed_line() {
    let c = Cluster::seeded("chain-rec").await;
    let t = Tenant::kustomization(&c, "chain-ten").await;
    let target = format!("ks/{}/app", t.ns.name);
    let (holder, line) = pause(&c, &[], &target).await;
    // The Lease records both members; the fence names its Lease.
    let l = lease(&c, "flux-handoff").await;
    let record = &l.metadata.annotations.as_ref().unwrap()[CHAIN_KEY];
    assert!(
        record.contains(&format!("\"namespace\":\"{}\"", t.ns.name)),
        "{record}"
    );
    assert!(record.contains(&format!("{holder};")), "{record}");
    let fenced = t.get().await;
    assert!(suspended(&fenced));
    assert_eq!(
        annotation(&fenced, LEASE_KEY),
        Some(lease_flag(&c).as_str())
    );

    let out = run_as_printed(&line).await;
    assert_eq!(code(&out), 0, "{line}\n{}", stderr(&out));
    assert_released(&t.get().await, "the target outside -n");
    assert_released(&c.get(PARENT).await, "the parent");
    assert_lease_free_without_record(&lease(&c, "flux-handoff").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_record_a_helmrelease_target_in_its_own_namespace_resumes_with_the_printed_line() {
    let c = Cluster::seeded("chain-hr").await;
    let t = Tenant::helmrelease(&c, "chain-hrt").await;
    let target = format!("hr/{}/podinfo", t.ns.name);
    let (_, line) = pause(&c, &[], &target).await;
    assert!(suspended(&t.get().await));
    let out = run_as_printed(&line).await;
    assert_eq!(code(&out), 0, "{line}\n{}", stderr(&out));
    assert_released(&t.get().await, "the HelmRelease");
    assert_released(&c.get(PARENT).await, "the parent");
    assert_lease_free_without_record(&lease(&c, "flux-handoff").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_record_fences_release_and_recover_find_a_target_outside_the_scanned_namespaces() {
    let c = Cluster::seeded("chain-rcv").await;
    let t = Tenant::kustomization(&c, "chain-rct").await;
    let cfg = write_config("[lease]\nduration = \"2s\"\n");
    let cfg_s = cfg.to_str().unwrap();
    let target = format!("ks/{}/app", t.ns.name);
    let (holder, _) = pause(&c, &["--config", cfg_s], &target).await;
    let lease_s = lease_flag(&c);
    let fences = |extra: Vec<String>| {
        let mut args: Vec<String> = ["--config", cfg_s, "fences", "--lease", lease_s.as_str()]
            .map(String::from)
            .to_vec();
        args.extend(extra);
        args
    };
    let cr = &c;
    let run = |args: Vec<String>| async move {
        cr.run(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .await
    };

    // The listing (scope -n) shows the target found through the record.
    let out = run(fences(vec![])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains(&target), "{}", stdout(&out));

    // The parent is refused while its recorded child is held, and nothing changes.
    let parent = format!("ks/{}/{PARENT}", c.ns.name);
    let before = c.get(PARENT).await["metadata"]["resourceVersion"].clone();
    let release = ["release", parent.as_str(), "--holder", holder.as_str()];
    let out = run(fences(release.map(String::from).to_vec())).await;
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains(&target), "{}", stderr(&out));
    assert_eq!(c.get(PARENT).await["metadata"]["resourceVersion"], before);
    assert!(suspended(&t.get().await));

    // Recovery (a deliberate pause, released on request) finds and releases both, children
    // first, and only then clears the Lease and its record.
    let recover = ["recover", "--yes", "--include-paused"];
    let out = run(fences(recover.map(String::from).to_vec())).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let (at_target, at_parent) = (
        err.find(&format!("released: {target}")).expect(&err),
        err.find(&format!("released: {parent}")).expect(&err),
    );
    assert!(at_target < at_parent, "children before parents: {err}");
    assert_released(&t.get().await, "the target outside -n");
    assert_released(&c.get(PARENT).await, "the parent");
    assert_lease_free_without_record(&lease(&c, "flux-handoff").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_record_recovery_with_the_default_lease_leaves_a_fence_under_another_lease_alone() {
    let c = Cluster::seeded("chain-oth").await;
    let other = format!("{}/other", c.ns.name);
    let marker = std::env::temp_dir().join(format!("fh-mark-{}", testkit::random_suffix(6)));
    let path = marker.display();
    // The command waits until the test removes the marker it created.
    let script = format!("touch {path} && while [ -e {path} ]; do sleep 0.1; done");
    let mut cmd = c.cli();
    let controller = format!("{}/kustomize-controller", c.ns.name);
    cmd.args(["run", "--target", TARGET, "--lease", other.as_str()]);
    cmd.args(["--controller", controller.as_str()]);
    cmd.args(["--", "sh", "-c", script.as_str()]);
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
    while !marker.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = c.get(TARGET).await;
    let owner = annotation(&held, OWNER_KEY).unwrap().to_string();
    assert_eq!(annotation(&held, LEASE_KEY), Some(other.as_str()));

    // The default Lease of this test does not exist: before, that made every fence orphaned.
    let lease_s = lease_flag(&c);
    let out = c
        .run(&["fences", "--lease", lease_s.as_str(), "recover", "--yes"])
        .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("taken under Lease {other}")),
        "{}",
        stderr(&out)
    );
    for name in [TARGET, PARENT] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), Some(owner.as_str()), "{name}");
        assert!(suspended(&o), "{name}");
    }

    // The run under the other Lease ends as it should: exit 0, everything given back.
    std::fs::remove_file(&marker).unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [TARGET, PARENT] {
        assert_released(&c.get(name).await, name);
    }
    assert_lease_free_without_record(&lease(&c, "other").await);
}

/// A free Lease whose chain record names another holder's fences that are still held (its
/// holder cleared by hand, the record left) is refused to a new pause before anything is
/// written: the record is the only pointer to a fence outside the scanned namespaces. The
/// refusal names the recorded holder and each fence it still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_record_a_free_lease_recording_held_fences_is_refused_and_nothing_changes() {
    let c = Cluster::seeded("chain-free").await;
    let t = Tenant::kustomization(&c, "chain-fre").await;
    let target = format!("ks/{}/app", t.ns.name);
    let (holder, _) = pause(&c, &[], &target).await;
    // A person clears the holder with kubectl; the chain record stays.
    let leases = c.ns.api::<Lease>();
    let clear = json!({"spec": {"holderIdentity": null}});
    leases
        .patch(
            "flux-handoff",
            &PatchParams::default(),
            &Patch::Merge(&clear),
        )
        .await
        .unwrap();
    let before = lease(&c, "flux-handoff").await.metadata.resource_version;
    let seeded = c.get(TARGET).await["metadata"]["resourceVersion"].clone();

    let flags = c.handoff_flags();
    let mut args = vec!["pause", "--target", TARGET];
    args.extend(flags.iter().map(String::as_str));
    let out = c.run(&args).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 3, "{err}");
    let parent = format!("ks/{}/{PARENT}", c.ns.name);
    assert!(
        err.contains(&format!(
            "it records fences of {holder} that are still held ("
        )),
        "{err}"
    );
    for fence in [&target, &parent] {
        assert!(err.contains(fence.as_str()), "missing {fence}: {err}");
    }
    // Nothing was written: the Lease, its record and the new target are as they were.
    assert_eq!(
        lease(&c, "flux-handoff").await.metadata.resource_version,
        before
    );
    assert_eq!(c.get(TARGET).await["metadata"]["resourceVersion"], seeded);
    assert!(
        suspended(&t.get().await),
        "the recorded fence is still held"
    );
}

/// docs/recipes.md, "Disaster recovery of a `HelmRelease`": the restore runs under a proven
/// pause of the `HelmRelease` and its parent, and both are handed back after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_dr_restore_of_a_helmrelease_runs_under_the_pause_and_hands_back() {
    let c = Cluster::seeded("recipe-dr").await;
    let t = Tenant::helmrelease(&c, "recipe-drt").await;
    let target = format!("hr/{}/podinfo", t.ns.name);
    let seen = std::env::temp_dir().join(format!("fh-dr-{}", t.ns.name));
    // The "restore": lists the fences it works under (what a real restore script would check
    // before touching the release's volumes).
    let restore = format!(
        "{} --kubeconfig {} fences -o name -A --lease {} > {}",
        env!("CARGO_BIN_EXE_flux-handoff"),
        c.kubeconfig.display(),
        lease_flag(&c),
        seen.display()
    );
    let flags = c.handoff_flags();
    let mut args = vec!["run", target.as_str(), "--reason", "DR restore"];
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--", "sh", "-c", restore.as_str()]);
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let during = std::fs::read_to_string(&seen).unwrap_or_default();
    let _ = std::fs::remove_file(&seen);
    assert!(
        during.contains(&target),
        "the restore did not run under the HelmRelease's fence: {during:?}\n{}",
        stderr(&out)
    );
    assert_released(&t.get().await, "the HelmRelease");
    assert_released(&c.get(PARENT).await, "the parent");
    assert_lease_free_without_record(&lease(&c, "flux-handoff").await);
}
