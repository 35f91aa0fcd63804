//! What the soak's jobs pause besides the chain (issue 48, deliverable 8; issue 49,
//! deliverable 6): a Flux Operator `ResourceSet` (`tenants`) and a replicas gate's Deployment
//! (`web`, 2 replicas, applied by the `apps` Kustomization), both played by a second
//! controller model (Flux Operator's `ResourceSet` controller, and the Deployment's Pods and
//! status), and a person's `kubectl scale` of the gate while a job holds it.
//!
//! Whatever a group leaves on them is a leak: the operator object still fenced or disabled,
//! the gate still fenced, or at another count than the one the last release restored.

use std::time::Duration;

use flux_model::model::{Controller, FluxModel, ModelConfig, ModelHandle};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::chaos::cell::Site;

/// The Flux Operator object some jobs pause (`rset/NS/tenants`).
pub const OPERATOR: &str = "tenants";
/// The gated Deployment (`deploy/NS/web=0`).
pub const GATED: &str = "web";
/// Its count when no gate holds it.
pub const REPLICAS: i32 = 2;
/// The field manager of the person's scale.
pub const SCALER: &str = "kubectl-scale";
const OWNER: &str = "flux-handoff.io/owner";
const OPERATOR_RECONCILE: &str = "fluxcd.controlplane.io/reconcile";
const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";

/// Creates both objects in `ns` and starts the model that plays them, settled.
///
/// # Errors
/// A create failed, or the `ResourceSet` did not settle.
pub async fn start(client: &kube::Client, ns: &str) -> anyhow::Result<ModelHandle> {
    let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": { "name": GATED, "labels": {
            "kustomize.toolkit.fluxcd.io/name": super::person::PAUSED,
            "kustomize.toolkit.fluxcd.io/namespace": ns,
        } },
        "spec": {
            "replicas": REPLICAS,
            "selector": { "matchLabels": { "app": GATED } },
            "template": {
                "metadata": { "labels": { "app": GATED } },
                "spec": { "containers": [{ "name": "web", "image": "registry.k8s.io/web:v1" }] },
            },
        },
    }))?;
    deps.create(&PostParams::default(), &dep).await?;
    let rset = testkit::fixtures::resourceset_resource();
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &rset);
    let spec = json!({ "inputs": [{ "tenant": "a" }] });
    api.create(
        &PostParams::default(),
        &testkit::fixtures::operator_object(&rset, ns, OPERATOR, &spec),
    )
    .await?;
    let model = FluxModel::start(
        client.clone(),
        ModelConfig::namespaced(ns)
            .playing(Controller::ResourceSet)
            .with_workload(ns, GATED),
    );
    model.wait_settled(OPERATOR, 0).await?;
    Ok(model)
}

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// The holder of `o`'s fence, if any.
fn owner(o: &Value) -> Option<String> {
    annotation(o, OWNER).map(|v| v.split(';').next().unwrap_or_default().to_string())
}

/// A person's `kubectl scale deploy web --replicas=2`, `scale_ms` after the gate is proven
/// (fenced, at 0, no Pod left) and while its fence is on: the holder whose fence it broke, as
/// the server's answer to the scale shows it (the write is a CAS on the version read fenced;
/// a version that moved meanwhile is read again). `None` when no job held the gate that way
/// before `done`.
pub async fn scale_during(
    client: &kube::Client,
    ns: &str,
    scale_ms: u64,
    mut done: watch::Receiver<bool>,
) -> Option<String> {
    let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let read = || async {
        let d = deps.get(GATED).await.ok()?;
        serde_json::to_value(&d).ok()
    };
    let proven = |d: &Value| {
        owner(d).is_some()
            && d.pointer("/spec/replicas") == Some(&json!(0))
            && d.pointer("/status/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0
    };
    loop {
        if let Some(d) = read().await
            && proven(&d)
        {
            break;
        }
        if *done.borrow() {
            return None;
        }
        tokio::select! {
            _ = done.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    tokio::time::sleep(Duration::from_millis(scale_ms)).await;
    let pp = PatchParams {
        field_manager: Some(SCALER.into()),
        ..PatchParams::default()
    };
    for _ in 0..20 {
        let d = read().await?;
        owner(&d)?;
        let rv = d.pointer("/metadata/resourceVersion")?.clone();
        let body =
            json!({ "metadata": { "resourceVersion": rv }, "spec": { "replicas": REPLICAS } });
        match deps.patch(GATED, &pp, &Patch::Merge(&body)).await {
            Ok(after) => return owner(&serde_json::to_value(&after).ok()?),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(_) => return None,
        }
    }
    None
}

/// What is left on the two objects: fences, a disabled operator object, a gate at another
/// count than `REPLICAS` (the person's scale leaves it there too).
///
/// # Errors
/// A read failed.
pub async fn leftovers(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let mut left = Vec::new();
    let rset = testkit::fixtures::resourceset_resource();
    let o = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &rset)
        .get(OPERATOR)
        .await?;
    let o = serde_json::to_value(&o)?;
    if let Some(h) = owner(&o) {
        left.push(format!("rset/{OPERATOR} still fenced by {h}"));
    }
    if let Some(v) = annotation(&o, OPERATOR_RECONCILE) {
        left.push(format!(
            "rset/{OPERATOR} left with {OPERATOR_RECONCILE}={v}"
        ));
    }
    let d = serde_json::to_value(
        Api::<Deployment>::namespaced(client.clone(), ns)
            .get(GATED)
            .await?,
    )?;
    if let Some(h) = owner(&d) {
        left.push(format!("deploy/{GATED} still fenced by {h}"));
    }
    if let Some(v) = annotation(&d, RECONCILE) {
        left.push(format!("deploy/{GATED} left with {RECONCILE}={v}"));
    }
    let replicas = d.pointer("/spec/replicas").and_then(Value::as_i64);
    if replicas != Some(i64::from(REPLICAS)) {
        left.push(format!(
            "deploy/{GATED} left at {replicas:?} replicas, not {REPLICAS}"
        ));
    }
    Ok(left)
}

/// Flags a printed step may name that the site's own command line already gives.
const GIVEN: [&str; 4] = ["--kubeconfig", "--config", "--namespace", "-n"];

/// Runs the next steps a job printed (`lines`: its main step's, then its post step's)
/// against the API server, as an on-call would after a person broke its gate: each step with
/// its exit.
///
/// # Errors
/// A step could not be started.
pub async fn settle(site: &Site, lines: &[&str]) -> anyhow::Result<Vec<String>> {
    let lines = lines.iter().copied();
    let mut done = Vec::new();
    for step in next_steps(lines) {
        let mut args: Vec<&str> = Vec::new();
        let mut words = step.iter().map(String::as_str);
        while let Some(w) = words.next() {
            if GIVEN.contains(&w) {
                words.next();
            } else if !GIVEN.iter().any(|g| w.starts_with(&format!("{g}="))) {
                args.push(w);
            }
        }
        let (code, _, err) = site.direct(&args).await?;
        let last = err.lines().last().unwrap_or_default().to_string();
        done.push(format!("{}: exit {code} {last}", args.join(" ")));
    }
    Ok(done)
}

/// [`leftovers`], then anything left cleaned off (the fence annotations removed, the gate
/// back at [`REPLICAS`]) so the next group starts clean: what was left.
///
/// # Errors
/// A read or a cleaning write failed.
pub async fn left_and_cleaned(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let left = leftovers(client, ns).await?;
    if left.is_empty() {
        return Ok(left);
    }
    let rset = testkit::fixtures::resourceset_resource();
    let ops = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &rset);
    let o = serde_json::to_value(ops.get(OPERATOR).await?)?;
    ops.patch(
        OPERATOR,
        &PatchParams::default(),
        &Patch::Merge(&unfenced(&o, None)),
    )
    .await?;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = serde_json::to_value(deps.get(GATED).await?)?;
    deps.patch(
        GATED,
        &PatchParams::default(),
        &Patch::Merge(&unfenced(&d, Some(REPLICAS))),
    )
    .await?;
    Ok(left)
}

/// A merge patch removing every fence annotation of `o` (and the reconcile marks), and
/// setting `spec.replicas` when given.
fn unfenced(o: &Value, replicas: Option<i32>) -> Value {
    let mut gone = serde_json::Map::new();
    if let Some(a) = o
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for k in a.keys() {
            if k.starts_with("flux-handoff.io/") || k == RECONCILE || k == OPERATOR_RECONCILE {
                gone.insert(k.clone(), Value::Null);
            }
        }
    }
    let mut patch = json!({ "metadata": { "annotations": gone } });
    if let Some(n) = replicas {
        patch["spec"] = json!({ "replicas": n });
    }
    patch
}

/// The `flux-handoff ...` commands after `next:` in `lines` (what a run prints as its next
/// steps), in order, each as its words up to a parenthesis or a comma, without repeats.
#[must_use]
pub fn next_steps<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for l in lines {
        let Some(next) = l.find("next:") else {
            continue;
        };
        let mut rest = &l[next..];
        while let Some(at) = rest.find("flux-handoff ") {
            let tail = &rest[at + "flux-handoff ".len()..];
            let end = tail
                .find(['`', ';', '(', ')', ',', '\'', '"'])
                .unwrap_or(tail.len());
            let words: Vec<String> = tail[..end].split_whitespace().map(str::to_string).collect();
            let command = words
                .first()
                .is_some_and(|w| ["fences", "resume"].contains(&w.as_str()));
            if command && !out.contains(&words) {
                out.push(words);
            }
            rest = &tail[end..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_next_steps_are_read_from_the_lines_a_run_printed() {
        let lines = [
            "::error::the pause was broken: Deployment ns/web: its spec.replicas moved; next: \
             flux-handoff fences release deployment/ns/web --holder gh1.1-a --holder-exited \
             --keep-moved (keeps field /spec/replicas as they set it), then flux-handoff \
             resume --holder gh1.1-a --holder-exited",
            "next: flux-handoff resume --holder gh1.1-a --holder-exited",
            "running flux-handoff resume --holder gh1.1-a --if-held",
            "see flux-handoff --help",
        ];
        let steps = next_steps(lines);
        assert_eq!(steps.len(), 2, "{steps:?}");
        assert_eq!(
            steps[0],
            [
                "fences",
                "release",
                "deployment/ns/web",
                "--holder",
                "gh1.1-a",
                "--holder-exited",
                "--keep-moved"
            ]
        );
        assert_eq!(
            steps[1],
            ["resume", "--holder", "gh1.1-a", "--holder-exited"]
        );
    }
}
