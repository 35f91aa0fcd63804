//! A credential staged in one data key of any Secret (`namespace/name:key`), the way the
//! original tool stages `flux-system/variables-base` key `ghcr_dockerconfigjson` for Flux post-build
//! substitution and for External Secrets to push on.
//!
//! The key's value is the **base64 text** of the Docker config JSON (so the Secret's `data`
//! holds base64 of that text, as Kubernetes encodes every value). Only that key is written, by a
//! JSON Patch that `test`s uid, resourceVersion and the key's old value (or its absence): the
//! Secret's type, labels, annotations, owner references and other keys are never in the patch,
//! and a concurrent writer makes it fail (409/422) instead of being overwritten.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flux_fence::keys::is_dns_label;
use flux_fence::keys::is_dns_subdomain;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch};
use secrecy::{ExposeSecret, SecretString};
use serde_json::json;
use tracing::{info, warn};

use crate::credential::DockerConfig;
use crate::error::GhcrError;
use crate::plan::SecretTarget;
use crate::reassert::WriteGate;

/// One data key of one Secret.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub struct KeyTarget {
    /// The Secret.
    pub secret: SecretTarget,
    /// The data key.
    pub key: String,
}

impl KeyTarget {
    /// Parses `namespace/name:key` (a bare `name:key` takes `default_ns`). The key must be a
    /// valid Secret data key: `[-._a-zA-Z0-9]+`, at most 253 characters.
    #[must_use]
    pub fn parse(text: &str, default_ns: &str) -> Option<Self> {
        let (secret, key) = text.rsplit_once(':')?;
        let (ns, name) = secret.split_once('/').unwrap_or((default_ns, secret));
        let key_ok = !key.is_empty()
            && key.len() <= 253
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        (is_dns_label(ns) && is_dns_subdomain(name) && key_ok).then(|| Self {
            secret: SecretTarget::new(ns, name),
            key: key.to_string(),
        })
    }
}

impl fmt::Display for KeyTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.secret, self.key)
    }
}

/// The one write a staged key needs. Debug never shows a value.
#[derive(Clone)]
#[non_exhaustive]
pub enum KeyPlan {
    /// The key already holds the credential (normalised comparison): write nothing.
    Unchanged,
    /// Patch the key alone, guarded by `test`s on uid, resourceVersion and the old value.
    Patch(json_patch::Patch),
    /// The Secret does not exist: a staged key lives in a Secret someone else owns (Flux
    /// reads it), so it is never created here.
    SecretMissing,
    /// The Secret is `immutable: true`.
    Immutable,
}

impl fmt::Debug for KeyPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unchanged => "Unchanged",
            Self::Patch(_) => "Patch(..)",
            Self::SecretMissing => "SecretMissing",
            Self::Immutable => "Immutable",
        })
    }
}

/// The staged form of `config`: the base64 text of its rendered Docker config JSON.
#[must_use]
pub fn staged_value(config: &DockerConfig) -> SecretString {
    SecretString::from(STANDARD.encode(config.render().expose_secret()))
}

/// Whether the key's stored bytes are a staged form of `desired`: base64 text (surrounding
/// whitespace ignored) of a Docker config equal to it (normalised JSON comparison).
#[must_use]
pub fn key_holds(secret: &Secret, key: &str, desired: &DockerConfig) -> bool {
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(key)) else {
        return false;
    };
    let Ok(text) = std::str::from_utf8(&bytes.0) else {
        return false;
    };
    let Ok(decoded) = STANDARD.decode(text.trim()) else {
        return false;
    };
    let Ok(json) = String::from_utf8(decoded) else {
        return false;
    };
    let json = SecretString::from(json);
    DockerConfig::parse(json.expose_secret()).is_ok_and(|c| c == *desired)
}

/// Decides the write for `target` given the Secret as read (`None` = 404). Pure.
///
/// # Guarantees
/// A `Patch` holds only `test`s (uid, resourceVersion, the key's old value or its absence) and
/// one `add` of `/data/<key>` (plus `/data` itself when the Secret has none): nothing else of the
/// Secret can change through it.
#[must_use]
pub fn plan_key(target: &KeyTarget, desired: &DockerConfig, observed: Option<&Secret>) -> KeyPlan {
    let Some(secret) = observed else {
        return KeyPlan::SecretMissing;
    };
    if secret.immutable == Some(true) {
        return KeyPlan::Immutable;
    }
    if key_holds(secret, &target.key, desired) {
        return KeyPlan::Unchanged;
    }
    let pointer = format!("/data/{}", target.key.replace('~', "~0").replace('/', "~1"));
    let old = secret.data.as_ref().and_then(|d| d.get(&target.key));
    let mut ops = vec![
        json!({ "op": "test", "path": "/metadata/uid", "value": secret.metadata.uid }),
        json!({
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": secret.metadata.resource_version,
        }),
    ];
    match (&secret.data, old) {
        (None, _) => ops.push(json!({ "op": "add", "path": "/data", "value": {} })),
        (Some(_), Some(old)) => {
            ops.push(json!({ "op": "test", "path": pointer, "value": STANDARD.encode(&old.0) }));
        }
        // Absent key: the resourceVersion test already pins the whole object.
        (Some(_), None) => {}
    }
    let value = STANDARD.encode(staged_value(desired).expose_secret());
    ops.push(json!({ "op": "add", "path": pointer, "value": value }));
    KeyPlan::Patch(
        serde_json::from_value(serde_json::Value::Array(ops))
            .expect("the staging patch is a well-formed JSON Patch"),
    )
}

/// What happened to one staged key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a staged key that was not written is a value"]
#[non_exhaustive]
pub enum KeyOutcome {
    /// Patched; the server's answer holds the credential in the key.
    Updated {
        /// resourceVersion after the write.
        resource_version: String,
    },
    /// Already held the credential; nothing written.
    Unchanged,
    /// Changed by someone else between our read and our write (409/422/404): nothing was
    /// overwritten.
    Moved,
    /// The Secret does not exist (never created here).
    SecretMissing,
    /// The Secret is immutable.
    Immutable,
    /// Forbidden for our identity (403) to `verb`.
    Forbidden {
        /// The refused verb.
        verb: &'static str,
    },
    /// The server's answer does not show the credential in the key.
    ReadBackDiffers,
}

impl KeyOutcome {
    /// Whether the key now holds the credential.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        matches!(self, Self::Updated { .. } | Self::Unchanged)
    }

    /// A fixed word for logs and facts.
    #[must_use]
    pub fn word(&self) -> &'static str {
        match self {
            Self::Updated { .. } => "updated",
            Self::Unchanged => "unchanged",
            Self::Moved => "moved",
            Self::SecretMissing => "secret_missing",
            Self::Immutable => "immutable",
            Self::Forbidden { .. } => "forbidden",
            Self::ReadBackDiffers => "read_back_differs",
        }
    }
}

impl fmt::Display for KeyOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Forbidden { verb } => write!(f, "forbidden to {verb}"),
            Self::Moved => f.write_str("moved (changed by another writer; not overwritten)"),
            other => f.write_str(&other.word().replace('_', " ")),
        }
    }
}

/// Stages `config` into `target`: read, [`plan_key`], `gate`, one CAS patch, judged from the
/// server's answer to it.
///
/// # Errors
/// [`GhcrError::Gate`] when the gate refuses; [`GhcrError::Kube`] for an unexpected API error.
pub async fn stage_key(
    client: &Client,
    gate: &dyn WriteGate,
    config: &DockerConfig,
    target: &KeyTarget,
) -> Result<KeyOutcome, GhcrError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &target.secret.namespace);
    let observed = match api.get_opt(&target.secret.name).await {
        Ok(o) => o,
        Err(kube::Error::Api(s)) if s.code == 403 => {
            return Ok(KeyOutcome::Forbidden { verb: "get" });
        }
        Err(source) => {
            return Err(GhcrError::Kube {
                verb: "reading",
                what: format!("Secret {}", target.secret),
                source,
            });
        }
    };
    let read_uid = observed.as_ref().and_then(|s| s.metadata.uid.clone());
    let patch = match plan_key(target, config, observed.as_ref()) {
        KeyPlan::Unchanged => return Ok(KeyOutcome::Unchanged),
        KeyPlan::SecretMissing => return Ok(KeyOutcome::SecretMissing),
        KeyPlan::Immutable => return Ok(KeyOutcome::Immutable),
        KeyPlan::Patch(p) => p,
    };
    gate.check().await.map_err(|source| GhcrError::Gate {
        namespace: target.secret.namespace.clone(),
        name: target.secret.name.clone(),
        source,
    })?;
    let result = api
        .patch(
            &target.secret.name,
            &flux_fence::api::patch_params(),
            &Patch::Json::<()>(patch),
        )
        .await;
    let outcome = match result {
        Ok(written) => {
            let same = written.metadata.uid == read_uid;
            if same && key_holds(&written, &target.key, config) {
                KeyOutcome::Updated {
                    resource_version: written.metadata.resource_version.unwrap_or_default(),
                }
            } else {
                KeyOutcome::ReadBackDiffers
            }
        }
        Err(kube::Error::Api(s)) => match s.code {
            404 | 409 | 422 => KeyOutcome::Moved,
            403 => KeyOutcome::Forbidden { verb: "patch" },
            _ => {
                return Err(GhcrError::Kube {
                    verb: "patching",
                    what: format!("Secret {}", target.secret),
                    source: kube::Error::Api(s),
                });
            }
        },
        Err(lost) => {
            warn!(target = %target, "staging write response lost; re-reading to decide");
            match api.get_opt(&target.secret.name).await {
                Ok(Some(s)) if key_holds(&s, &target.key, config) => KeyOutcome::Updated {
                    resource_version: s.metadata.resource_version.unwrap_or_default(),
                },
                _ => {
                    return Err(GhcrError::Kube {
                        verb: "patching",
                        what: format!("Secret {}", target.secret),
                        source: lost,
                    });
                }
            }
        }
    };
    info!(target = %target, outcome = outcome.word(), "staged key");
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn config(password: &str) -> DockerConfig {
        DockerConfig::from_token("ghcr.io", "bot", SecretString::from(password.to_string()))
            .unwrap()
    }

    fn secret(data: Option<BTreeMap<String, ByteString>>) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("variables-base".into()),
                namespace: Some("flux-system".into()),
                uid: Some("u1".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data,
            ..Secret::default()
        }
    }

    fn target() -> KeyTarget {
        KeyTarget::parse("flux-system/variables-base:ghcr_dockerconfigjson", "x").unwrap()
    }

    #[test]
    fn stage_key_targets_parse_namespace_name_and_key() {
        let t = target();
        assert_eq!(t.secret, SecretTarget::new("flux-system", "variables-base"));
        assert_eq!(t.key, "ghcr_dockerconfigjson");
        assert_eq!(
            t.to_string(),
            "flux-system/variables-base:ghcr_dockerconfigjson"
        );
        let bare = KeyTarget::parse("vars:k", "apps").unwrap();
        assert_eq!(bare.secret, SecretTarget::new("apps", "vars"));
        for bad in [
            "flux-system/vars",
            "flux-system/vars:",
            "Bad/vars:k",
            "ns/vars:k/x",
            ":k",
        ] {
            assert!(KeyTarget::parse(bad, "d").is_none(), "{bad}");
        }
    }

    #[test]
    fn stage_key_the_patch_tests_the_old_value_and_touches_only_the_key() {
        let old = BTreeMap::from([
            (
                "ghcr_dockerconfigjson".to_string(),
                ByteString(b"b2xk".to_vec()),
            ),
            ("cluster_name".to_string(), ByteString(b"prod".to_vec())),
        ]);
        let KeyPlan::Patch(patch) = plan_key(&target(), &config("new"), Some(&secret(Some(old))))
        else {
            panic!("expected a patch");
        };
        let ops = serde_json::to_value(&patch).unwrap();
        let paths: Vec<(&str, &str)> = ops
            .as_array()
            .unwrap()
            .iter()
            .map(|o| (o["op"].as_str().unwrap(), o["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            paths,
            [
                ("test", "/metadata/uid"),
                ("test", "/metadata/resourceVersion"),
                ("test", "/data/ghcr_dockerconfigjson"),
                ("add", "/data/ghcr_dockerconfigjson"),
            ]
        );
        assert_eq!(ops[2]["value"], STANDARD.encode(b"b2xk"));
    }

    #[test]
    fn stage_key_holding_the_credential_is_unchanged_and_a_missing_secret_is_not_created() {
        let staged = staged_value(&config("p"));
        let data = BTreeMap::from([(
            "ghcr_dockerconfigjson".to_string(),
            ByteString(format!("{}\n", staged.expose_secret()).into_bytes()),
        )]);
        let s = secret(Some(data));
        assert!(matches!(
            plan_key(&target(), &config("p"), Some(&s)),
            KeyPlan::Unchanged
        ));
        assert!(matches!(
            plan_key(&target(), &config("other"), Some(&s)),
            KeyPlan::Patch(_)
        ));
        assert!(matches!(
            plan_key(&target(), &config("p"), None),
            KeyPlan::SecretMissing
        ));
        let mut frozen = secret(None);
        frozen.immutable = Some(true);
        assert!(matches!(
            plan_key(&target(), &config("p"), Some(&frozen)),
            KeyPlan::Immutable
        ));
        let KeyPlan::Patch(p) = plan_key(&target(), &config("p"), Some(&secret(None))) else {
            panic!("expected a patch");
        };
        assert_eq!(serde_json::to_value(&p).unwrap()[2]["path"], "/data");
    }
}
