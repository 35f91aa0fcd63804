//! `eso_fanout_` (and the `fanout_complete_` case that needs ESO's CRDs) against the real
//! External Secrets Operator v0.16.2, built from Go modules, on a control plane of its own
//! (testkit `eso`). The route: staged key → `PushSecret` → store (Secrets of a store namespace,
//! ESO's Kubernetes provider) → an `ExternalSecret` per consumer → consumer Secrets equal → root
//! last. Each test asserts what the server holds afterwards.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::credential::{SECRET_KEY, SECRET_TYPE};
use ghcr_auth::fanout::{EsoRoute, Route};
use ghcr_auth::plan::{SecretTarget, holds};
use ghcr_auth::reassert::{Consumers, Reasserter, TargetSpec};
use ghcr_auth::route::FanoutRun;
use ghcr_auth::stage::{KeyTarget, key_holds};
use ghcr_auth::{ErrorClass, FlowError, Progress};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, PostParams};
use secrecy::{ExposeSecret, SecretString};
use testkit::eso::{self, Eso};

fn config(token: &str) -> DockerConfig {
    DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(token)).unwrap()
}

#[derive(Default)]
struct Recorded(Vec<String>);

impl Progress for Recorded {
    fn phase(&mut self, line: &str) {
        self.0.push(line.to_string());
    }
    fn fact(&mut self, _: &str, _: serde_json::Value) {}
}

/// The original tool's layout under prefix `p`: `<p>-flux` (staging, root, `PushSecret`),
/// `<p>-store`, and consumers `<p>-apps`, `<p>-web`.
struct Layout {
    client: Client,
    p: String,
}

impl Layout {
    fn ns(&self, part: &str) -> String {
        format!("{}-{part}", self.p)
    }

    async fn new(stale: &DockerConfig) -> Self {
        let client = eso::client().await.unwrap();
        eso::install_crds(&client).await.unwrap();
        let layout = Self {
            client,
            p: format!("eso-{}", testkit::random_suffix(6)),
        };
        for part in ["flux", "store", "apps", "web"] {
            let ns = Namespace {
                metadata: meta(&layout.ns(part)),
                ..Namespace::default()
            };
            Api::<Namespace>::all(layout.client.clone())
                .create(&PostParams::default(), &ns)
                .await
                .unwrap();
        }
        let flux = layout.ns("flux");
        let secrets = Api::<Secret>::namespaced(layout.client.clone(), &flux);
        let staged = STANDARD.encode(stale.render().expose_secret());
        let staging = Secret {
            metadata: ObjectMeta {
                labels: Some(BTreeMap::from([("gitops".into(), "yes".into())])),
                ..meta("variables-base")
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([
                (eso::STAGED_KEY.to_string(), ByteString(staged.into_bytes())),
                ("cluster_name".to_string(), ByteString(b"prod".to_vec())),
            ])),
            ..Secret::default()
        };
        secrets
            .create(&PostParams::default(), &staging)
            .await
            .unwrap();
        let root = Secret {
            metadata: meta("ghcr-auth"),
            type_: Some(SECRET_TYPE.into()),
            data: Some(BTreeMap::from([(
                SECRET_KEY.to_string(),
                ByteString(stale.render().expose_secret().as_bytes().to_vec()),
            )])),
            ..Secret::default()
        };
        secrets.create(&PostParams::default(), &root).await.unwrap();
        layout
    }

    /// The whole layout with ESO running and `stale` synced into both consumers.
    async fn synced(stale: &DockerConfig) -> (Self, Eso) {
        let layout = Self::new(stale).await;
        let eso = Eso::start(&layout.p).await.unwrap();
        layout.eso_objects(&eso.class, Some(eso::REMOTE_KEY)).await;
        layout.first_sync("apps", stale).await;
        layout.first_sync("web", stale).await;
        (layout, eso)
    }

    /// Stores (one per namespace, each as its own `ServiceAccount`), the `PushSecret` and the
    /// consumers' `ExternalSecrets` (`web` reading `web_key`), for controller class `class`.
    async fn eso_objects(&self, class: &str, web_key: Option<&str>) {
        let (server, ca) = eso::server_and_ca().unwrap();
        let store_ns = self.ns("store");
        let mut subjects = Vec::new();
        for part in ["flux", "apps", "web"] {
            let ns = self.ns(part);
            Api::<ServiceAccount>::namespaced(self.client.clone(), &ns)
                .create(
                    &PostParams::default(),
                    &ServiceAccount {
                        metadata: meta("eso-store"),
                        ..ServiceAccount::default()
                    },
                )
                .await
                .unwrap();
            subjects.push(Subject {
                kind: "ServiceAccount".into(),
                name: "eso-store".into(),
                namespace: Some(ns.clone()),
                ..Subject::default()
            });
            eso::create(
                &self.client,
                eso::store(&ns, class, &store_ns, &server, &ca),
            )
            .await
            .unwrap();
        }
        let verbs = [
            "get", "list", "watch", "create", "update", "patch", "delete",
        ];
        Api::<Role>::namespaced(self.client.clone(), &store_ns)
            .create(
                &PostParams::default(),
                &Role {
                    metadata: meta("eso-store"),
                    rules: Some(vec![testkit::rule("", "secrets", &verbs)]),
                },
            )
            .await
            .unwrap();
        Api::<RoleBinding>::namespaced(self.client.clone(), &store_ns)
            .create(
                &PostParams::default(),
                &RoleBinding {
                    metadata: meta("eso-store"),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Role".into(),
                        name: "eso-store".into(),
                    },
                    subjects: Some(subjects),
                },
            )
            .await
            .unwrap();
        let flux = self.ns("flux");
        eso::create(
            &self.client,
            eso::push_secret(&flux, "seed-ghcr", "variables-base"),
        )
        .await
        .unwrap();
        eso::create(
            &self.client,
            eso::external_secret(&self.ns("apps"), "ghcr-auth", eso::REMOTE_KEY),
        )
        .await
        .unwrap();
        if let Some(key) = web_key {
            eso::create(
                &self.client,
                eso::external_secret(&self.ns("web"), "ghcr-auth", key),
            )
            .await
            .unwrap();
        }
    }

    fn route(&self) -> Route {
        let flux = self.ns("flux");
        Route::new(
            TargetSpec::new(String::new(), Consumers::Namespaces(Vec::new()))
                .with_root(SecretTarget::new(&flux, "ghcr-auth")),
        )
        .with_keys(vec![
            KeyTarget::parse(&format!("{flux}/variables-base:{}", eso::STAGED_KEY), "x").unwrap(),
        ])
        .with_eso(EsoRoute::new(
            SecretTarget::new(&flux, "seed-ghcr"),
            "ghcr-auth",
            Consumers::Namespaces(vec![self.ns("apps"), self.ns("web")]),
        ))
    }

    async fn secret(&self, part: &str, name: &str) -> Option<Secret> {
        Api::<Secret>::namespaced(self.client.clone(), &self.ns(part))
            .get_opt(name)
            .await
            .unwrap()
    }

    /// Waits (bounded) until ESO's first sync put `cfg` into consumer `part`'s Secret.
    async fn first_sync(&self, part: &str, cfg: &DockerConfig) {
        let start = Instant::now();
        while !self
            .secret(part, "ghcr-auth")
            .await
            .is_some_and(|s| holds(&s, cfg))
        {
            assert!(
                start.elapsed() < Duration::from_mins(1),
                "ESO's first sync of {part}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn run(&self, cfg: &DockerConfig, deadline: Duration) -> FanoutRun {
        FanoutRun::new(
            cfg.clone(),
            self.route(),
            Vec::new(),
            deadline,
            Duration::from_millis(250),
        )
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

fn rv(s: &Secret) -> u64 {
    s.metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn eso_fanout_every_consumer_converges_before_the_root_is_written() {
    let stale = config("stale-token");
    let (layout, eso) = Layout::synced(&stale).await;

    let fresh = config("fresh-token");
    let mut progress = Recorded::default();
    let result = layout
        .run(&fresh, Duration::from_mins(1))
        .run(
            &Reasserter::new(layout.client.clone()),
            &layout.client,
            &mut progress,
        )
        .await;
    assert!(
        result.is_ok(),
        "{:?}\n{:?}\nESO log:\n{}",
        result,
        progress.0,
        eso.log()
    );

    let root = layout.secret("flux", "ghcr-auth").await.unwrap();
    let staging = layout.secret("flux", "variables-base").await.unwrap();
    assert!(holds(&root, &fresh));
    assert!(key_holds(&staging, eso::STAGED_KEY, &fresh));
    assert_eq!(staging.data.as_ref().unwrap()["cluster_name"].0, b"prod");
    assert_eq!(staging.type_.as_deref(), Some("Opaque"));
    for part in ["apps", "web"] {
        let consumer = layout.secret(part, "ghcr-auth").await.unwrap();
        assert!(
            holds(&consumer, &fresh),
            "{part} holds the fresh credential"
        );
        assert!(
            rv(&consumer) < rv(&root),
            "{part} converged before the root was written"
        );
        // The force-sync request is a nonce, never credential material.
        let es = Api::<DynamicObject>::namespaced_with(
            layout.client.clone(),
            &layout.ns(part),
            &eso::resource("ExternalSecret"),
        )
        .get("ghcr-auth")
        .await
        .unwrap();
        let nonce = &es.metadata.annotations.unwrap()["force-sync"];
        assert!(
            nonce.starts_with("ghcr-auth-") && !nonce.contains("fresh"),
            "{nonce}"
        );
    }
    assert!(
        progress
            .0
            .iter()
            .any(|l| l.starts_with("pulled: 2 ExternalSecret(s) synced")),
        "{:?}",
        progress.0
    );
    // No form of the credential in our output, on the ESO objects' metadata and status or in
    // any Event of the run's namespaces (ESO's included).
    let mut seen = progress.0.join("\n");
    for (part, kind, name) in [
        ("flux", "PushSecret", "seed-ghcr"),
        ("apps", "ExternalSecret", "ghcr-auth"),
        ("web", "ExternalSecret", "ghcr-auth"),
    ] {
        let obj = Api::<DynamicObject>::namespaced_with(
            layout.client.clone(),
            &layout.ns(part),
            &eso::resource(kind),
        )
        .get(name)
        .await
        .unwrap();
        seen.push_str(&serde_json::to_string(&obj.metadata.annotations).unwrap());
        seen.push_str(&serde_json::to_string(&obj.data["status"]).unwrap());
    }
    for part in ["flux", "store", "apps", "web"] {
        let events = Api::<Event>::namespaced(layout.client.clone(), &layout.ns(part))
            .list(&ListParams::default())
            .await
            .unwrap();
        for e in events {
            seen.push_str(e.reason.as_deref().unwrap_or_default());
            seen.push_str(e.message.as_deref().unwrap_or_default());
        }
    }
    assert!(seen.contains("synced"), "the check reads something: {seen}");
    for form in fresh.secret_forms() {
        assert!(
            !seen.contains(form.expose_secret()),
            "a credential form leaked"
        );
    }
}

#[tokio::test]
async fn eso_fanout_a_consumer_that_cannot_converge_leaves_the_root_unchanged_and_names_it() {
    let stale = config("stale-token");
    let layout = Layout::new(&stale).await;
    let eso = Eso::start(&layout.p).await.unwrap();
    // `web` reads a store key that does not exist: ESO reports SecretSyncedError.
    layout.eso_objects(&eso.class, Some("no-such-seed")).await;
    layout.first_sync("apps", &stale).await;
    let root_before = layout.secret("flux", "ghcr-auth").await.unwrap();

    let fresh = config("fresh-token");
    let mut progress = Recorded::default();
    let err = layout
        .run(&fresh, Duration::from_secs(15))
        .run(
            &Reasserter::new(layout.client.clone()),
            &layout.client,
            &mut progress,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, FlowError::NotConverged { .. }), "{err}");
    assert_eq!(err.class(), ErrorClass::Timeout);
    let line = err.to_string();
    let web = layout.ns("web");
    assert!(
        line.contains(&format!("{web}/ghcr-auth (SecretSyncedError)")),
        "{line}"
    );
    assert!(
        !line.contains(&layout.ns("apps")),
        "only the stale consumer is named: {line}"
    );
    let root = layout.secret("flux", "ghcr-auth").await.unwrap();
    assert_eq!(rv(&root), rv(&root_before), "the root is unchanged");
    assert!(holds(&root, &stale));
    // The consumer that could converge did, through ESO.
    assert!(holds(
        &layout.secret("apps", "ghcr-auth").await.unwrap(),
        &fresh
    ));
    assert!(
        progress
            .0
            .iter()
            .any(|l| l.starts_with("waiting for ExternalSecret")),
        "{:?}",
        progress.0
    );
}

#[tokio::test]
async fn fanout_complete_a_missing_external_secret_refuses_before_any_write() {
    let stale = config("stale-token");
    let layout = Layout::new(&stale).await;
    // No ESO process is needed: the refusal comes before any write or sync request.
    layout.eso_objects("no-controller", None).await;
    let root = layout.secret("flux", "ghcr-auth").await.unwrap();
    let staging = layout.secret("flux", "variables-base").await.unwrap();
    let err = layout
        .run(&config("fresh"), Duration::from_secs(5))
        .run(
            &Reasserter::new(layout.client.clone()),
            &layout.client,
            &mut Recorded::default(),
        )
        .await
        .unwrap_err();
    let line = err.to_string();
    assert!(matches!(err, FlowError::FanoutIncomplete(_)), "{line}");
    assert!(
        line.contains(&format!(
            "missing ExternalSecret {}/ghcr-auth",
            layout.ns("web")
        )),
        "{line}"
    );
    assert!(!line.contains("CRD"), "{line}");
    assert_eq!(
        rv(&layout.secret("flux", "ghcr-auth").await.unwrap()),
        rv(&root)
    );
    assert_eq!(
        rv(&layout.secret("flux", "variables-base").await.unwrap()),
        rv(&staging)
    );
    let ps = Api::<DynamicObject>::namespaced_with(
        layout.client.clone(),
        &layout.ns("flux"),
        &eso::resource("PushSecret"),
    )
    .get("seed-ghcr")
    .await
    .unwrap();
    assert!(
        ps.metadata
            .annotations
            .is_none_or(|a| !a.contains_key("force-sync"))
    );
}

/// A client of the ESO plane authenticated as `ServiceAccount` `ns/name` (a bound token).
async fn service_account_client(admin: &Client, ns: &str, name: &str) -> Client {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec!["https://kubernetes.default.svc".into()]),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(name, &PostParams::default(), &req)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    let mut config = testkit::config_from(&eso::kubeconfig().unwrap())
        .await
        .unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..kube::config::AuthInfo::default()
    };
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn eso_fanout_the_whole_route_runs_as_a_service_account_with_only_the_generated_rights() {
    use handoff_app::rights::{self, EsoRights, Ghcr, Plan, Subject};
    use testkit::rbac::Access;
    let stale = config("stale-token");
    let (layout, eso) = Layout::synced(&stale).await;

    // What `flux-handoff rbac` prints for this layout (its plan, as the CLI builds it).
    let flux = layout.ns("flux");
    let consumers = vec![layout.ns("apps"), layout.ns("web")];
    let plan = Plan {
        lease: (flux.clone(), "flux-handoff".into()),
        ghcr: Some(Ghcr {
            root: Some((flux.clone(), "ghcr-auth".into())),
            staged: vec![(flux.clone(), "variables-base".into())],
            eso: Some(EsoRights {
                push_secret: (flux.clone(), "seed-ghcr".into()),
                external_secret: "ghcr-auth".into(),
                consumers: consumers.clone(),
            }),
            ..Ghcr::default()
        }),
        ..Plan::default()
    };
    let subject = Subject {
        namespace: flux.clone(),
        name: "fanout".into(),
    };
    let docs = testkit::rbac::parse(&rights::manifests(&plan, &subject, &[])).unwrap();
    testkit::rbac::apply(&layout.client, &flux, &docs)
        .await
        .unwrap();
    let sa = service_account_client(&layout.client, &flux, "fanout").await;
    for ns in &consumers {
        // Granted by name: asked by name, once the authorizer has seen the new Role.
        let patch_es = Access::new("patch", "external-secrets.io", "externalsecrets")
            .namespace(ns)
            .name("ghcr-auth");
        let start = Instant::now();
        while !testkit::rbac::may_on(&sa, &patch_es).await.unwrap() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "never granted: {patch_es:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let read_secret = Access::new("get", "", "secrets")
            .namespace(ns)
            .name("ghcr-auth");
        assert!(testkit::rbac::may_on(&sa, &read_secret).await.unwrap());
        // The consumers' Secrets are ESO's: the account may read them, never write them.
        assert!(
            !testkit::rbac::may(&sa, "patch", "", "secrets", ns)
                .await
                .unwrap()
        );
        assert!(
            !testkit::rbac::may(&sa, "create", "", "secrets", ns)
                .await
                .unwrap()
        );
    }

    let fresh = config("fresh-token");
    let mut progress = Recorded::default();
    let result = layout
        .run(&fresh, Duration::from_mins(1))
        .run(&Reasserter::new(sa.clone()), &sa, &mut progress)
        .await;
    assert!(
        result.is_ok(),
        "{:?}\n{:?}\nESO log:\n{}",
        result,
        progress.0,
        eso.log()
    );
    assert!(holds(
        &layout.secret("flux", "ghcr-auth").await.unwrap(),
        &fresh
    ));
    for part in ["apps", "web"] {
        assert!(holds(
            &layout.secret(part, "ghcr-auth").await.unwrap(),
            &fresh
        ));
    }
}
