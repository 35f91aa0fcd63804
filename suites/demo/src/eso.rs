//! `cargo xtask demo --fanout eso`: the original tool's layout on the demo's plane, and the
//! read-back after the rotation.
//!
//! Layout (as docs/fanout.md describes it): the staging Secret `flux-system/variables-base`
//! (Opaque, a demo label, key `ghcr_dockerconfigjson` = base64 of the stale Docker config,
//! and a key of its own), the `PushSecret` `flux-system/seed-ghcr` pushing that key to the
//! store (Secrets of namespace `eso-store`, ESO's Kubernetes provider), and an `ExternalSecret`
//! `ghcr-auth` in each consumer namespace templating the consumer's
//! `kubernetes.io/dockerconfigjson` Secret. ESO itself runs beside the plane (xtask starts it
//! with controller class [`CLASS`]); its first sync puts the stale credential into the
//! consumers, as a cluster before a rotation looks.

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;
use testkit::eso;

use crate::{FLUX_NS, SECRET, wait_for};

/// The controller class of the demo's stores (xtask passes it to ESO).
pub const CLASS: &str = "flux-handoff-demo";
/// The consumer namespaces ESO serves in the demo.
pub const CONSUMERS: [&str; 2] = ["infrastructure", "apps"];
const STORE_NS: &str = "eso-store";
const STAGING: &str = "variables-base";
const PUSH: &str = "seed-ghcr";
const ACCOUNT: &str = "eso-store";
/// A key of the staging Secret that is not ours: it must survive the rotation.
const OTHER_KEY: &str = "cluster_name";

/// Installs ESO's CRDs (before ESO starts: it refuses to start without them) and creates the
/// layout (`kubeconfig` is the plane's, for the store's server and CA) with the stale
/// credential for registry `host` staged.
pub async fn seed(client: &Client, kubeconfig: &str, host: &str) -> anyhow::Result<()> {
    eso::install_crds(client).await?;
    create(
        &Api::<Namespace>::all(client.clone()),
        Namespace {
            metadata: meta(STORE_NS),
            ..Namespace::default()
        },
    )
    .await?;
    let stale = crate::stale_config(host).to_string();
    let staging = Secret {
        metadata: ObjectMeta {
            labels: Some([("flux-handoff.io/demo".to_string(), "gitops".to_string())].into()),
            ..meta(STAGING)
        },
        type_: Some("Opaque".into()),
        data: Some(
            [
                (
                    eso::STAGED_KEY.to_string(),
                    ByteString(base64_of(stale.as_bytes()).into_bytes()),
                ),
                (OTHER_KEY.to_string(), ByteString(b"demo".to_vec())),
            ]
            .into(),
        ),
        ..Secret::default()
    };
    create(&Api::<Secret>::namespaced(client.clone(), FLUX_NS), staging).await?;
    stores(client, kubeconfig).await?;
    eso::create_if_absent(client, eso::push_secret(FLUX_NS, PUSH, STAGING)).await?;
    for ns in CONSUMERS {
        eso::create_if_absent(client, eso::external_secret(ns, SECRET, eso::REMOTE_KEY)).await?;
    }
    println!(
        "setup: External Secrets layout: staging Secret {FLUX_NS}/{STAGING} key {} (stale), \
         PushSecret {FLUX_NS}/{PUSH} -> store {STORE_NS}, ExternalSecret {SECRET} in {}",
        eso::STAGED_KEY,
        CONSUMERS.join(", ")
    );
    Ok(())
}

/// Waits (bounded) until ESO's first sync put the stale credential into every consumer.
pub async fn synced(client: &Client, host: &str) -> anyhow::Result<()> {
    let stale = crate::stale_config(host);
    for ns in CONSUMERS {
        let secrets = Api::<Secret>::namespaced(client.clone(), ns);
        wait_for(&format!("ESO's first sync of Secret {ns}/{SECRET}"), || {
            let secrets = secrets.clone();
            let stale = stale.clone();
            async move {
                Ok(secrets
                    .get_opt(SECRET)
                    .await?
                    .is_some_and(|s| docker_config(&s).as_ref() == Some(&stale)))
            }
        })
        .await?;
    }
    println!(
        "setup: ESO synced the stale credential into {}",
        CONSUMERS.map(|ns| format!("{ns}/{SECRET}")).join(", ")
    );
    Ok(())
}

/// After the rotation: every consumer Secret (written by ESO, never by flux-handoff) and the
/// root hold a Docker config for `host` whose password is `token`, and the staging Secret kept
/// its type, label and other key. Prints names only.
pub async fn check(client: &Client, host: &str, token: &str) -> anyhow::Result<()> {
    for ns in CONSUMERS.iter().copied().chain([FLUX_NS]) {
        let s = Api::<Secret>::namespaced(client.clone(), ns)
            .get(SECRET)
            .await
            .with_context(|| format!("reading Secret {ns}/{SECRET}"))?;
        let password = docker_config(&s)
            .and_then(|c| c.pointer(&format!("/auths/{host}/password")).cloned())
            .and_then(|p| p.as_str().map(str::to_string));
        anyhow::ensure!(
            password.as_deref() == Some(token),
            "Secret {ns}/{SECRET} does not hold the rotated credential"
        );
    }
    let staging = Api::<Secret>::namespaced(client.clone(), FLUX_NS)
        .get(STAGING)
        .await?;
    let kept = staging.type_.as_deref() == Some("Opaque")
        && staging
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("flux-handoff.io/demo"))
        && staging
            .data
            .as_ref()
            .and_then(|d| d.get(OTHER_KEY))
            .is_some_and(|v| v.0 == b"demo");
    anyhow::ensure!(
        kept,
        "staging Secret {FLUX_NS}/{STAGING} lost its type, label or other key"
    );
    println!(
        "setup: read back: {} and the root {FLUX_NS}/{SECRET} hold the rotated credential; \
         {FLUX_NS}/{STAGING} kept its type, label and key {OTHER_KEY}",
        CONSUMERS.map(|ns| format!("{ns}/{SECRET}")).join(", ")
    );
    Ok(())
}

/// One `SecretStore` per namespace that uses the store, each as its own `ServiceAccount`
/// allowed to read and write the store namespace's Secrets.
async fn stores(client: &Client, kubeconfig: &str) -> anyhow::Result<()> {
    let (server, ca) = eso::server_and_ca_of(std::path::Path::new(kubeconfig))?;
    let mut subjects = Vec::new();
    for ns in CONSUMERS.iter().copied().chain([FLUX_NS]) {
        let account = ServiceAccount {
            metadata: meta(ACCOUNT),
            ..ServiceAccount::default()
        };
        create(&Api::namespaced(client.clone(), ns), account).await?;
        subjects.push(Subject {
            kind: "ServiceAccount".into(),
            name: ACCOUNT.into(),
            namespace: Some(ns.into()),
            ..Subject::default()
        });
        eso::create_if_absent(client, eso::store(ns, CLASS, STORE_NS, &server, &ca)).await?;
    }
    let verbs = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let role = Role {
        metadata: meta(ACCOUNT),
        rules: Some(vec![testkit::rule("", "secrets", &verbs)]),
    };
    create(&Api::namespaced(client.clone(), STORE_NS), role).await?;
    let binding = RoleBinding {
        metadata: meta(ACCOUNT),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: ACCOUNT.into(),
        },
        subjects: Some(subjects),
    };
    create(&Api::namespaced(client.clone(), STORE_NS), binding).await
}

/// Creates `obj`; one that exists already (a second `--keep` run) is kept.
async fn create<K>(api: &Api<K>, obj: K) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    K::DynamicType: Default,
{
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| {
            format!(
                "creating {} {}",
                K::kind(&K::DynamicType::default()),
                obj.meta().name.clone().unwrap_or_default()
            )
        }),
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

/// The parsed `.dockerconfigjson` of `s`.
fn docker_config(s: &Secret) -> Option<Value> {
    let raw = s.data.as_ref()?.get(".dockerconfigjson")?;
    serde_json::from_slice(&raw.0).ok()
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
