//! Test support for flux-handoff (not published).
//!
//! 1. [`plane`] finds the one local control plane a test run shares: the one `cargo xtask ci`
//!    started (`FLUX_HANDOFF_KUBECONFIG`), or — for a bare `cargo nextest run` — the shared one
//!    of `cargo xtask cluster up --detach`, started on first use under a lock file.
//! 2. [`TestNs::new`] hands each test an admin [`kube::Client`] and a fresh namespace, so tests
//!    never see each other's objects.
//! 3. [`TestNs::service_account_client`] gives a client that authenticates as a `ServiceAccount`,
//!    for RBAC tests.
//! 4. [`fixtures`] builds Flux objects with builders that read like sentences.
//! 5. [`registry`] runs a real OCI registry on loopback (the `flux-model` crate's source
//!    model pulls from it).
//! 6. [`real_flux`] seeds and finds the control plane with the real Flux controllers.
//! 7. [`signal`] signals a process or a process group (rustix, no `kill` binary).
//! 8. [`eso`] builds, finds and runs the real External Secrets Operator on a plane of its own.

pub mod eso;
pub mod fenced;
pub mod fixtures;
pub mod github_stub;
pub mod plane;
pub mod rbac;
pub mod real_flux;
pub mod registry;
pub mod signal;

use std::sync::Once;

use anyhow::Context;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Installs the ring crypto provider once per process (kube and rustls need exactly one).
pub fn install_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The admin client configuration of the shared control plane.
pub async fn admin_config() -> anyhow::Result<Config> {
    config_from(&plane::kubeconfig()?).await
}

/// The client configuration in kubeconfig file `path` (its current context).
pub async fn config_from(path: &std::path::Path) -> anyhow::Result<Config> {
    install_crypto();
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}

/// A client from kubeconfig file `path`, or the inferred configuration without one (for the
/// testkit binaries).
pub async fn client_for(path: Option<&str>) -> anyhow::Result<Client> {
    install_crypto();
    let config = match path {
        Some(p) => config_from(std::path::Path::new(p)).await?,
        None => Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// One test's namespace on the shared control plane, with an admin client.
#[derive(Clone)]
pub struct TestNs {
    pub client: Client,
    pub name: String,
    config: Config,
}

impl std::fmt::Debug for TestNs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNs")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TestNs {
    /// Creates a fresh namespace named `<prefix>-<random>`.
    pub async fn new(prefix: &str) -> anyhow::Result<Self> {
        let config = admin_config().await?;
        let client = Client::try_from(config.clone())?;
        let name = format!("{prefix}-{}", random_suffix(6));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(Self {
            client,
            name,
            config,
        })
    }

    /// A typed API for namespaced resources of this test.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The holder of this namespace's `flux-handoff` Lease; `None` when it is free or absent.
    ///
    /// # Panics
    /// When the Lease cannot be read (a failed read must not pass for a free Lease).
    pub async fn lease_holder(&self) -> Option<String> {
        let lease = self
            .api::<k8s_openapi::api::coordination::v1::Lease>()
            .get_opt("flux-handoff")
            .await
            .expect("reading the Lease")?;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    }

    /// Creates `ServiceAccount` `sa`, a Role named after it with exactly `rules`, and the
    /// binding between them in this namespace, and returns a client authenticated as `sa`.
    pub async fn client_with_role(
        &self,
        sa: &str,
        rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
    ) -> anyhow::Result<Client> {
        use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
        let meta = || ObjectMeta {
            name: Some(sa.to_string()),
            ..ObjectMeta::default()
        };
        let role = Role {
            metadata: meta(),
            rules: Some(rules),
        };
        self.api::<Role>()
            .create(&PostParams::default(), &role)
            .await?;
        let binding = RoleBinding {
            metadata: meta(),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: sa.to_string(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: sa.to_string(),
                namespace: Some(self.name.clone()),
                ..Subject::default()
            }]),
        };
        self.api::<RoleBinding>()
            .create(&PostParams::default(), &binding)
            .await?;
        self.service_account_client(sa).await
    }

    /// Creates `ServiceAccount` `name` in this namespace and returns a client authenticated as it
    /// with a short-lived token from the `TokenRequest` API. It has no permissions until the
    /// test binds some.
    pub async fn service_account_client(&self, name: &str) -> anyhow::Result<Client> {
        let token = self.service_account_token(name).await?;
        let mut config = self.config.clone();
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.into()),
            ..kube::config::AuthInfo::default()
        };
        Ok(Client::try_from(config)?)
    }

    /// A fresh bound token (one hour) of `ServiceAccount` `name` in this namespace, created
    /// first when absent.
    pub async fn service_account_token(&self, name: &str) -> anyhow::Result<String> {
        let sas: Api<ServiceAccount> = self.api();
        if sas.get_opt(name).await?.is_none() {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    ..ObjectMeta::default()
                },
                ..ServiceAccount::default()
            };
            sas.create(&PostParams::default(), &sa).await?;
        }
        let req = TokenRequest {
            spec: Some(k8s_openapi::api::authentication::v1::TokenRequestSpec {
                audiences: Some(vec!["https://kubernetes.default.svc".to_string()]),
                expiration_seconds: Some(3600),
                ..Default::default()
            }),
            ..TokenRequest::default()
        };
        sas.create_token_request(name, &PostParams::default(), &req)
            .await?
            .status
            .context("TokenRequest without status")?
            .token
            .context("TokenRequest without token")
    }
}

/// Writes to `dest` a copy of kubeconfig `base` whose every context authenticates with
/// `token` (user `user`).
///
/// # Errors
/// `base` cannot be read, or `dest` cannot be written.
pub fn kubeconfig_with_token(
    base: &std::path::Path,
    user: &str,
    token: &str,
    dest: &std::path::Path,
) -> anyhow::Result<()> {
    let mut kc = serde_json::to_value(Kubeconfig::read_from(base)?)?;
    kc["users"] = serde_json::json!([{ "name": user, "user": { "token": token } }]);
    for ctx in kc["contexts"].as_array_mut().into_iter().flatten() {
        ctx["context"]["user"] = serde_json::json!(user);
    }
    std::fs::write(dest, serde_json::to_string(&kc)?)?;
    Ok(())
}

/// An RBAC rule: `verbs` on `resource` of API group `group` (`""` for the core group).
#[must_use]
pub fn rule(group: &str, resource: &str, verbs: &[&str]) -> k8s_openapi::api::rbac::v1::PolicyRule {
    k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| (*v).to_string()).collect(),
        ..Default::default()
    }
}

/// A random lowercase alphanumeric suffix for names.
#[must_use]
pub fn random_suffix(len: usize) -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}
