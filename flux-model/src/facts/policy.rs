//! An admission policy that makes the conditions part of a controller's status patch fail
//! alone, on either backend's control plane.

use crate::model::Outcome;
use crate::model::status::RECONCILING;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::backend::{self, Backend, Mark, Setup, Workload};
use super::{cond, status};

/// A `ValidatingAdmissionPolicy` (and binding) denying status writes that change conditions of
/// Kustomizations in one namespace.
pub struct ConditionsFrozen {
    client: kube::Client,
    name: String,
}

impl ConditionsFrozen {
    pub async fn install(api: &Api<DynamicObject>, ns: &str, probe: &Value) -> Self {
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        let client = api.clone().into_client();
        let name = format!("frozen-conditions-{ns}");
        let conds = |o: &str| {
            format!("(has({o}.status) && has({o}.status.conditions) ? {o}.status.conditions : [])")
        };
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } },
                    "resourceRules": [{
                        "apiGroups": ["kustomize.toolkit.fluxcd.io"], "apiVersions": ["*"],
                        "operations": ["UPDATE"], "resources": ["kustomizations/status"],
                    }],
                },
                "validations": [{
                    "expression": format!("{} == {}", conds("object"), conds("oldObject")),
                    "message": "conditions are frozen by the test",
                }],
            },
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "policyName": name, "validationActions": ["Deny"] },
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        // In force once a dry-run conditions change is denied (bounded).
        let dry = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        let start = std::time::Instant::now();
        while api
            .patch_status("apps", &dry, &Patch::Merge(probe))
            .await
            .is_ok()
        {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "the admission policy never came into force"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Self { client, name }
    }

    /// Deletes the binding and the policy.
    pub async fn remove(self) {
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        let dp = kube::api::DeleteParams::default();
        Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .delete(&self.name, &dp)
            .await
            .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(self.client)
            .delete(&self.name, &dp)
            .await
            .unwrap();
    }
}

/// Fact 3: the deferred patch attempts all three parts and aggregates the errors (runtime
/// `patch/patch.go:223-235`), so a failed conditions part does not stop
/// `lastHandledReconcileAt`. An admission policy of the test's namespace denies every status
/// write that changes conditions.
pub async fn fact_3_nonce_is_recorded_even_when_the_conditions_patch_fails(b: Backend) {
    let s = Setup::new(b, "f3c").await;
    s.create(&s.ks("apps", Workload::Plain, false, None)).await;
    assert_eq!(
        s.wait_settled("apps", Mark::default()).await,
        Outcome::Succeeded
    );
    // Another writer leaves Reconciling=True beside Ready=True: the next finalisation has a
    // conditions part (it drops Reconciling) and a status part (the nonce).
    let held = s.api.get("apps").await.unwrap();
    let mut conditions = status(&held)["conditions"].as_array().unwrap().clone();
    let drop_reconciling = json!({ "status": { "conditions": conditions.clone() } });
    conditions.push(
        json!({ "type": RECONCILING, "status": "True", "reason": "Progressing",
        "message": "left behind", "lastTransitionTime": "2026-01-01T00:00:00Z" }),
    );
    s.api
        .patch_status(
            "apps",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "conditions": conditions } })),
        )
        .await
        .unwrap();
    let policy = ConditionsFrozen::install(&s.api, &s.ns, &drop_reconciling).await;

    let m = s.mark();
    s.patch(
        "apps",
        json!({ "metadata": { "annotations": { backend::REQUESTED_AT: "n" } }, "spec": { "suspend": true } }),
    )
    .await;
    // The run's outcome differs by design (the model reports the error, the real controller
    // logs the suspended return before its deferred patch); the server state must not.
    s.wait_run_seeing("apps", "n", m).await;
    let held = s.api.get("apps").await.unwrap();
    assert_eq!(status(&held)["lastHandledReconcileAt"], json!("n"));
    assert_eq!(
        cond(&held, RECONCILING).unwrap().0,
        "True",
        "the conditions part was denied"
    );
    policy.remove().await;
}
