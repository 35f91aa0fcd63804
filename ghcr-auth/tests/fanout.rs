//! Tier 2: the concurrent fan-out of a reassertion against the real kube-apiserver (RBAC on):
//! bounded concurrency, the root written last and only after every consumer, and what a
//! failure in the middle of the batch leaves on the server.

use ghcr_auth::credential::DockerConfig;
use ghcr_auth::plan::{SecretTarget, TargetRole, holds};
use ghcr_auth::reassert::{Consumers, FANOUT_CONCURRENCY, Reasserter, SecretOutcome, TargetSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use secrecy::SecretString;
use testkit::TestNs;

/// Consumers of the failure test.
const CONSUMERS: usize = 48;
/// Where the forbidden namespace sits in the batch: early enough that, with one more write
/// in flight per success, the fan-out cannot have started every later one before it fails.
const FORBIDDEN_AT: usize = 12;

fn config(token: &str) -> DockerConfig {
    DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(token)).unwrap()
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

/// Creates `n` namespaces `<test ns>-c<i>` and returns their names in order.
async fn consumers(ns: &TestNs, n: usize) -> Vec<String> {
    let api = Api::<Namespace>::all(ns.client.clone());
    let names: Vec<String> = (0..n).map(|i| format!("{}-c{i:02}", ns.name)).collect();
    for name in &names {
        api.create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(name),
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    }
    names
}

/// Lets `ServiceAccount` `sa` of the test namespace get, create and patch Secrets in `namespace`.
async fn allow_secrets(ns: &TestNs, namespace: &str, sa: &str) {
    let role = Role {
        metadata: meta(sa),
        rules: Some(vec![testkit::rule(
            "",
            "secrets",
            &["get", "create", "patch"],
        )]),
    };
    Api::<Role>::namespaced(ns.client.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: meta(sa),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: sa.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa.into(),
            namespace: Some(ns.name.clone()),
            ..Subject::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(ns.client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

async fn get(client: &Client, namespace: &str, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()
}

/// etcd's revision of the write that left `s` as it is (kube-apiserver's resourceVersions
/// come from one counter, so they order writes).
fn revision(s: &Secret) -> u64 {
    s.metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn many_consumers_are_written_concurrently_and_the_root_after_all_of_them() {
    let ns = TestNs::new("fan-ok").await.unwrap();
    // More consumers than FANOUT_CONCURRENCY, so the limit is reached.
    let many = FANOUT_CONCURRENCY + 16;
    let names = consumers(&ns, many).await;
    let root = SecretTarget::new(&ns.name, "flux-ghcr");
    let cfg = config("token-fan");
    let spec =
        TargetSpec::new("pull", Consumers::Namespaces(names.clone())).with_root(root.clone());
    let report = Reasserter::new(ns.client.clone())
        .reassert(&cfg, &spec)
        .await
        .unwrap();
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.results.len(), many + 1);
    assert_eq!(report.results.last().unwrap().0, TargetRole::Root);
    let root_secret = get(&ns.client, &root.namespace, &root.name).await.unwrap();
    assert!(holds(&root_secret, &cfg));
    for name in &names {
        let s = get(&ns.client, name, "pull").await.unwrap();
        assert!(holds(&s, &cfg), "{name}");
        assert!(
            revision(&s) < revision(&root_secret),
            "the root was written before consumer {name}"
        );
    }
}

#[tokio::test]
async fn a_forbidden_namespace_mid_batch_stops_new_writes_and_the_root_is_never_written() {
    let ns = TestNs::new("fan-403").await.unwrap();
    let names = consumers(&ns, CONSUMERS).await;
    let sa = "fanout";
    let client = ns.service_account_client(sa).await.unwrap();
    // Rights everywhere the run writes — the root's namespace too — but the one in the middle.
    for (i, name) in names.iter().enumerate() {
        if i != FORBIDDEN_AT {
            allow_secrets(&ns, name, sa).await;
        }
    }
    allow_secrets(&ns, &ns.name, sa).await;
    for name in names.iter().chain([&ns.name]) {
        let want = name != &names[FORBIDDEN_AT];
        testkit::rbac::await_may(&client, "create", "", "secrets", name, want)
            .await
            .unwrap();
    }
    let root = SecretTarget::new(&ns.name, "flux-ghcr");
    let cfg = config("token-403");
    let spec =
        TargetSpec::new("pull", Consumers::Namespaces(names.clone())).with_root(root.clone());
    let report = Reasserter::new(client).reassert(&cfg, &spec).await.unwrap();

    assert!(!report.is_complete());
    let outcomes: Vec<&SecretOutcome> = report.results.iter().map(|(_, _, o)| o).collect();
    assert_eq!(
        *outcomes[FORBIDDEN_AT],
        SecretOutcome::Forbidden { verb: "get" }
    );
    // Everything before it was started before the failure was known, and finished.
    for (i, o) in outcomes[..FORBIDDEN_AT].iter().enumerate() {
        assert!(matches!(o, SecretOutcome::Created { .. }), "{i}: {o:?}");
    }
    // After it: only writes already in flight finished; nothing else was attempted.
    let after = &outcomes[FORBIDDEN_AT + 1..CONSUMERS];
    let finished = after
        .iter()
        .filter(|o| matches!(o, SecretOutcome::Created { .. }))
        .count();
    assert!(
        after.iter().all(|o| matches!(
            o,
            SecretOutcome::Created { .. } | SecretOutcome::NotAttempted
        )),
        "{after:?}"
    );
    assert!(
        finished < FANOUT_CONCURRENCY,
        "{finished} finished after the failure"
    );
    assert!(
        after.iter().any(|o| **o == SecretOutcome::NotAttempted),
        "the fan-out did not stop"
    );
    assert_eq!(*outcomes[CONSUMERS], SecretOutcome::NotAttempted);

    // The server holds exactly what the report says.
    for (i, name) in names.iter().enumerate() {
        let on_server = get(&ns.client, name, "pull").await;
        match outcomes[i] {
            SecretOutcome::Created { .. } => {
                assert!(holds(&on_server.unwrap(), &cfg), "{name}");
            }
            other => assert!(on_server.is_none(), "{name} ({other:?}) was written"),
        }
    }
    assert!(
        get(&ns.client, &root.namespace, &root.name).await.is_none(),
        "the root must never be written after a failed consumer"
    );
}
