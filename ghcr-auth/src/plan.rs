//! The pure decision core of reassertion: given the Secret as read, what single write (if any)
//! makes it hold the desired credential, guarded by what was read.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use secrecy::{ExposeSecret, SecretString};
use serde_json::json;

use crate::credential::{DockerConfig, SECRET_KEY, SECRET_TYPE};

/// The annotation a written Secret carries: the `holder;epoch` of the Lease the write was made
/// under (see [`plan_stamped`]), so a Secret tells which handoff, at which fencing epoch, last
/// wrote it.
pub const REVISION_ANNOTATION: &str = "flux-handoff.io/revision";

/// One Secret to reassert.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretTarget {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl SecretTarget {
    /// A target by namespace and name.
    #[must_use]
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for SecretTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Which part of the rollout a target belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetRole {
    /// A consumer namespace's pull Secret: written first.
    Consumer,
    /// The Secret Flux itself pulls with: written last.
    Root,
}

/// Orders the targets of one reassertion: consumers in the given order (duplicates dropped),
/// then the root, which is never written twice even if it is also listed as a consumer.
#[must_use]
pub fn order_targets(
    consumers: &[SecretTarget],
    root: Option<&SecretTarget>,
) -> Vec<(TargetRole, SecretTarget)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for t in consumers {
        if Some(t) != root && seen.insert(t.clone()) {
            out.push((TargetRole::Consumer, t.clone()));
        }
    }
    if let Some(root) = root {
        out.push((TargetRole::Root, root.clone()));
    }
    out
}

/// Why an existing Secret differs from the desired credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Drift {
    /// The Secret has no `.dockerconfigjson` key.
    MissingKey,
    /// The key's value is not a valid Docker config.
    Unparseable,
    /// A valid Docker config, but a different credential.
    DifferentCredential,
}

/// Why a Secret is not written at all.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The Secret exists with another `type` (immutable in Kubernetes; replacing it would mean
    /// deleting someone else's object).
    WrongType {
        /// The type found.
        found: String,
    },
    /// The Secret is marked `immutable: true`.
    Immutable,
}

/// The one write a target needs. Debug never shows the Secret's data.
#[derive(Clone)]
#[non_exhaustive]
pub enum SecretPlan {
    /// The Secret is absent: create it (a create is a CAS on absence: 409 if someone was first).
    Create(Box<Secret>),
    /// It already holds the desired credential (compared as normalised JSON): write nothing.
    Unchanged {
        /// The resourceVersion read.
        resource_version: String,
    },
    /// Patch it: `test` uid, resourceVersion and type, then set the key.
    Replace {
        /// Why it differs.
        drift: Drift,
        /// The JSON Patch to send.
        patch: json_patch::Patch,
    },
    /// Do not write it.
    Refuse(Refusal),
}

impl fmt::Debug for SecretPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Create(_) => f.write_str("Create(..)"),
            Self::Unchanged { resource_version } => f
                .debug_struct("Unchanged")
                .field("resource_version", resource_version)
                .finish(),
            Self::Replace { drift, .. } => f
                .debug_struct("Replace")
                .field("drift", drift)
                .finish_non_exhaustive(),
            Self::Refuse(r) => f.debug_tuple("Refuse").field(r).finish(),
        }
    }
}

/// Decides the write for `target`, given the Secret as read (`None` = 404).
///
/// # Guarantees
/// Pure. A `Replace` patch starts with `test` operations on uid, resourceVersion and type, so
/// it applies only to exactly the object that was read. `Unchanged` is returned whenever the
/// stored Docker config is semantically equal to `desired`, whatever its formatting.
#[must_use]
pub fn plan(
    target: &SecretTarget,
    desired: &DockerConfig,
    observed: Option<&Secret>,
) -> SecretPlan {
    plan_stamped(target, desired, observed, None)
}

/// [`plan`], with every write also setting [`REVISION_ANNOTATION`] to `revision` (the
/// `holder;epoch` of the Lease the write is made under). A Secret that already holds the
/// credential is still not written.
#[must_use]
pub fn plan_stamped(
    target: &SecretTarget,
    desired: &DockerConfig,
    observed: Option<&Secret>,
    revision: Option<&str>,
) -> SecretPlan {
    let Some(secret) = observed else {
        let mut created = desired_secret(target, desired);
        if let Some(r) = revision {
            created.metadata.annotations = Some(BTreeMap::from([(
                REVISION_ANNOTATION.to_string(),
                r.to_string(),
            )]));
        }
        return SecretPlan::Create(Box::new(created));
    };
    let found_type = secret.type_.clone().unwrap_or_else(|| "Opaque".to_string());
    if found_type != SECRET_TYPE {
        return SecretPlan::Refuse(Refusal::WrongType { found: found_type });
    }
    if secret.immutable == Some(true) {
        return SecretPlan::Refuse(Refusal::Immutable);
    }
    let drift = match stored_config(secret) {
        Stored::Missing => Drift::MissingKey,
        Stored::Unparseable => Drift::Unparseable,
        Stored::Config(stored) if stored == *desired => {
            return SecretPlan::Unchanged {
                resource_version: secret.metadata.resource_version.clone().unwrap_or_default(),
            };
        }
        Stored::Config(_) => Drift::DifferentCredential,
    };
    SecretPlan::Replace {
        drift,
        patch: replace_patch(secret, desired, revision),
    }
}

/// Whether `secret` holds exactly `desired` (normalised comparison), for read-back checks.
#[must_use]
pub fn holds(secret: &Secret, desired: &DockerConfig) -> bool {
    secret.type_.as_deref() == Some(SECRET_TYPE)
        && matches!(stored_config(secret), Stored::Config(c) if c == *desired)
}

/// The Secret a `Create` sends.
#[must_use]
pub fn desired_secret(target: &SecretTarget, desired: &DockerConfig) -> Secret {
    let rendered = desired.render();
    Secret {
        metadata: ObjectMeta {
            name: Some(target.name.clone()),
            namespace: Some(target.namespace.clone()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.to_string()),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_string(),
            ByteString(rendered.expose_secret().as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

enum Stored {
    Missing,
    Unparseable,
    Config(DockerConfig),
}

fn stored_config(secret: &Secret) -> Stored {
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(SECRET_KEY)) else {
        return Stored::Missing;
    };
    let Ok(text) = std::str::from_utf8(&bytes.0) else {
        return Stored::Unparseable;
    };
    let text = SecretString::from(text);
    DockerConfig::parse(text.expose_secret()).map_or(Stored::Unparseable, Stored::Config)
}

fn replace_patch(
    secret: &Secret,
    desired: &DockerConfig,
    revision: Option<&str>,
) -> json_patch::Patch {
    let rendered = desired.render();
    let encoded = STANDARD.encode(rendered.expose_secret());
    let mut ops = vec![
        json!({ "op": "test", "path": "/metadata/uid", "value": secret.metadata.uid }),
        json!({
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": secret.metadata.resource_version,
        }),
        json!({ "op": "test", "path": "/type", "value": SECRET_TYPE }),
    ];
    if secret.data.is_none() {
        ops.push(json!({ "op": "add", "path": "/data", "value": {} }));
    }
    ops.push(json!({ "op": "add", "path": "/data/.dockerconfigjson", "value": encoded }));
    if let Some(r) = revision {
        if secret.metadata.annotations.is_none() {
            ops.push(json!({ "op": "add", "path": "/metadata/annotations", "value": {} }));
        }
        ops.push(json!({
            "op": "add",
            "path": format!("/metadata/annotations/{}", REVISION_ANNOTATION.replace('/', "~1")),
            "value": r,
        }));
    }
    serde_json::from_value(serde_json::Value::Array(ops))
        .expect("the reassertion patch is a well-formed JSON Patch")
}
