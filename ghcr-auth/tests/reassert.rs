//! Tier 2: Secret reassertion against the real kube-apiserver. Each test asserts what the server
//! holds afterwards (data, type, resourceVersion), not only the returned outcome.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ghcr_auth::BoxError;
use ghcr_auth::GhcrError;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::credential::{SECRET_KEY, SECRET_TYPE};
use ghcr_auth::plan::{Drift, Refusal, SecretTarget, TargetRole, holds};
use ghcr_auth::reassert::{Consumers, Reasserter, SecretOutcome, TargetSpec};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use secrecy::{ExposeSecret, SecretString};
use testkit::TestNs;

fn config(token: &str) -> DockerConfig {
    DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(token)).unwrap()
}

fn pull_secret(name: &str, cfg: &DockerConfig) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(cfg.render().expose_secret().as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

async fn create_ns(ns: &TestNs, name: &str, label: Option<(&str, &str)>) -> String {
    let name = format!("{}-{name}", ns.name);
    let labels = label.map(|(k, v)| BTreeMap::from([(k.to_string(), v.to_string())]));
    let obj = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels,
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(ns.client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
    name
}

async fn get(ns: &TestNs, namespace: &str, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(ns.client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()
}

fn spec(secret: &str, consumers: Vec<String>, root: Option<SecretTarget>) -> TargetSpec {
    let mut spec = TargetSpec::new(secret, Consumers::Namespaces(consumers));
    spec.root = root;
    spec
}

#[tokio::test]
async fn absent_secrets_are_created_consumers_first_root_last_and_hold_the_credential() {
    let ns = TestNs::new("ra-create").await.unwrap();
    let a = create_ns(&ns, "a", None).await;
    let b = create_ns(&ns, "b", None).await;
    let root = SecretTarget::new(&ns.name, "flux-ghcr");
    let cfg = config("token-create-1");
    let report = Reasserter::new(ns.client.clone())
        .reassert(
            &cfg,
            &spec("ghcr-auth", vec![a.clone(), b.clone()], Some(root.clone())),
        )
        .await
        .unwrap();
    assert!(report.is_complete(), "{report}");
    let roles: Vec<_> = report
        .results
        .iter()
        .map(|(r, t, _)| (*r, t.namespace.clone()))
        .collect();
    assert_eq!(
        roles,
        vec![
            (TargetRole::Consumer, a.clone()),
            (TargetRole::Consumer, b.clone()),
            (TargetRole::Root, ns.name.clone())
        ]
    );
    for (namespace, name) in [
        (&a, "ghcr-auth"),
        (&b, "ghcr-auth"),
        (&ns.name, "flux-ghcr"),
    ] {
        let s = get(&ns, namespace, name).await.expect("created");
        assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE));
        assert!(holds(&s, &cfg));
    }
    assert!(matches!(report.results[0].2, SecretOutcome::Created { .. }));
}

#[tokio::test]
async fn secret_already_holding_the_credential_is_not_written() {
    let ns = TestNs::new("ra-same").await.unwrap();
    let cfg = config("token-same-1");
    let before = ns
        .api::<Secret>()
        .create(&PostParams::default(), &pull_secret("pull", &cfg))
        .await
        .unwrap();
    let writes = Arc::new(AtomicUsize::new(0));
    let counter = writes.clone();
    let gate = move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok::<(), BoxError>(()) }
    };
    let outcome = Reasserter::new(ns.client.clone())
        .with_gate(gate)
        .reassert_one(&cfg, &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap();
    assert!(
        matches!(outcome, SecretOutcome::Unchanged { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        writes.load(Ordering::SeqCst),
        0,
        "the gate runs only before a write"
    );
    let after = get(&ns, &ns.name, "pull").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
}

#[tokio::test]
async fn stale_secret_is_patched_and_read_back_with_a_new_resource_version() {
    let ns = TestNs::new("ra-stale").await.unwrap();
    let old = config("token-old");
    let new = config("token-new");
    let mut seeded = pull_secret("pull", &old);
    seeded
        .data
        .as_mut()
        .unwrap()
        .insert("keep".into(), ByteString(b"me".to_vec()));
    let before = ns
        .api::<Secret>()
        .create(&PostParams::default(), &seeded)
        .await
        .unwrap();
    let outcome = Reasserter::new(ns.client.clone())
        .reassert_one(&new, &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap();
    let SecretOutcome::Updated {
        drift,
        resource_version,
    } = outcome
    else {
        panic!("expected Updated, got {outcome:?}")
    };
    assert_eq!(drift, Drift::DifferentCredential);
    let after = get(&ns, &ns.name, "pull").await.unwrap();
    assert!(holds(&after, &new));
    assert_ne!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(
        after.metadata.resource_version.as_deref(),
        Some(resource_version.as_str())
    );
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert_eq!(after.data.unwrap()["keep"].0, b"me");
}

#[tokio::test]
async fn writer_racing_between_read_and_patch_wins_and_is_not_overwritten() {
    let ns = TestNs::new("ra-race").await.unwrap();
    let theirs = config("token-theirs");
    ns.api::<Secret>()
        .create(
            &PostParams::default(),
            &pull_secret("pull", &config("token-old")),
        )
        .await
        .unwrap();
    let client = ns.client.clone();
    let namespace = ns.name.clone();
    let their_secret = pull_secret("pull", &theirs);
    let gate = move || {
        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let body = their_secret.clone();
        async move {
            api.patch("pull", &PatchParams::default(), &Patch::Merge(&body))
                .await?;
            Ok::<(), BoxError>(())
        }
    };
    let outcome = Reasserter::new(ns.client.clone())
        .with_gate(gate)
        .reassert_one(&config("token-ours"), &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap();
    assert_eq!(outcome, SecretOutcome::Moved);
    assert!(holds(&get(&ns, &ns.name, "pull").await.unwrap(), &theirs));
}

#[tokio::test]
async fn creator_racing_our_create_wins_and_is_not_overwritten() {
    let ns = TestNs::new("ra-crace").await.unwrap();
    let theirs = config("token-theirs");
    let api = ns.api::<Secret>();
    let their_secret = pull_secret("pull", &theirs);
    let gate = move || {
        let api = api.clone();
        let body = their_secret.clone();
        async move {
            api.create(&PostParams::default(), &body).await?;
            Ok::<(), BoxError>(())
        }
    };
    let outcome = Reasserter::new(ns.client.clone())
        .with_gate(gate)
        .reassert_one(&config("token-ours"), &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap();
    assert_eq!(outcome, SecretOutcome::Moved);
    assert!(holds(&get(&ns, &ns.name, "pull").await.unwrap(), &theirs));
}

#[tokio::test]
async fn secret_of_another_type_is_refused_and_left_untouched() {
    let ns = TestNs::new("ra-type").await.unwrap();
    let opaque = Secret {
        metadata: ObjectMeta {
            name: Some("pull".into()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([("x".to_string(), "y".to_string())])),
        ..Secret::default()
    };
    let before = ns
        .api::<Secret>()
        .create(&PostParams::default(), &opaque)
        .await
        .unwrap();
    let outcome = Reasserter::new(ns.client.clone())
        .reassert_one(&config("token-x"), &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        SecretOutcome::Refused(Refusal::WrongType {
            found: "Opaque".into()
        })
    );
    let after = get(&ns, &ns.name, "pull").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
}

#[tokio::test]
async fn failing_consumer_stops_the_run_before_the_root_is_written() {
    let ns = TestNs::new("ra-stop").await.unwrap();
    let a = create_ns(&ns, "a", None).await;
    let missing = format!("{}-missing", ns.name);
    let root = SecretTarget::new(&ns.name, "flux-ghcr");
    let report = Reasserter::new(ns.client.clone())
        .reassert(
            &config("token-stop"),
            &spec("ghcr-auth", vec![missing, a.clone()], Some(root)),
        )
        .await
        .unwrap();
    assert!(!report.is_complete());
    assert_eq!(report.results[0].2, SecretOutcome::NamespaceMissing);
    assert_eq!(report.results[1].2, SecretOutcome::NotAttempted);
    assert_eq!(report.results[2].2, SecretOutcome::NotAttempted);
    assert!(get(&ns, &a, "ghcr-auth").await.is_none());
    assert!(
        get(&ns, &ns.name, "flux-ghcr").await.is_none(),
        "root must not be written"
    );
}

#[tokio::test]
async fn failing_gate_stops_before_any_write() {
    let ns = TestNs::new("ra-gate").await.unwrap();
    let gate = || async { Err::<(), BoxError>("lease lost".into()) };
    let err = Reasserter::new(ns.client.clone())
        .with_gate(gate)
        .reassert_one(&config("token-gate"), &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap_err();
    assert!(matches!(err, GhcrError::Gate { .. }), "{err:?}");
    assert!(get(&ns, &ns.name, "pull").await.is_none());
}

#[tokio::test]
async fn consumers_by_label_selector_are_sorted_and_written() {
    let ns = TestNs::new("ra-sel").await.unwrap();
    let label = ("ghcr-auth-test", ns.name.as_str());
    let z = create_ns(&ns, "z", Some(label)).await;
    let m = create_ns(&ns, "m", Some(label)).await;
    create_ns(&ns, "unlabelled", None).await;
    let spec = TargetSpec::new(
        "ghcr-auth",
        Consumers::Selector(format!("ghcr-auth-test={}", ns.name)),
    );
    let cfg = config("token-sel");
    let report = Reasserter::new(ns.client.clone())
        .reassert(&cfg, &spec)
        .await
        .unwrap();
    let order: Vec<_> = report
        .results
        .iter()
        .map(|(_, t, _)| t.namespace.clone())
        .collect();
    assert_eq!(order, vec![m.clone(), z.clone()]);
    for namespace in [&m, &z] {
        assert!(holds(
            &get(&ns, namespace, "ghcr-auth").await.unwrap(),
            &cfg
        ));
    }
}

#[tokio::test]
async fn service_account_without_patch_gets_forbidden_and_secret_is_untouched() {
    let ns = TestNs::new("ra-rbac").await.unwrap();
    let before = ns
        .api::<Secret>()
        .create(
            &PostParams::default(),
            &pull_secret("pull", &config("token-old")),
        )
        .await
        .unwrap();
    let sa = ns
        .client_with_role("reader", vec![testkit::rule("", "secrets", &["get"])])
        .await
        .unwrap();
    let outcome = Reasserter::new(sa)
        .reassert_one(&config("token-new"), &SecretTarget::new(&ns.name, "pull"))
        .await
        .unwrap();
    assert_eq!(outcome, SecretOutcome::Forbidden { verb: "patch" });
    let after = get(&ns, &ns.name, "pull").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
}

#[tokio::test]
async fn lost_response_is_adopted_only_when_the_server_shows_our_content() {
    let ns = TestNs::new("ra-lost").await.unwrap();
    let ours = config("token-ours");
    let target = SecretTarget::new(&ns.name, "pull");
    let reasserter = Reasserter::new(ns.client.clone());
    let lost = || kube::Error::Service("connection reset (simulated)".into());
    // Nothing there: the write did not land, so the original error is returned.
    let err = reasserter
        .resolve_lost(&ours, &target, lost())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            GhcrError::Kube {
                verb: "writing",
                ..
            }
        ),
        "{err:?}"
    );
    // The write landed: adopt.
    ns.api::<Secret>()
        .create(&PostParams::default(), &pull_secret("pull", &ours))
        .await
        .unwrap();
    let adopted = reasserter
        .resolve_lost(&ours, &target, lost())
        .await
        .unwrap();
    assert!(
        matches!(adopted, SecretOutcome::Adopted { .. }),
        "{adopted:?}"
    );
    // Someone else's content: fail closed.
    let err = reasserter
        .resolve_lost(&config("token-other"), &target, lost())
        .await
        .unwrap_err();
    assert!(matches!(err, GhcrError::Kube { .. }));
}
