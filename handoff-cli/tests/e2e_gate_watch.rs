//! End to end: a replicas gate (`run deploy/NS/NAME=N`) is watched like a fence while the work
//! runs, and `resume --wait-ready` waits until its Deployment is available again. Against the
//! API server, the model playing kustomize-controller and the gated Deployment's Pods and
//! status (`flux_model::model::DeploymentConfig::workload`; no kube-controller-manager runs).

mod common;

use std::path::PathBuf;
use std::process::{Child, Stdio};

use common::gate::GATED;
use common::{Cluster, OWNER_KEY, TARGET, annotation, code, ended, stderr, stdout, suspended};
use flux_suspend::object::{get_json, kustomization};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// The work: announces it runs, waits for the go file (20 s at most), then records its end.
const WORK: &str = "echo $$ > \"$MARKER\"; i=0; while [ ! -e \"$GO\" ] && [ $i -lt 200 ]; \
                    do sleep 0.1; i=$((i+1)); done; echo end > \"$END\"";

struct Files {
    marker: PathBuf,
    go: PathBuf,
    end: PathBuf,
}

impl Files {
    fn new(ns: &str) -> Self {
        let tmp = std::env::temp_dir();
        let at = |what: &str| tmp.join(format!("flux-handoff-{ns}.gate-watch-{what}"));
        Self {
            marker: at("runs"),
            go: at("go"),
            end: at("end"),
        }
    }

    fn cleanup(&self) {
        for f in [&self.marker, &self.go, &self.end] {
            let _ = std::fs::remove_file(f);
        }
    }
}

async fn dep(c: &Cluster) -> Value {
    let deps: Api<Deployment> = Api::namespaced(c.ns.client.clone(), &c.ns.name);
    serde_json::to_value(deps.get(GATED).await.unwrap()).unwrap()
}

/// Waits (a minute at most) until the gated Deployment reports `n` replicas available.
async fn available(c: &Cluster, n: i64) {
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        let d = dep(c).await;
        if d["status"]["availableReplicas"].as_i64().unwrap_or(0) == n {
            return;
        }
        assert!(tokio::time::Instant::now() < give_up, "not {n} available");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn run(c: &Cluster, f: &Files) -> Child {
    let mut cmd = c.cli();
    cmd.args([
        "run",
        "--target",
        &format!("deploy/{}/{GATED}=0", c.ns.name),
    ])
    .args(c.handoff_flags())
    .args(["--", "sh", "-c", WORK])
    .env("MARKER", &f.marker)
    .env("GO", &f.go)
    .env("END", &f.end)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    cmd.spawn().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_watch_a_scale_during_the_work_stops_it_as_a_broken_pause() {
    let c = common::gate::cluster("gate-watch").await;
    available(&c, 2).await;
    let f = Files::new(&c.ns.name);
    let child = run(&c, &f);
    common::wait_for_file(&f.marker, "the work to start (the gate proven)").await;
    assert_eq!(dep(&c).await["spec"]["replicas"], json!(0));

    // An on-call's `kubectl scale --replicas=2`: through the scale subresource.
    let deps: Api<Deployment> = Api::namespaced(c.ns.client.clone(), &c.ns.name);
    let pp = PatchParams {
        field_manager: Some("kubectl-scale".into()),
        ..PatchParams::default()
    };
    deps.patch_scale(
        GATED,
        &pp,
        &Patch::Merge(json!({ "spec": { "replicas": 2 } })),
    )
    .await
    .unwrap();

    // The go file is never written: only the watch can end the work before its 20 s.
    let (exit, err) = ended(child).await;
    let reached_end = f.end.exists();
    f.cleanup();
    assert!(
        !reached_end,
        "the work ran to its end after the scale: {err}"
    );
    assert_eq!(exit, 8, "{err}");
    assert!(
        err.contains("kubectl-scale"),
        "the scaler is not named: {err}"
    );
    assert!(err.contains("spec.replicas was set to 2"), "{err}");

    // The server: their count stays under our fence, withheld; the parent stays paused.
    let after = dep(&c).await;
    assert_eq!(after["spec"]["replicas"], json!(2), "{err}");
    assert!(
        annotation(&after, OWNER_KEY).is_some(),
        "fence removed: {err}"
    );
    let parent = c.get(TARGET).await;
    assert!(
        suspended(&parent),
        "the parent was resumed over a held gate"
    );
    assert!(annotation(&parent, OWNER_KEY).is_some(), "{err}");

    // The printed next steps settle it: the gate as the person left it, then the parent.
    settle(&c, &err).await;
    let settled = dep(&c).await;
    assert_eq!(settled["spec"]["replicas"], json!(2), "{err}");
    assert!(annotation(&settled, OWNER_KEY).is_none(), "{err}");
    let parent = c.get(TARGET).await;
    assert!(!suspended(&parent) && annotation(&parent, OWNER_KEY).is_none());
    c.model.shutdown().await;
}

/// Runs the `flux-handoff ...` next steps `err` prints, in order.
async fn settle(c: &Cluster, err: &str) {
    let steps: Vec<Vec<String>> = err
        .split("flux-handoff ")
        .skip(1)
        .filter_map(|rest| {
            let step = rest.split([';', '\n', '(', ',']).next()?;
            let words: Vec<String> = step.split_whitespace().map(str::to_string).collect();
            (!words.is_empty()).then_some(words)
        })
        .filter(|w| matches!(w[0].as_str(), "fences" | "resume"))
        .filter(|w| w.iter().any(|a| a == "--holder" || a == "release"))
        .fold(Vec::new(), |mut all: Vec<Vec<String>>, w| {
            if !all.contains(&w) {
                all.push(w);
            }
            all
        });
    assert!(!steps.is_empty(), "no next step printed: {err}");
    for mut step in steps {
        step.extend(["--lease".into(), format!("{}/flux-handoff", c.ns.name)]);
        let args: Vec<&str> = step.iter().map(String::as_str).collect();
        let out = c.run(&args).await;
        assert_eq!(code(&out), 0, "{step:?}: {}", stderr(&out));
    }
}

/// Pauses the gate at 0 (parked, its holder on stdout) and returns the holder.
async fn pause(c: &Cluster) -> String {
    let target = format!("deploy/{}/{GATED}=0", c.ns.name);
    let mut args = vec!["pause".to_string(), "--target".into(), target];
    args.extend(c.handoff_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(dep(c).await["spec"]["replicas"], json!(0));
    stdout(&out).trim().to_string()
}

fn resume_args(c: &Cluster, holder: &str) -> Vec<String> {
    let mut args = vec![
        "resume".to_string(),
        "--holder".into(),
        holder.into(),
        "--wait-ready".into(),
    ];
    args.extend(c.handoff_flags());
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_watch_resume_wait_ready_waits_until_the_deployment_is_available() {
    let c = common::gate::cluster("gate-ready").await;
    available(&c, 2).await;
    let holder = pause(&c).await;
    let args = resume_args(&c, &holder);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = c.run(&args).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Read at once: when the wait ends, the count is back and available.
    let after = dep(&c).await;
    assert_eq!(after["spec"]["replicas"], json!(2));
    assert_eq!(after["status"]["availableReplicas"], json!(2), "{after}");
    assert_eq!(after["status"]["updatedReplicas"], json!(2), "{after}");
    assert!(annotation(&after, OWNER_KEY).is_none());
    c.model.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_watch_resume_wait_ready_names_a_deployment_not_available_in_time() {
    let c = common::gate::cluster("gate-unavail").await;
    available(&c, 2).await;
    let holder = pause(&c).await;
    // From here nothing plays the Deployment (nor Flux's objects): given back at 2, it never
    // becomes available.
    let Cluster {
        ns,
        model,
        kubeconfig,
    } = c;
    model.shutdown().await;
    let cli = |ns: &testkit::TestNs| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_flux-handoff"));
        cmd.env_remove("GITHUB_ACTIONS")
            .env_remove("FLUX_HANDOFF_CONFIG")
            .env_remove("FLUX_HANDOFF_HOLDER")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "--namespace",
                &ns.name,
                "--interval",
                "200ms",
                "--timeout",
                "4s",
            ])
            .args(["resume", "--holder", &holder, "--wait-ready"])
            .args(["--lease", &format!("{}/flux-handoff", ns.name)])
            .stdin(std::process::Stdio::null());
        cmd
    };
    let mut cmd = cli(&ns);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 10, "{err}");
    // Named among what is not Ready (not only among what was handed back), with its counts.
    let not_ready = err
        .split("after the resume:")
        .nth(1)
        .and_then(|rest| rest.split("; everything was handed back").next())
        .unwrap_or_default();
    assert!(
        not_ready.contains(&format!(
            "Deployment {}/{GATED} (0 of 2 replica(s) available",
            ns.name
        )),
        "{err}"
    );
    // Everything was handed back before the wait: the count, the parent.
    let deps: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    let after = serde_json::to_value(deps.get(GATED).await.unwrap()).unwrap();
    assert_eq!(after["spec"]["replicas"], json!(2));
    assert!(annotation(&after, OWNER_KEY).is_none());
    let parent = get_json(&ns.client, &kustomization(&ns.name, TARGET))
        .await
        .unwrap();
    assert!(!suspended(&parent) && annotation(&parent, OWNER_KEY).is_none());
}
