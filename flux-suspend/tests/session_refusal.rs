//! Typed refusals against the real API server: a foreign `flux suspend` and another holder's
//! fence come back as different [`Refusal`] variants, told apart without reading text, and
//! neither session changes anything.

mod common;

use std::time::Duration;

use common::{OWNER_KEY, PARENT, TARGET, annotation, suspended};
use flux_fence::mark::MarkAt;
use flux_model::model::{ModelHandle, start_seeded};
use flux_suspend::Refusal;
use flux_suspend::object::{api, get_json, kustomization};
use flux_suspend::{Cancel, Session, SessionError, SessionOptions, TargetSpec};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use testkit::TestNs;

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

    /// Starts a session over the target; it must be refused before any write.
    async fn refused(&self) -> (String, Refusal) {
        let mut o =
            SessionOptions::new(vec![TargetSpec::new(kustomization(&self.ns.name, TARGET))]);
        o.lease.namespace.clone_from(&self.ns.name);
        o.interval = Duration::from_millis(100);
        o.timeout = Duration::from_secs(30);
        match Session::start(self.ns.client.clone(), o, Cancel::new()).await {
            Err(e @ SessionError::Refused { .. }) => {
                assert!(e.changed_nothing());
                let SessionError::Refused { object, why } = e else {
                    unreachable!()
                };
                (object.to_string(), why)
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Merge-patches the target as `manager`.
    async fn patch_target(&self, manager: &str, patch: Value) {
        let target = kustomization(&self.ns.name, TARGET);
        let params = PatchParams {
            field_manager: Some(manager.into()),
            ..PatchParams::default()
        };
        api(&self.ns.client, &target)
            .patch(TARGET, &params, &Patch::Merge(patch))
            .await
            .unwrap();
    }

    async fn get(&self, name: &str) -> Value {
        get_json(&self.ns.client, &kustomization(&self.ns.name, name))
            .await
            .unwrap()
    }

    /// The Lease is free (never taken, or released).
    async fn lease_free(&self) -> bool {
        self.ns
            .api::<Lease>()
            .get_opt("flux-handoff")
            .await
            .unwrap()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .is_none_or(|h| h.is_empty())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusal_foreign_suspend_names_its_field_manager() {
    let t = Tree::new("refusal-suspend").await;
    // A person's `flux suspend`: the field manager is the client's.
    t.patch_target("flux-person", json!({ "spec": { "suspend": true } }))
        .await;
    let before = t.get(TARGET).await;
    let (object, why) = t.refused().await;
    assert!(object.ends_with(TARGET), "{object}");
    assert_eq!(
        why,
        Refusal::MarkTaken {
            at: MarkAt::Field("/spec/suspend".into()),
            field_manager: Some("flux-person".into()),
        }
    );
    assert!(!why.is_fence() && !why.is_lease());
    // The text is the Display, byte for byte as before.
    assert_eq!(
        why.to_string(),
        "field /spec/suspend already set by someone else"
    );
    // What the server holds afterwards: untouched, no fence, the Lease free.
    let after = t.get(TARGET).await;
    // (Not the resourceVersion: the controller model writes status to a suspended object.)
    assert_eq!(after["spec"], before["spec"]);
    assert_eq!(
        after["metadata"]["annotations"],
        before["metadata"]["annotations"]
    );
    assert_eq!(annotation(&after, OWNER_KEY), None);
    assert_eq!(annotation(&t.get(PARENT).await, OWNER_KEY), None);
    assert!(!suspended(&t.get(PARENT).await));
    assert!(t.lease_free().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusal_another_holders_fence_is_fenced_by_not_a_suspend() {
    let t = Tree::new("refusal-fenced").await;
    t.patch_target(
        "other-handoff",
        json!({ "metadata": { "annotations": { OWNER_KEY: "someone-else;7" } } }),
    )
    .await;
    let (object, why) = t.refused().await;
    assert!(object.ends_with(TARGET), "{object}");
    assert_eq!(
        why,
        Refusal::FencedBy {
            holder: "someone-else;7".into()
        }
    );
    assert!(why.is_fence());
    assert_eq!(why.to_string(), "fenced by someone-else;7");
    let after = t.get(TARGET).await;
    assert_eq!(annotation(&after, OWNER_KEY), Some("someone-else;7"));
    assert!(!suspended(&after));
    assert!(t.lease_free().await);
}
