//! End to end: targets chosen by label selector (`-l`) or `--all` (issue 38, item 3). The
//! selection is listed once before any write; a selected Kustomization that applies another
//! selected object is paused as its parent; dependencies (`spec.dependsOn`) are released
//! before what depends on them, in the order the API server records; a selector that matches
//! nothing is exit 2 with one line and no write.

mod common;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::fixtures::{kustomization, kustomization_resource};

const RECONCILE_KEY: &str = "kustomize.toolkit.fluxcd.io/reconcile";

fn api(c: &Cluster) -> Api<DynamicObject> {
    Api::namespaced_with(c.ns.client.clone(), &c.ns.name, &kustomization_resource())
}

/// Adds `key=value` to each named Kustomization's labels (a field manager of the test's own,
/// which the parent's apply leaves alone).
async fn label(c: &Cluster, names: &[&str], key: &str, value: &str) {
    for name in names {
        let patch = json!({ "metadata": { "labels": { key: value } } });
        api(c)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
}

/// Creates Kustomization `name`, applied by the seeded parent, depending on `deps`, and waits
/// for the model to settle it.
async fn create(c: &Cluster, name: &str, deps: &[&str], labels: &[(&str, &str)]) {
    let mut obj = serde_json::to_value(
        kustomization(name)
            .managed_by(PARENT, &c.ns.name)
            .build(&c.ns.name),
    )
    .unwrap();
    for (k, v) in labels {
        obj["metadata"]["labels"][*k] = json!(v);
    }
    let deps: Vec<Value> = deps.iter().map(|d| json!({ "name": d })).collect();
    obj["spec"]["dependsOn"] = json!(deps);
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    api(c).create(&PostParams::default(), &obj).await.unwrap();
    c.model.wait_settled(name, 0).await.unwrap();
}

/// The objects `released: KIND NS/NAME` lines name, in the order printed: each is printed when
/// the server has answered its release, one release after the other.
fn released(err: &str) -> Vec<String> {
    err.lines()
        .filter_map(|l| l.split_once("released: Kustomization ").map(|(_, r)| r))
        .filter_map(|r| r.split_whitespace().next())
        .filter_map(|r| r.split_once('/').map(|(_, name)| name.to_string()))
        .collect()
}

const NOWHERE: &str = "apiVersion: v1
kind: Config
clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]
users: [{name: x, user: {token: t}}]
contexts: [{name: x, context: {cluster: x, user: x}}]
current-context: x
";

fn args<'a>(c: &'a [String], head: &[&'a str]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.extend(c.iter().map(String::as_str));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_run_dash_l_pauses_what_matches_and_releases_dependencies_first() {
    let c = Cluster::seeded("sel-l").await;
    // Listed by name, a-db comes first, and fenced in that order it would be released last;
    // but b-web depends on a-db, so a-db must be released first.
    create(&c, "a-db", &[], &[("team", "shop")]).await;
    create(&c, "b-web", &["a-db"], &[("team", "shop")]).await;
    label(&c, &["apps"], "team", "other").await;
    let flags = c.handoff_flags();
    let script = "echo \"$FLUX_HANDOFF_TARGETS\"";
    let mut argv = args(&flags, &["run", "-l", "team=shop"]);
    argv.extend(["--", "sh", "-c", script]);
    let out = c.run(&argv).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    // The dependency released first, then its dependent, then the parent that applies them.
    assert_eq!(released(&err), ["a-db", "b-web", PARENT], "{err}");
    let targets = stdout(&out);
    // The command saw the selected targets (not apps), in the order they were fenced.
    let ns = &c.ns.name;
    assert_eq!(
        targets.trim(),
        format!("Kustomization {ns}/b-web,Kustomization {ns}/a-db")
    );
    assert!(
        err.contains("-l team=shop selected 2 target(s), released in this order: "),
        "{err}"
    );
    for name in ["b-web", "a-db", PARENT, "apps"] {
        assert_eq!(annotation(&c.get(name).await, OWNER_KEY), None, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_pause_all_pauses_every_kustomization_parents_as_parents() {
    let c = Cluster::seeded("sel-all").await;
    let flags = c.handoff_flags();
    // The server's dry run answers each write of the selection and changes nothing.
    let before = server_state(&c).await;
    let out = c
        .run(&args(&flags, &["pause", "--dry-run=server", "--all"]))
        .await;
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    for (name, role) in [(PARENT, "parent"), ("apps", "target"), (TARGET, "target")] {
        let line = format!(
            "would patch Kustomization {}/{name} (fence ({role}))",
            c.ns.name
        );
        assert!(err.contains(&line), "{line}: {err}");
    }
    assert_eq!(server_state(&c).await, before, "{err}");
    let out = c.run(&args(&flags, &["pause", "--all"])).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let holder = stdout(&out).trim().to_string();
    assert!(
        err.contains(&format!(
            "paused as the parent of selected targets: ks/{}/{PARENT}",
            c.ns.name
        )),
        "{err}"
    );
    // Every Kustomization of the namespace is fenced by the holder; the children as targets
    // (reconcile: disabled), the parent that applies them as their parent.
    for name in [PARENT, TARGET, "apps"] {
        let o = c.get(name).await;
        let owner = annotation(&o, OWNER_KEY).unwrap_or_default();
        assert!(owner.contains(&holder), "{name}: {owner:?}");
        assert!(suspended(&o), "{name}");
        let target = annotation(&o, RECONCILE_KEY) == Some("disabled");
        assert_eq!(target, name != PARENT, "{name}");
    }
    let out = c.run(&args(&flags, &["resume", "--holder", &holder])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in [PARENT, TARGET, "apps"] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}");
        assert!(!suspended(&o), "{name}");
    }
}

/// Each Kustomization's resourceVersion and the Lease's: what a write would change.
async fn server_state(c: &Cluster) -> Vec<Option<String>> {
    let mut v: Vec<Option<String>> = api(c)
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| o.metadata.resource_version)
        .collect();
    let lease = c.ns.api::<Lease>().get_opt("flux-handoff").await.unwrap();
    v.push(lease.and_then(|l| l.metadata.resource_version));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_that_matches_nothing_is_exit_2_and_writes_nothing() {
    let c = Cluster::seeded("sel-none").await;
    let flags = c.handoff_flags();
    let before = server_state(&c).await;
    let ns = c.ns.name.clone();
    let cases: [(Vec<&str>, String); 4] = [
        (
            args(&flags, &["pause", "-l", "team=nobody"]),
            format!(
                "no Kustomization matches -l team=nobody in {ns}: nothing to pause, nothing \
                 written"
            ),
        ),
        (
            args(&flags, &["run", "-l", "team=nobody", "--", "true"]),
            format!(
                "no Kustomization matches -l team=nobody in {ns}: nothing to pause, nothing \
                 written"
            ),
        ),
        (
            args(&flags, &["pause", "--all", "--kind", "hr"]),
            format!("no HelmRelease matches --all in {ns}: nothing to pause, nothing written"),
        ),
        (
            args(
                &flags,
                &["pause", "--dry-run=server", "-l", "team in (x,y)"],
            ),
            format!(
                "no Kustomization matches -l team in (x,y) in {ns}: nothing to pause, nothing \
                 written"
            ),
        ),
    ];
    for (argv, line) in cases {
        let out = c.run(&argv).await;
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{argv:?}: {err}");
        assert!(err.contains(&line), "{argv:?}: {err}");
        assert_eq!(server_state(&c).await, before, "{argv:?} wrote: {err}");
    }
    // Bad input is refused before any request: a selector that does not parse, names and a
    // selector at once.
    let bad: [(Vec<&str>, &str); 3] = [
        (
            args(&flags, &["pause", "-l", "team=a=b"]),
            "is not a label value",
        ),
        (
            args(&flags, &["pause", "-l", "team=x", "apps"]),
            "name targets (\"apps\") or select them, not both",
        ),
        (
            args(&flags, &["pause", "--kind", "hr"]),
            "give -l SELECTOR or --all",
        ),
    ];
    // A server nothing answers on: a request would end in another code than 2.
    let nowhere = std::env::temp_dir().join(format!("fh-sel-{}", testkit::random_suffix(6)));
    std::fs::write(&nowhere, NOWHERE).unwrap();
    let run_nowhere = |argv: Vec<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
        cmd.env_remove("FLUX_HANDOFF_CONFIG")
            .arg("--kubeconfig")
            .arg(&nowhere)
            .args(["--namespace", "x", "--timeout", "5s"])
            .args(argv)
            .stdin(std::process::Stdio::null());
        cmd.output().unwrap()
    };
    for (argv, words) in bad {
        let out = run_nowhere(argv.clone());
        let err = stderr(&out);
        assert_eq!(code(&out), 2, "{argv:?}: {err}");
        assert!(err.contains(words), "{argv:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{argv:?}: {err}");
    }
    // The control: a well-formed selector is sent, and there is no server.
    let out = run_nowhere(vec!["pause", "-l", "team=x"]);
    assert_ne!(code(&out), 2, "{}", stderr(&out));
    std::fs::remove_file(&nowhere).unwrap();
    assert_eq!(server_state(&c).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_resume_l_resumes_the_pause_of_the_paused_objects_it_selects() {
    let c = Cluster::seeded("sel-resume").await;
    create(&c, "a-db", &[], &[("team", "shop")]).await;
    create(&c, "b-web", &["a-db"], &[("team", "shop")]).await;
    let flags = c.handoff_flags();
    let out = c.run(&args(&flags, &["pause", "-l", "team=shop"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let holder = stdout(&out).trim().to_string();
    // `flux resume ks -l team=shop`: the holder is read from the selected objects' fences and
    // its whole pause resumed (the parent too), then each released object waited for.
    let out = c.run(&args(&flags, &["resume", "-l", "team=shop"])).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(
        err.contains(&format!("fenced by {holder}: resuming its pause")),
        "{err}"
    );
    // A parked pause, too, is released dependencies first (the fences are found in name
    // order, b-web's dependency first: released in that order, b-web would go first).
    assert_eq!(released(&err), ["a-db", "b-web", PARENT], "{err}");
    for name in ["a-db", "b-web", PARENT] {
        let o = c.get(name).await;
        assert_eq!(annotation(&o, OWNER_KEY), None, "{name}");
        assert!(!suspended(&o), "{name}");
    }
    // Nothing paused matches any more: exit 2, one line, nothing written.
    let before = server_state(&c).await;
    let out = c.run(&args(&flags, &["resume", "--all"])).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(
        err.contains(&format!(
            "no paused Kustomization matches --all in {}: nothing to resume, nothing written",
            c.ns.name
        )),
        "{err}"
    );
    assert_eq!(server_state(&c).await, before, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_named_targets_too_are_released_dependencies_first() {
    let c = Cluster::seeded("sel-named").await;
    create(&c, "a-db", &[], &[]).await;
    create(&c, "b-web", &["a-db"], &[]).await;
    let flags = c.handoff_flags();
    // Named in dependency order: fenced in that order, b-web would be released first.
    let mut argv = args(&flags, &["run", "a-db", "b-web"]);
    argv.extend(["--", "true"]);
    let out = c.run(&argv).await;
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert_eq!(released(&err), ["a-db", "b-web", PARENT], "{err}");
}
