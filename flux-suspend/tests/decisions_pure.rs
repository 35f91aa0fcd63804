//! Tier 1: acknowledgement, restart progress, quiesce blockers, readiness, parent lookup.

use std::collections::BTreeSet;

use flux_suspend::flux::{self, NamespacedName};
use flux_suspend::quiesce::{Blocker, blockers};
use flux_suspend::readiness::{Readiness, readiness};
use flux_suspend::retire::{PodView, RestartProgress, Strategy, acknowledged, restart_progress};
use serde_json::{Value, json};

fn ks(status: &Value, suspend: bool) -> Value {
    json!({
        "metadata": { "name": "apps", "namespace": "flux-system", "generation": 3,
                      "labels": { "kustomize.toolkit.fluxcd.io/name": "flux-system" } },
        "spec": { "suspend": suspend },
        "status": status,
    })
}

fn cond(t: &str, s: &str, reason: &str, msg: &str) -> Value {
    json!({ "type": t, "status": s, "reason": reason, "message": msg })
}

#[test]
fn ack_requires_exact_nonce() {
    let obj = ks(&json!({ "lastHandledReconcileAt": "n-1" }), true);
    assert!(acknowledged(&obj, "n-1"));
    assert!(!acknowledged(&obj, "n-2"));
    assert!(!acknowledged(&ks(&json!({}), true), "n-1"));
}

#[test]
fn strategy_parses_the_three_names_only() {
    assert_eq!("ack".parse::<Strategy>(), Ok(Strategy::Ack));
    assert_eq!("restart".parse::<Strategy>(), Ok(Strategy::Restart));
    assert_eq!("none".parse::<Strategy>(), Ok(Strategy::QuietWindow));
    assert!("Ack".parse::<Strategy>().is_err());
}

fn pod(uid: &str, ready: bool, terminating: bool) -> PodView {
    let deleted = terminating.then_some("2026-12-02T06:00:00Z");
    let status = if ready { "True" } else { "False" };
    PodView::from_json(&json!({
        "metadata": {"uid": uid, "deletionTimestamp": deleted},
        "status": {"conditions": [{"type": "Ready", "status": status}]},
    }))
    .expect("a Pod with a uid")
}

#[test]
fn restart_with_old_pod_still_terminating_is_pending() {
    let before: BTreeSet<String> = ["old".to_string()].into();
    let now = [pod("old", true, true), pod("new", true, false)];
    assert_eq!(
        restart_progress(&before, &now, 1),
        RestartProgress::Pending {
            old: 1,
            ready: 1,
            want: 1
        }
    );
}

#[test]
fn restart_with_old_pods_gone_and_replacement_ready_is_done() {
    let before: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
    assert_eq!(
        restart_progress(&before, &[pod("c", true, false)], 1),
        RestartProgress::Done
    );
    assert_eq!(
        restart_progress(&before, &[pod("c", false, false)], 1),
        RestartProgress::Pending {
            old: 0,
            ready: 0,
            want: 1
        }
    );
}

#[test]
fn pod_view_reads_ready_and_deletion_timestamp() {
    let p = json!({ "metadata": { "uid": "u", "deletionTimestamp": "2026-01-01T00:00:00Z" },
                    "status": { "conditions": [ { "type": "Ready", "status": "True" } ] } });
    assert_eq!(PodView::from_json(&p), Some(pod("u", true, true)));
    assert_eq!(PodView::from_json(&json!({ "metadata": {} })), None);
}

#[test]
fn failing_target_quiesce_names_its_reconciling_and_ready_conditions() {
    let obj = ks(
        &json!({ "conditions": [
            cond("Ready", "False", "ArtifactFailed", "401 Unauthorized\nfrom ghcr.io"),
            cond("Reconciling", "True", "ProgressingWithRetry", "retrying"),
        ]}),
        false,
    );
    let b = blockers(&obj, &[]);
    assert_eq!(b.len(), 1);
    let text = b[0].to_string();
    assert_eq!(
        text,
        "target Reconciling=True (ProgressingWithRetry: retrying), Ready=False (ArtifactFailed: \
         401 Unauthorized from ghcr.io)"
    );
}

#[test]
fn quiesce_names_not_ready_and_unreadable_dependencies() {
    let obj = ks(
        &json!({ "conditions": [ cond("Ready", "True", "Succeeded", "ok") ] }),
        false,
    );
    let dep = |n: &str| NamespacedName {
        namespace: "flux-system".into(),
        name: n.into(),
    };
    let ready_dep = ks(
        &json!({ "conditions": [ cond("Ready", "True", "Succeeded", "") ] }),
        false,
    );
    let failing = ks(
        &json!({ "conditions": [ cond("Ready", "False", "HealthCheckFailed", "x") ] }),
        false,
    );
    let b = blockers(
        &obj,
        &[
            (dep("a"), Some(ready_dep)),
            (dep("b"), Some(failing)),
            (dep("c"), None),
        ],
    );
    assert_eq!(b.len(), 2);
    assert!(matches!(&b[0], Blocker::DependencyNotReady { object, .. } if object.name == "b"));
    assert_eq!(b[1].to_string(), "dependency flux-system/c not ready");
}

#[test]
fn quiet_target_has_no_blockers() {
    let obj = ks(
        &json!({ "conditions": [ cond("Ready", "True", "Succeeded", "") ] }),
        false,
    );
    assert!(blockers(&obj, &[]).is_empty());
}

#[test]
fn readiness_never_reads_a_suspended_object_as_progress() {
    let obj = ks(
        &json!({ "observedGeneration": 3, "conditions": [ cond("Ready", "True", "Succeeded", "") ] }),
        true,
    );
    assert_eq!(readiness(&obj, None), Readiness::Suspended);
}

#[test]
fn readiness_requires_current_generation_and_handled_nonce() {
    let lagging = ks(
        &json!({ "observedGeneration": 2, "lastHandledReconcileAt": "n",
                 "conditions": [ cond("Ready", "True", "Succeeded", "") ] }),
        false,
    );
    assert_eq!(readiness(&lagging, Some("n")), Readiness::Pending);
    let current = ks(
        &json!({ "observedGeneration": 3, "lastHandledReconcileAt": "old",
                 "conditions": [ cond("Ready", "True", "Succeeded", "") ] }),
        false,
    );
    assert_eq!(readiness(&current, Some("n")), Readiness::Pending);
    assert_eq!(readiness(&current, None), Readiness::Ready);
    let failed = ks(
        &json!({ "lastHandledReconcileAt": "n",
                 "conditions": [ cond("Ready", "False", "BuildFailed", "") ] }),
        false,
    );
    assert_eq!(
        readiness(&failed, Some("n")),
        Readiness::Failed {
            reason: "BuildFailed".into()
        }
    );
}

#[test]
fn parent_is_found_from_kustomize_labels_with_namespace_default() {
    let obj = ks(&json!({}), false);
    assert_eq!(
        flux::parent_of(&obj),
        Some(NamespacedName {
            namespace: "flux-system".into(),
            name: "flux-system".into()
        })
    );
    let orphan = json!({ "metadata": { "name": "x", "namespace": "n" } });
    assert_eq!(flux::parent_of(&orphan), None);
}

#[test]
fn depends_on_defaults_namespace_to_the_object() {
    let obj = json!({ "metadata": { "namespace": "ns" },
                      "spec": { "dependsOn": [ { "name": "a" }, { "name": "b", "namespace": "o" } ] } });
    let deps = flux::depends_on(&obj);
    assert_eq!(deps[0].to_string(), "ns/a");
    assert_eq!(deps[1].to_string(), "o/b");
}
