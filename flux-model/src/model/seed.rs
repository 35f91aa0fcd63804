//! The tree most tests and the demo start from: a `flux-system` parent Kustomization whose Git
//! path holds an `infrastructure` and an `apps` child, the controller Deployment, and the
//! namespaces the children deploy into.

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::deployment::{DeploymentConfig, ensure_deployment};
use super::{
    FIELD_MANAGER, FluxModel, ModelConfig, ModelHandle, PARENT_NAME_LABEL, PARENT_NAMESPACE_LABEL,
};
use testkit::fixtures::kustomization_resource;

/// Name of the seeded parent Kustomization.
pub const PARENT: &str = "flux-system";
/// Names of the seeded children, in apply order.
pub const CHILDREN: [&str; 2] = ["infrastructure", "apps"];

/// What [`seed_tree`] created.
#[derive(Debug, Clone)]
pub struct SeededTree {
    /// Namespace holding the Kustomizations and the Deployment.
    pub namespace: String,
    /// The parent's Git manifests: one child Kustomization manifest per entry of [`CHILDREN`].
    pub git: Vec<Value>,
    /// Namespaces the children deploy into.
    pub consumer_namespaces: Vec<String>,
}

impl SeededTree {
    /// A model configuration for this tree: its namespace, the parent's Git manifests and the
    /// Deployment in the same namespace.
    #[must_use]
    pub fn model_config(&self) -> ModelConfig {
        ModelConfig::namespaced(&self.namespace)
            .with_git(PARENT, self.git.clone())
            .with_deployment(DeploymentConfig {
                create: false,
                ..DeploymentConfig::in_namespace(&self.namespace)
            })
    }
}

/// Seeds the tree in `ns` ([`seed_tree`]), starts the model over it with its configuration as
/// `tweak` changes it, and waits until the parent and every child have settled once: the
/// start of most tests.
///
/// # Errors
/// Seeding failed, or an object did not settle.
pub async fn start_seeded(
    client: &Client,
    ns: &str,
    tweak: impl FnOnce(ModelConfig) -> ModelConfig,
) -> anyhow::Result<ModelHandle> {
    let tree = seed_tree(client, ns).await?;
    let model = FluxModel::start(client.clone(), tweak(tree.model_config()));
    for name in std::iter::once(PARENT).chain(CHILDREN) {
        model.wait_settled(name, 0).await?;
    }
    Ok(model)
}

/// The Git manifest of child `name` of the seeded tree, targeting `target_namespace`.
#[must_use]
pub fn child_manifest(ns: &str, name: &str, target_namespace: &str) -> Value {
    let mut spec = json!({
        "interval": "10m",
        "path": format!("./{name}"),
        "prune": true,
        "suspend": false,
        "targetNamespace": target_namespace,
        "sourceRef": { "kind": "GitRepository", "name": PARENT },
    });
    if name == "apps" {
        spec["dependsOn"] = json!([{ "name": "infrastructure" }]);
    }
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": { "name": name, "namespace": ns },
        "spec": spec,
    })
}

/// Creates the seeded tree in existing namespace `ns` (objects that exist are left as they are,
/// children are server-side applied as the parent would).
///
/// # Errors
/// Any API error other than "already exists".
pub async fn seed_tree(client: &Client, ns: &str) -> anyhow::Result<SeededTree> {
    let consumer_namespaces: Vec<String> = CHILDREN
        .iter()
        .map(|c| {
            if ns == "flux-system" {
                (*c).to_string()
            } else {
                format!("{ns}-{c}")
            }
        })
        .collect();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in &consumer_namespaces {
        let obj = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        ignore_exists(namespaces.create(&PostParams::default(), &obj).await)?;
    }
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kustomization_resource());
    let parent: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": { "name": PARENT, "namespace": ns },
        "spec": {
            "interval": "10m",
            "path": "./clusters/local",
            "prune": true,
            "suspend": false,
            "sourceRef": { "kind": "GitRepository", "name": PARENT },
        },
    }))?;
    ignore_exists(api.create(&PostParams::default(), &parent).await)?;
    let git: Vec<Value> = CHILDREN
        .iter()
        .zip(&consumer_namespaces)
        .map(|(c, target)| child_manifest(ns, c, target))
        .collect();
    for manifest in &git {
        let mut m = manifest.clone();
        m["metadata"]["labels"] = json!({ PARENT_NAME_LABEL: PARENT, PARENT_NAMESPACE_LABEL: ns });
        let name = m["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if api.get_opt(&name).await?.is_none() {
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&m),
            )
            .await?;
        }
    }
    ensure_deployment(client, ns, 1).await?;
    Ok(SeededTree {
        namespace: ns.to_string(),
        git,
        consumer_namespaces,
    })
}

fn ignore_exists<T>(r: Result<T, kube::Error>) -> anyhow::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
