//! One reconcile of one Kustomization: read, deletion/finalizer, suspended early return,
//! working path with phases, and the deferred finalisation on every path.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::apply::{ChildPlan, apply_children, read_children};
use super::events::{ModelEvent, Outcome};
use super::patcher::StatusPatcher;
use super::status::{
    HEALTHY, Mark, PROGRESSING, READY, RECONCILING, REQUESTED_AT, delete_condition,
    finalize_status, now_rfc3339, parse_go_duration, set_condition,
};
use super::{Controller, Inner, OPERATOR_RECONCILE_ANNOTATION, Phase, STATUS_MANAGER, split_key};

/// What the work queue does with the key afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requeue {
    No,
    Now,
    After(Duration),
}

/// Back-off after an API error, as a rate-limited requeue.
const ERROR_BACKOFF: Duration = Duration::from_secs(1);

/// What the reconcile read at its start; the finalisation uses exactly this.
struct Read {
    key: String,
    run: u64,
    generation: i64,
    requested_at: Option<String>,
}

/// A failure of the working path: `Ready=False` with this reason and message.
struct PhaseFailure {
    reason: &'static str,
    message: String,
}

pub(crate) async fn reconcile(inner: &Arc<Inner>, key: &str) -> Requeue {
    let (ns, name) = split_key(key);
    let api = inner.objects(ns);
    let run = inner.runs.fetch_add(1, Ordering::SeqCst) + 1;
    let obj = match api.get_opt(name).await {
        Ok(Some(o)) => o,
        Ok(None) => {
            let outcome = Outcome::Gone;
            inner.events.push(ModelEvent::Finished {
                key: key.into(),
                run,
                outcome,
            });
            return Requeue::No;
        }
        Err(e) => return finished_with_error(inner, key, run, &e.into()),
    };
    let read = Read::of(&obj, key, run);
    let controller = inner.config.controller;
    let suspended = if controller.is_operator() {
        // flux-operator `api/v1/resourceset_types.go` `IsDisabled`: the annotation, any case.
        obj.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(OPERATOR_RECONCILE_ANNOTATION))
            .is_some_and(|v| v.eq_ignore_ascii_case("disabled"))
    } else {
        obj.data["spec"]["suspend"].as_bool().unwrap_or(false)
    };
    let finalizer = controller.finalizer();
    inner.events.push(ModelEvent::Started {
        key: key.into(),
        run,
        generation: read.generation,
        requested_at: read.requested_at.clone(),
        suspended,
    });
    let mut patcher = StatusPatcher::new(api.clone(), &obj);
    let status = patcher.baseline().clone();
    let finalizers = obj.metadata.finalizers.clone().unwrap_or_default();

    if obj.metadata.deletion_timestamp.is_some() {
        let rest: Vec<String> = finalizers.into_iter().filter(|f| f != finalizer).collect();
        return match set_finalizers(&api, name, &rest).await {
            Ok(()) | Err(kube::Error::Api(_)) => {
                let outcome = Outcome::Deleted;
                inner.events.push(ModelEvent::Finished {
                    key: key.into(),
                    run,
                    outcome,
                });
                Requeue::No
            }
            Err(e) => finished_with_error(inner, key, run, &e.into()),
        };
    }
    if inner.config.add_finalizer && !finalizers.iter().any(|f| f == finalizer) {
        let mut all = finalizers;
        all.push(finalizer.into());
        if let Err(e) = set_finalizers(&api, name, &all).await {
            return finished_with_error(inner, key, run, &e.into());
        }
        let (outcome, requeue) = (Outcome::FinalizerAdded, Requeue::Now);
        return finish(inner, &read, &mut patcher, status, outcome, requeue).await;
    }
    if suspended {
        let (outcome, requeue) = (Outcome::Suspended, Requeue::No);
        return finish(inner, &read, &mut patcher, status, outcome, requeue).await;
    }
    work_and_finish(inner, &read, &obj, patcher, status).await
}

impl Read {
    fn of(obj: &DynamicObject, key: &str, run: u64) -> Self {
        let annotations = obj.metadata.annotations.as_ref();
        Self {
            key: key.to_string(),
            run,
            generation: obj.metadata.generation.unwrap_or(0),
            requested_at: annotations.and_then(|a| a.get(REQUESTED_AT)).cloned(),
        }
    }
}

async fn set_finalizers(
    api: &kube::Api<DynamicObject>,
    name: &str,
    finalizers: &[String],
) -> Result<(), kube::Error> {
    let pp = PatchParams {
        field_manager: Some(STATUS_MANAGER.into()),
        ..PatchParams::default()
    };
    let body = json!({ "metadata": { "finalizers": finalizers } });
    api.patch(name, &pp, &Patch::Merge(body)).await.map(drop)
}

/// The working path, then the finalisation.
async fn work_and_finish(
    inner: &Arc<Inner>,
    read: &Read,
    obj: &DynamicObject,
    mut patcher: StatusPatcher,
    mut status: Value,
) -> Requeue {
    let interval = obj.data["spec"]["interval"]
        .as_str()
        .and_then(parse_go_duration)
        .unwrap_or(Duration::from_mins(10));
    let retry = obj.data["spec"]["retryInterval"]
        .as_str()
        .and_then(parse_go_duration)
        .unwrap_or(interval);
    match working(inner, read, obj, &mut patcher, &mut status).await {
        Ok(()) => {
            finish(
                inner,
                read,
                &mut patcher,
                status,
                Outcome::Succeeded,
                Requeue::After(interval),
            )
            .await
        }
        Err(f) => {
            let now = now_rfc3339();
            let mark = Mark {
                type_: READY,
                status: "False",
                reason: f.reason,
                message: &f.message,
            };
            set_condition(&mut status, mark, read.generation, &now);
            finish(
                inner,
                read,
                &mut patcher,
                status,
                Outcome::Failed,
                Requeue::After(retry),
            )
            .await
        }
    }
}

/// The deferred finalisation (fact 3) and the Finished event.
async fn finish(
    inner: &Arc<Inner>,
    read: &Read,
    patcher: &mut StatusPatcher,
    mut status: Value,
    outcome: Outcome,
    requeue: Requeue,
) -> Requeue {
    finalize_status(&mut status, read.requested_at.as_deref(), read.generation);
    // helm-controller's deferred patch observes the generation on every clean return, the
    // suspended one included (hc `helmrelease_controller.go:153-155`; seen live with v1.6.4).
    if inner.config.controller == Controller::Helm
        && matches!(outcome, Outcome::Succeeded | Outcome::Suspended)
    {
        status["observedGeneration"] = json!(read.generation);
    }
    // Flux Operator's `finalizeObjectStatus` (flux-operator `internal/controller/common.go`)
    // records the request on every path, the disabled one included, and its status has no
    // top-level `observedGeneration` (only each condition's).
    if inner.config.controller.is_operator()
        && let Some(s) = status.as_object_mut()
    {
        s.remove("observedGeneration");
    }
    match patcher.write(&status).await {
        Ok(()) => {
            inner.events.push(ModelEvent::Finished {
                key: read.key.clone(),
                run: read.run,
                outcome,
            });
            requeue
        }
        Err(e) => finished_with_error(inner, &read.key, read.run, &e),
    }
}

fn finished_with_error(inner: &Inner, key: &str, run: u64, e: &anyhow::Error) -> Requeue {
    let outcome = Outcome::Error(format!("{e:#}"));
    inner.events.push(ModelEvent::Finished {
        key: key.into(),
        run,
        outcome,
    });
    Requeue::After(ERROR_BACKOFF)
}

async fn working(
    inner: &Arc<Inner>,
    read: &Read,
    obj: &DynamicObject,
    patcher: &mut StatusPatcher,
    status: &mut Value,
) -> Result<(), PhaseFailure> {
    let revision = inner
        .knobs()
        .revisions
        .get(&read.key)
        .cloned()
        .unwrap_or_else(|| inner.config.default_revision.clone());
    let timeout = obj.data["spec"]["timeout"]
        .as_str()
        .or_else(|| obj.data["spec"]["interval"].as_str())
        .unwrap_or("10m")
        .to_string();
    let api_failure = |e: anyhow::Error| PhaseFailure {
        reason: "ReconciliationFailed",
        message: format!("{e:#}"),
    };
    let health = runs_health(inner, read, obj);
    for phase in Phase::ALL {
        let gen_ = read.generation;
        if phase == Phase::Health && !health {
            // kc `kustomization_controller.go:1059-1062`: no health phase, no Healthy condition.
            delete_condition(status, HEALTHY);
            continue;
        }
        mark_phase(
            status,
            inner.config.controller,
            phase,
            &revision,
            &timeout,
            gen_,
        );
        patcher.write(status).await.map_err(api_failure)?;
        let parent = inner.config.controller == Controller::Kustomize;
        let children: Vec<ChildPlan> = if phase == Phase::Apply && parent {
            read_children(inner, &read.key).await.map_err(api_failure)?
        } else {
            Vec::new()
        };
        inner.events.push(ModelEvent::Phase {
            key: read.key.clone(),
            run: read.run,
            phase,
            resource_version: patcher.resource_version.clone(),
        });
        knob_points(inner, read, phase).await;
        let (duration, failing) = {
            let k = inner.knobs();
            let d = k
                .durations
                .get(&phase)
                .copied()
                .unwrap_or(inner.config.phase_duration);
            (d, k.failing.get(&read.key) == Some(&phase))
        };
        tokio::time::sleep(duration).await;
        if failing {
            if phase == Phase::Health {
                let m = Mark {
                    type_: HEALTHY,
                    status: "False",
                    reason: "HealthCheckFailed",
                    message: "health check failed (model knob)",
                };
                set_condition(status, m, gen_, &now_rfc3339());
            }
            return Err(PhaseFailure {
                reason: failure_reason(phase),
                message: format!("{phase:?} failed (model knob)"),
            });
        }
        match phase {
            Phase::Apply => apply_children(inner, &read.key, children)
                .await
                .map_err(api_failure)?,
            Phase::Health => {
                let m = Mark {
                    type_: HEALTHY,
                    status: "True",
                    reason: "Succeeded",
                    message: "Health check passed",
                };
                set_condition(status, m, gen_, &now_rfc3339());
                patcher.write(status).await.map_err(api_failure)?;
            }
            Phase::Fetch | Phase::Build => {}
        }
    }
    mark_succeeded(status, inner.config.controller, &revision, read.generation);
    Ok(())
}

/// Whether a working path of `obj` has a health phase. kustomize-controller runs one only with
/// `spec.wait` or `spec.healthChecks` (kc `internal/controller/kustomization_controller.go:1059`);
/// a knob armed at the health phase of `read`'s object stands for such a health check.
/// helm-controller always waits in the model.
fn runs_health(inner: &Inner, read: &Read, obj: &DynamicObject) -> bool {
    let spec = &obj.data["spec"];
    let configured = spec["wait"] == json!(true)
        || spec["healthChecks"]
            .as_array()
            .is_some_and(|c| !c.is_empty());
    let k = inner.knobs();
    let armed = k
        .hangs
        .get(&read.key)
        .is_some_and(|(p, _, _)| *p == Phase::Health)
        || k.failing.get(&read.key) == Some(&Phase::Health)
        || k.restart_at.get(&read.key) == Some(&Phase::Health)
        || k.touches
            .iter()
            .any(|t| t.trigger == read.key && t.phase == Phase::Health);
    inner.config.controller == Controller::Helm || configured || armed
}

/// The end of a working path: `Ready=True` (and `lastAppliedRevision` for Kustomizations).
fn mark_succeeded(status: &mut Value, controller: Controller, revision: &str, gen_: i64) {
    let (reason, message) = match controller {
        Controller::Kustomize => (
            "ReconciliationSucceeded",
            format!("Applied revision: {revision}"),
        ),
        Controller::Helm => (
            "UpgradeSucceeded",
            format!("Helm upgrade succeeded for revision {revision}"),
        ),
        Controller::ResourceSet | Controller::FluxInstance => {
            ("ReconciliationSucceeded", "Reconciliation finished".into())
        }
    };
    let m = Mark {
        type_: READY,
        status: "True",
        reason,
        message: &message,
    };
    set_condition(status, m, gen_, &now_rfc3339());
    if controller == Controller::Kustomize {
        status["lastAppliedRevision"] = json!(revision);
    }
}

/// Touches, restart and hang armed for this phase, in that order.
async fn knob_points(inner: &Arc<Inner>, read: &Read, phase: Phase) {
    let touches = inner.knobs().take_touches(&read.key, phase);
    for t in touches {
        if let Err(e) = inner.touch(&t.target, &t.touch).await {
            tracing::warn!(error = %e, target = %t.target, "competing writer failed");
        }
    }
    let restart = {
        let mut k = inner.knobs();
        if k.restart_at.get(&read.key) == Some(&phase) {
            k.restart_at.remove(&read.key);
            true
        } else {
            false
        }
    };
    if restart {
        // The restart aborts this very task; park until it does.
        tokio::spawn(inner.clone().restart());
        std::future::pending::<()>().await;
    }
    let gate = inner.knobs().hang(&read.key, phase);
    if let Some(mut rx) = gate {
        inner.events.push(ModelEvent::Hanging {
            key: read.key.clone(),
            run: read.run,
            phase,
        });
        // A dropped sender (hang replaced) also releases.
        let _ = rx.wait_for(|released| *released).await;
    }
}

/// The status a phase announces: a new `Reconciling` message (fetch also `Ready=Unknown`,
/// build `lastAttemptedRevision`, health `Healthy=Unknown`), as kustomize-controller writes them.
fn mark_phase(
    status: &mut Value,
    controller: Controller,
    phase: Phase,
    revision: &str,
    timeout: &str,
    gen_: i64,
) {
    let now = now_rfc3339();
    let verb = match (controller, phase) {
        (Controller::Kustomize, Phase::Fetch) => "Fetching manifests",
        (Controller::Kustomize, Phase::Build) => "Building manifests",
        (Controller::Kustomize, Phase::Apply) => "Detecting drift",
        (Controller::Helm, Phase::Fetch) => "Fetching chart",
        (Controller::Helm, Phase::Build) => "Rendering release",
        (Controller::Helm, Phase::Apply) => "Running 'upgrade' action",
        (_, Phase::Fetch) => "Computing inputs",
        (_, Phase::Build) => "Building resources",
        (_, Phase::Apply) => "Applying resources",
        (_, Phase::Health) => "Running health checks",
    };
    let m = format!("{verb} for revision {revision} with a timeout of {timeout}");
    if phase == Phase::Fetch {
        let message = "Reconciliation in progress";
        let ready = Mark {
            type_: READY,
            status: "Unknown",
            reason: PROGRESSING,
            message,
        };
        set_condition(status, ready, gen_, &now);
    }
    if phase == Phase::Build {
        status["lastAttemptedRevision"] = json!(revision);
    }
    set_condition(status, reconciling(&m), gen_, &now);
    if phase == Phase::Health {
        let healthy = Mark {
            type_: HEALTHY,
            status: "Unknown",
            reason: PROGRESSING,
            message: &m,
        };
        set_condition(status, healthy, gen_, &now);
    }
}

fn reconciling(message: &str) -> Mark<'_> {
    Mark {
        type_: RECONCILING,
        status: "True",
        reason: PROGRESSING,
        message,
    }
}

fn failure_reason(phase: Phase) -> &'static str {
    match phase {
        Phase::Fetch => "ArtifactFailed",
        Phase::Build => "BuildFailed",
        Phase::Apply => "ReconciliationFailed",
        Phase::Health => "HealthCheckFailed",
    }
}
