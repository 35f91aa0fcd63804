//! Settings from two layers (a caller's flags over its config file) resolved into what the other
//! modules take: the credential input, the Secrets to reassert and the Flux sources to prove.
//! Pure, before any I/O: a bad input is an [`InputError`] naming a field, never a value.

use flux_fence::keys::is_dns_label;
use flux_fence::keys::is_dns_subdomain;
use std::path::PathBuf;

use serde::Deserialize;

use crate::error::GhcrError;
use crate::fanout::{EsoRoute, Route};
use crate::image::ImageRef;
use crate::input::{CredentialFormat, CredentialSource};
use crate::plan::SecretTarget;
use crate::reassert::{Consumers, TargetSpec};
use crate::registry::is_loopback_host;
use crate::source::SourceRef;
use crate::stage::KeyTarget;

/// One layer of GHCR settings: a caller's flags, or its config file's `[ghcr]` table (the
/// field names are the table's keys). Unset is `None` or empty; the resolvers put the flags
/// layer over the file layer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct GhcrSettings {
    /// Username paired with a bare token; without one the credential is a Docker config JSON.
    pub username: Option<String>,
    /// Read the credential from this environment variable.
    pub credential_env: Option<String>,
    /// Read the credential from this file.
    pub credential_file: Option<PathBuf>,
    /// `Some(true)`: read the credential from standard input.
    pub credential_stdin: Option<bool>,
    /// Images to prove the credential against.
    #[serde(default)]
    pub images: Vec<String>,
    /// Loopback registry `host:port`s reached over plain HTTP (test registries only).
    #[serde(default)]
    pub insecure_http_hosts: Vec<String>,
    /// `Some(true)`: also prove the registry refuses a wrong password.
    pub negative_check: Option<bool>,
    /// The pull Secret's name in every consumer namespace.
    pub secret_name: Option<String>,
    /// Consumer namespaces, in write order.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Consumer namespaces by label selector.
    pub namespace_selector: Option<String>,
    /// The Secret Flux itself pulls with, `[namespace/]name`.
    pub root_secret: Option<String>,
    /// Flux sources to prove, `[oci/|helm/]namespace/name`.
    #[serde(default)]
    pub sources: Vec<String>,
    /// Data keys to stage the credential in, `namespace/name:key` (value: base64 of the Docker
    /// config), e.g. `flux-system/variables-base:ghcr_dockerconfigjson`.
    #[serde(default)]
    pub secret_keys: Vec<String>,
    /// The External Secrets `PushSecret` that pushes a staged key, `[namespace/]name`.
    pub push_secret: Option<String>,
    /// The `ExternalSecret`'s name in every consumer namespace (the consumers are then pulled
    /// through ESO, never written directly).
    pub external_secret: Option<String>,
    /// `Some(true)`: bootstrap; an incomplete fan-out runs root, staging, root, unpaused.
    pub allow_incomplete_fanout: Option<bool>,
}

/// The resolved credential inputs of [`credential_input`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CredentialInput {
    /// Where the credential is read from.
    pub source: CredentialSource,
    /// How its text is understood.
    pub format: CredentialFormat,
    /// The images that prove it (at least one).
    pub images: Vec<ImageRef>,
    /// Whether loopback registries may be reached over plain HTTP.
    pub allow_insecure_loopback: bool,
    /// Whether a wrong password must be refused too.
    pub negative_check: bool,
}

/// A setting that cannot be used; nothing was read or requested. The message is one line that
/// names the flag or `[ghcr]` key, never a credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// More than one credential source in one layer.
    #[error(
        "config: [ghcr] sets more than one of credential_env, credential_file, credential_stdin"
    )]
    SeveralSources,
    /// No credential source in either layer.
    #[error(
        "no credential source: pass --credential-env VAR, --credential-file PATH or \
         --credential-stdin (or set one in [ghcr])"
    )]
    NoSource,
    /// The credential variable's name is empty or holds `=`.
    #[error("credential_env must be an environment variable name")]
    BadVariable,
    /// No image in either layer.
    #[error("no image to prove the credential against: pass --image or set [ghcr].images")]
    NoImage,
    /// An image reference does not parse ([`GhcrError::InvalidImageRef`]).
    #[error(transparent)]
    Image(GhcrError),
    /// The username is empty or holds `:` or a control character.
    #[error("username must be non-empty without `:` or control characters")]
    BadUsername,
    /// A bare token with images on several registries.
    #[error(
        "a bare token (--username) is for one registry, but the images name several; pass a \
         Docker config instead"
    )]
    TokenForSeveralRegistries,
    /// A plain-HTTP host that is not a loopback address.
    #[error(
        "insecure HTTP host {0:?} is not a loopback address (plain HTTP is for local test \
         registries only)"
    )]
    NotLoopback(String),
    /// Both a namespace list and a selector in one layer.
    #[error("config: [ghcr] sets both namespaces and namespace_selector; choose one")]
    SeveralConsumerKinds,
    /// A consumer namespace that is not a DNS label.
    #[error("--namespace-list: every entry must be a namespace name")]
    BadNamespace,
    /// An empty namespace selector.
    #[error("--namespace-selector must not be empty")]
    EmptySelector,
    /// A namespace selector that does not parse ([`crate::selector::validate`]).
    #[error("--namespace-selector: {0}")]
    BadSelector(String),
    /// Consumer namespaces without a Secret name.
    #[error(
        "no Secret name for the consumer namespaces: pass --secret-name or set [ghcr].secret_name"
    )]
    NoSecretName,
    /// A root Secret that is not `[namespace/]name`.
    #[error("--root-secret: {0:?} is not a valid [namespace/]name")]
    BadRootSecret(String),
    /// Neither consumers nor a root Secret.
    #[error(
        "nothing to reassert: pass --namespace-list, --namespace-selector or --root-secret (or \
         set them in [ghcr])"
    )]
    NothingToReassert,
    /// A staged key that is not `namespace/name:key`.
    #[error("--secret-key {0:?}: expected namespace/name:key")]
    BadSecretKey(String),
    /// A `PushSecret` that is not `[namespace/]name`.
    #[error("--push-secret: {0:?} is not a valid [namespace/]name")]
    BadPushSecret(String),
    /// An `ExternalSecret` name that is not a DNS subdomain.
    #[error("--external-secret: {0:?} is not a valid name")]
    BadExternalSecret(String),
    /// Consumers named both for direct writes and for External Secrets.
    #[error(
        "--secret-name and --external-secret both set: consumers get their Secret either \
         directly or through External Secrets; choose one"
    )]
    SeveralRoutes,
    /// Part of the External Secrets route without the rest.
    #[error(
        "the External Secrets route needs --external-secret, --push-secret, a --secret-key for \
         the PushSecret to read, and consumer namespaces; missing {0}"
    )]
    PartialEsoRoute(&'static str),
    /// A source that is not `[oci/|helm/]namespace/name`.
    #[error("--source {0:?}: expected [oci/|helm/]namespace/name")]
    BadSource(String),
}

/// Resolves where the credential comes from, how it is understood and which images prove it:
/// each setting from `flags`, else from `file`.
///
/// # Errors
/// An [`InputError`]: no or several sources, no image, an image that does not parse, a bad
/// username, a bare token for images on several registries, a non-loopback plain-HTTP host.
pub fn credential_input(
    flags: &GhcrSettings,
    file: &GhcrSettings,
) -> Result<CredentialInput, InputError> {
    let source = match source_of(flags, false)? {
        Some(source) => source,
        None => source_of(file, true)?.ok_or(InputError::NoSource)?,
    };
    if let CredentialSource::Env(var) = &source
        && (var.is_empty() || var.contains('='))
    {
        return Err(InputError::BadVariable);
    }
    let images = over(&flags.images, &file.images)
        .iter()
        .map(|text| text.parse::<ImageRef>().map_err(InputError::Image))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(first) = images.first() else {
        return Err(InputError::NoImage);
    };
    let format = match flags.username.clone().or_else(|| file.username.clone()) {
        None => CredentialFormat::DockerConfig,
        Some(u) if u.is_empty() || u.contains(':') || u.chars().any(char::is_control) => {
            return Err(InputError::BadUsername);
        }
        Some(username) => {
            let registry = first.registry().to_string();
            if images.iter().any(|i| i.registry() != registry) {
                return Err(InputError::TokenForSeveralRegistries);
            }
            CredentialFormat::Token { registry, username }
        }
    };
    let insecure = over(&flags.insecure_http_hosts, &file.insecure_http_hosts);
    if let Some(bad) = insecure.iter().find(|h| !is_loopback_host(h)) {
        return Err(InputError::NotLoopback(bad.clone()));
    }
    Ok(CredentialInput {
        source,
        format,
        images,
        allow_insecure_loopback: !insecure.is_empty(),
        negative_check: flags.negative_check == Some(true) || file.negative_check == Some(true),
    })
}

/// The credential source a layer names, if any. The flags layer takes the first of env, file
/// and stdin (a command line parser makes them exclusive); the file layer must name one.
fn source_of(layer: &GhcrSettings, is_file: bool) -> Result<Option<CredentialSource>, InputError> {
    let stdin = layer.credential_stdin == Some(true);
    let set = [
        layer.credential_env.is_some(),
        layer.credential_file.is_some(),
        stdin,
    ];
    if is_file && set.iter().filter(|s| **s).count() > 1 {
        return Err(InputError::SeveralSources);
    }
    Ok(match (&layer.credential_env, &layer.credential_file) {
        (Some(var), _) => Some(CredentialSource::Env(var.clone())),
        (None, Some(path)) => Some(CredentialSource::File(path.clone())),
        (None, None) if stdin => Some(CredentialSource::Stdin),
        (None, None) => None,
    })
}

/// `flags` unless empty, else `file`.
fn over<'a, T>(flags: &'a [T], file: &'a [T]) -> &'a [T] {
    if flags.is_empty() { file } else { flags }
}

/// Resolves the Secrets to reassert: consumer namespaces (a list or a selector) with one Secret
/// name, and the root Secret (a bare name takes `default_ns`).
///
/// # Errors
/// An [`InputError`]: a list and a selector in one layer, a namespace that is not a DNS label,
/// a selector that does not parse, consumers without a Secret name, a bad root Secret, or
/// nothing to reassert.
pub fn secret_spec(
    flags: &GhcrSettings,
    file: &GhcrSettings,
    default_ns: &str,
) -> Result<TargetSpec, InputError> {
    let consumers = match consumers_of(flags, false)? {
        Some(consumers) => consumers,
        None => consumers_of(file, true)?.unwrap_or(Consumers::Namespaces(Vec::new())),
    };
    match &consumers {
        Consumers::Namespaces(list) if list.iter().any(|n| !is_dns_label(n)) => {
            return Err(InputError::BadNamespace);
        }
        Consumers::Selector(s) if s.trim().is_empty() => return Err(InputError::EmptySelector),
        Consumers::Selector(s) => crate::selector::validate(s).map_err(InputError::BadSelector)?,
        Consumers::Namespaces(_) => {}
    }
    let secret_name = flags
        .secret_name
        .clone()
        .or_else(|| file.secret_name.clone())
        .unwrap_or_default();
    let has_consumers = !matches!(&consumers, Consumers::Namespaces(l) if l.is_empty());
    if has_consumers && secret_name.is_empty() {
        return Err(InputError::NoSecretName);
    }
    let root = match flags.root_secret.as_ref().or(file.root_secret.as_ref()) {
        Some(text) => Some(
            split_ref(text, default_ns).ok_or_else(|| InputError::BadRootSecret(text.clone()))?,
        ),
        None => None,
    };
    if !has_consumers && root.is_none() {
        return Err(InputError::NothingToReassert);
    }
    Ok(TargetSpec {
        secret_name,
        consumers,
        root,
    })
}

/// Resolves the whole route: direct consumers or External Secrets consumers, staged keys, the
/// `PushSecret` and the root (see [`crate::fanout::Route`]); each setting from `flags`, else
/// from `file`.
///
/// # Errors
/// An [`InputError`]: as [`secret_spec`], plus a bad `--secret-key`, `--push-secret` or
/// `--external-secret`, direct and ESO consumers at once, or a partial ESO route.
pub fn route_spec(
    flags: &GhcrSettings,
    file: &GhcrSettings,
    default_ns: &str,
) -> Result<Route, InputError> {
    let pick = |f: &Option<String>, g: &Option<String>| f.clone().or_else(|| g.clone());
    let external = pick(&flags.external_secret, &file.external_secret);
    let push = pick(&flags.push_secret, &file.push_secret);
    let keys = over(&flags.secret_keys, &file.secret_keys)
        .iter()
        .map(|t| KeyTarget::parse(t, default_ns).ok_or_else(|| InputError::BadSecretKey(t.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    let allow_incomplete =
        flags.allow_incomplete_fanout == Some(true) || file.allow_incomplete_fanout == Some(true);
    let Some(external) = external else {
        if push.is_some() {
            return Err(InputError::PartialEsoRoute("--external-secret"));
        }
        let direct = match secret_spec(flags, file, default_ns) {
            Err(InputError::NothingToReassert) if !keys.is_empty() => TargetSpec {
                secret_name: String::new(),
                consumers: Consumers::Namespaces(Vec::new()),
                root: None,
            },
            other => other?,
        };
        return Ok(Route {
            direct,
            keys,
            eso: None,
            allow_incomplete,
        });
    };
    if flags.secret_name.is_some() || file.secret_name.is_some() {
        return Err(InputError::SeveralRoutes);
    }
    if !is_dns_subdomain(&external) {
        return Err(InputError::BadExternalSecret(external));
    }
    let push = push.ok_or(InputError::PartialEsoRoute("--push-secret"))?;
    let push_secret =
        split_ref(&push, default_ns).ok_or_else(|| InputError::BadPushSecret(push.clone()))?;
    if keys.is_empty() {
        return Err(InputError::PartialEsoRoute("--secret-key"));
    }
    // The consumers and root as for direct writes, under a placeholder Secret name.
    let mut flags_named = flags.clone();
    flags_named.secret_name = Some(external.clone());
    let spec = secret_spec(&flags_named, file, default_ns).map_err(|e| match e {
        InputError::NothingToReassert => InputError::PartialEsoRoute("consumer namespaces"),
        e => e,
    })?;
    if matches!(&spec.consumers, Consumers::Namespaces(l) if l.is_empty()) {
        return Err(InputError::PartialEsoRoute("consumer namespaces"));
    }
    Ok(Route {
        direct: TargetSpec {
            secret_name: String::new(),
            consumers: Consumers::Namespaces(Vec::new()),
            root: spec.root,
        },
        keys,
        eso: Some(EsoRoute {
            push_secret,
            external_secret: external,
            consumers: spec.consumers,
        }),
        allow_incomplete,
    })
}

/// The consumers a layer names, if any. The flags layer prefers the list (a command line parser
/// makes them exclusive); the file layer must not name both.
fn consumers_of(layer: &GhcrSettings, is_file: bool) -> Result<Option<Consumers>, InputError> {
    match (&layer.namespace_selector, layer.namespaces.is_empty()) {
        (Some(_), false) if is_file => Err(InputError::SeveralConsumerKinds),
        (_, false) => Ok(Some(Consumers::Namespaces(layer.namespaces.clone()))),
        (Some(sel), true) => Ok(Some(Consumers::Selector(sel.clone()))),
        (None, true) => Ok(None),
    }
}

/// Resolves the Flux sources to prove: `[oci/|helm/]namespace/name` (`OCIRepository` by
/// default), from `flags` unless empty, else from `file`.
///
/// # Errors
/// [`InputError::BadSource`] for the first text that does not have that form.
pub fn source_refs(
    flags: &GhcrSettings,
    file: &GhcrSettings,
) -> Result<Vec<SourceRef>, InputError> {
    over(&flags.sources, &file.sources)
        .iter()
        .map(|text| {
            let bad = || InputError::BadSource(text.clone());
            let parts: Vec<&str> = text.split('/').collect();
            let (kind, ns, name) = match parts.as_slice() {
                [kind, ns, name] => (*kind, *ns, *name),
                [ns, name] => ("oci", *ns, *name),
                _ => return Err(bad()),
            };
            if !is_dns_label(ns) || name.is_empty() {
                return Err(bad());
            }
            match kind {
                "oci" | "ocirepository" => Ok(SourceRef::oci_repository(ns, name)),
                "helm" | "helmrepository" => Ok(SourceRef::helm_repository(ns, name)),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// `namespace/name` (a DNS label and a DNS subdomain, as the API server requires: both end up
/// in request paths); a bare `name` takes `default_ns`.
fn split_ref(text: &str, default_ns: &str) -> Option<SecretTarget> {
    let (ns, name) = text.split_once('/').unwrap_or((default_ns, text));
    (is_dns_label(ns) && is_dns_subdomain(name)).then(|| SecretTarget::new(ns, name))
}

#[cfg(test)]
mod tests;
