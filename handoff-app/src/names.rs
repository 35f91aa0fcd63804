//! Names as people type them: `[namespace/]name` and `[kind/][namespace/]name`, checked the way
//! the API server checks them before anything reaches a request path.
//!
//! A namespace must be a DNS label and a name a DNS subdomain. Both end up in request paths, so
//! `.`, `..`, a leading `-` or an upper-case letter is refused here, with one line, rather than
//! sent.
//!
//! ```
//! use handoff_app::names;
//!
//! let target = names::parse_object("hr/apps/podinfo", "flux-system").unwrap();
//! assert_eq!(target.to_string(), "HelmRelease apps/podinfo");
//! assert!(names::parse_object("../secrets", "flux-system").is_err());
//! ```

use flux_fence::ObjectRef;
use kube::api::ApiResource;

use flux_suspend::object::{
    deployment_resource, fluxinstance_resource, helmrelease_resource, kustomization_resource,
    resourceset_resource,
};

/// A name that is not of the expected form; its Display is one line naming the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a valid {expected}")]
#[non_exhaustive]
pub struct NameError {
    /// The text as given.
    pub text: String,
    /// The form that was expected, e.g. `[namespace/]name`.
    pub expected: &'static str,
}

pub use flux_fence::keys::is_dns_label;
pub use flux_fence::keys::is_dns_subdomain;

/// Splits `namespace/name`; a bare `name` takes `default_ns` (which is checked too).
///
/// # Errors
///
/// [`NameError`] when the namespace is not a DNS label or the name not a DNS subdomain.
pub fn split_namespaced(text: &str, default_ns: &str) -> Result<(String, String), NameError> {
    let (ns, name) = text.split_once('/').unwrap_or((default_ns, text));
    if is_dns_label(ns) && is_dns_subdomain(name) {
        Ok((ns.to_string(), name.to_string()))
    } else {
        Err(NameError {
            text: text.to_string(),
            expected: "[namespace/]name",
        })
    }
}

/// The Flux kind a user means (any case): `ks`, `kustomization(s)`; `hr`, `helmrelease(s)`;
/// and Flux Operator's `rset`, `resourceset(s)` and `fi`, `fluxinstance(s)` (the short names
/// `kubectl` knows them by), paused by their reconcile annotation.
#[must_use]
pub fn kind_resource(kind: &str) -> Option<ApiResource> {
    match kind.to_ascii_lowercase().as_str() {
        "ks" | "kustomization" | "kustomizations" => Some(kustomization_resource()),
        "hr" | "helmrelease" | "helmreleases" => Some(helmrelease_resource()),
        "rset" | "resourceset" | "resourcesets" => Some(resourceset_resource()),
        "fi" | "fluxinstance" | "fluxinstances" => Some(fluxinstance_resource()),
        _ => None,
    }
}

/// The short kind `kind_resource` takes for `kind` (`Kustomization` -> `ks`, `ResourceSet` ->
/// `rset`, ...); `None` for a kind flux-handoff does not pause.
#[must_use]
pub fn short_kind(kind: &str) -> Option<&'static str> {
    match kind {
        "Kustomization" => Some("ks"),
        "HelmRelease" => Some("hr"),
        "ResourceSet" => Some("rset"),
        "FluxInstance" => Some("fi"),
        "Deployment" => Some("deploy"),
        _ => None,
    }
}

/// Parses `[kind/][namespace/]name`; the kind defaults to Kustomization and the namespace to
/// `default_ns`.
///
/// # Errors
///
/// [`NameError`] for an unknown kind, too many parts, or a malformed namespace or name.
pub fn parse_object(text: &str, default_ns: &str) -> Result<ObjectRef, NameError> {
    let bad = || NameError {
        text: text.to_string(),
        expected: "[kind/][namespace/]name (kind ks, hr, rset or fi; deploy/namespace/name)",
    };
    let parts: Vec<&str> = text.split('/').collect();
    let (kind, rest) = match parts.as_slice() {
        // A Deployment (a replicas gate) only in the full form: `deploy/x` stays Kustomization
        // `x` of namespace `deploy`, as it always was.
        [k, _, _] if is_deploy(k) => (deployment_resource(), parts[1..].join("/")),
        [k, _, _] => (kind_resource(k).ok_or_else(bad)?, parts[1..].join("/")),
        [k, name] if kind_resource(k).is_some() => {
            (kind_resource(k).ok_or_else(bad)?, (*name).to_string())
        }
        _ => (kustomization_resource(), text.to_string()),
    };
    let (ns, name) = split_namespaced(&rest, default_ns).map_err(|_| bad())?;
    Ok(ObjectRef::new(kind, ns, name))
}

fn is_deploy(kind: &str) -> bool {
    matches!(
        kind.to_ascii_lowercase().as_str(),
        "deploy" | "deployment" | "deployments"
    )
}

/// Parses a target as `run`, `pause` and `--dry-run` take it: [`parse_object`]'s forms, or a
/// replicas gate `deploy/namespace/name=N` (the Deployment scaled to `N` while the pause
/// holds; [`flux_suspend::TargetSpec::scaled`]). A count is taken by a Deployment only, and a
/// Deployment only with one.
///
/// ```
/// use handoff_app::names::parse_target;
///
/// let (gate, count) = parse_target("deploy/kube-system/cluster-autoscaler=0", "x").unwrap();
/// assert_eq!((gate.to_string().as_str(), count), ("Deployment kube-system/cluster-autoscaler", Some(0)));
/// assert!(parse_target("deploy/kube-system/cluster-autoscaler", "x").is_err());
/// assert!(parse_target("ks/apps/web=0", "x").is_err());
/// ```
///
/// # Errors
///
/// [`NameError`] naming the text.
pub fn parse_target(text: &str, default_ns: &str) -> Result<(ObjectRef, Option<i32>), NameError> {
    let gate = NameError {
        text: text.to_string(),
        expected: "target: a replica count goes with a Deployment only, \
                   deploy/namespace/name=N (N from 0)",
    };
    let (object, count) = match text.rsplit_once('=') {
        Some((object, n)) => {
            // Digits only: no sign, no space, no `0x`.
            let digits = !n.is_empty() && n.len() <= 9 && n.bytes().all(|b| b.is_ascii_digit());
            let Some(n) = digits.then(|| n.parse::<i32>().ok()).flatten() else {
                return Err(gate);
            };
            (parse_object(object, default_ns)?, Some(n))
        }
        None => (parse_object(text, default_ns)?, None),
    };
    let is_gate = flux_suspend::object::is_gate_kind(&object.resource);
    if is_gate != count.is_some() {
        return Err(gate);
    }
    Ok((object, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_habits_name_output_is_the_form_commands_take_back() {
        // `-o name` prints `flux_fence::recovery::short_ref`; every command parses it back.
        for text in [
            "ks/flux-system/apps",
            "hr/web/podinfo",
            "resourceset/a/b",
            "fluxinstance/flux-system/flux",
        ] {
            let o = parse_object(text, "x").unwrap();
            assert_eq!(flux_fence::recovery::short_ref(&o), text);
        }
    }

    #[test]
    fn object_forms() {
        let cases = [
            ("apps", "Kustomization", "flux-system", "apps"),
            ("infra/apps", "Kustomization", "infra", "apps"),
            ("hr/podinfo", "HelmRelease", "flux-system", "podinfo"),
            ("hr/apps/podinfo", "HelmRelease", "apps", "podinfo"),
            ("Kustomization/a/b", "Kustomization", "a", "b"),
            ("rset/apps/tenants", "ResourceSet", "apps", "tenants"),
            ("rset/tenants", "ResourceSet", "flux-system", "tenants"),
            ("ResourceSets/a/b", "ResourceSet", "a", "b"),
            ("fi/flux-system/flux", "FluxInstance", "flux-system", "flux"),
            ("fluxinstance/flux", "FluxInstance", "flux-system", "flux"),
        ];
        for (text, kind, ns, name) in cases {
            let o = parse_object(text, "flux-system").unwrap();
            assert_eq!(
                (
                    o.resource.kind.as_str(),
                    o.namespace.as_str(),
                    o.name.as_str()
                ),
                (kind, ns, name),
                "{text}"
            );
        }
        for bad in ["", "a/b/c/d", "zz/ns/name", "Apps", "a//b", "ks/../x"] {
            let e = parse_object(bad, "x").unwrap_err();
            assert_eq!(e.text, bad);
            assert_eq!(e.to_string().lines().count(), 1);
        }
    }

    #[test]
    fn operator_kinds_parse_to_the_flux_operator_group_and_back_to_their_short_kind() {
        for (text, short) in [("rset/a/b", "rset"), ("fi/a/b", "fi"), ("hr/a/b", "hr")] {
            let o = parse_object(text, "x").unwrap();
            assert_eq!(short_kind(&o.resource.kind), Some(short), "{text}");
            let operator = flux_suspend::object::is_operator_kind(&o.resource);
            assert_eq!(operator, short != "hr", "{text}");
            if operator {
                assert_eq!(o.resource.api_version, "fluxcd.controlplane.io/v1");
            }
        }
        assert_eq!(short_kind("GitRepository"), None);
    }

    #[test]
    fn replicas_gate_targets_are_a_deployment_with_a_count_and_nothing_else() {
        let ok = [
            ("deploy/kube-system/ca=0", "kube-system", "ca", 0),
            ("Deployment/a/b=12", "a", "b", 12),
            ("deployments/a/b=007", "a", "b", 7),
        ];
        for (text, ns, name, n) in ok {
            let (o, count) = parse_target(text, "x").unwrap();
            assert_eq!(
                (
                    o.resource.kind.as_str(),
                    o.namespace.as_str(),
                    o.name.as_str(),
                    count
                ),
                ("Deployment", ns, name, Some(n)),
                "{text}"
            );
            assert_eq!(short_kind(&o.resource.kind), Some("deploy"));
        }
        for bad in [
            "deploy/a/b",
            "deploy/a/b=",
            "deploy/a/b=-1",
            "deploy/a/b=+1",
            "deploy/a/b= 1",
            "deploy/a/b=1.5",
            "deploy/a/b=9999999999",
            "ks/a/b=0",
            "a/b=0",
            "deploy/a/b=0=0",
        ] {
            let e = parse_target(bad, "x").unwrap_err();
            assert_eq!(e.to_string().lines().count(), 1, "{bad}");
        }
        // Two parts keep their old meaning: Kustomization `b` in namespace `deploy`.
        let (o, count) = parse_target("deploy/b", "x").unwrap();
        assert_eq!(
            (o.resource.kind.as_str(), o.namespace.as_str(), count),
            ("Kustomization", "deploy", None)
        );
        assert_eq!(parse_target("hr/a/b", "x").unwrap().1, None);
    }

    #[test]
    fn namespaced_defaults_the_namespace_and_refuses_what_is_not_a_name() {
        assert_eq!(
            split_namespaced("apps", "flux-system"),
            Ok(("flux-system".into(), "apps".into()))
        );
        assert_eq!(split_namespaced("a/b", "x"), Ok(("a".into(), "b".into())));
        assert_eq!(
            split_namespaced("ns/app.v1", "x"),
            Ok(("ns".into(), "app.v1".into()))
        );
        for bad in [
            "A/b", "a/", "a/b/c", "../x", "./x", "x/..", "..", "ns/.", "-a/b", "a/b-", "a/.b",
            "a/b..c",
        ] {
            assert!(split_namespaced(bad, "x").is_err(), "{bad}");
        }
        assert!(
            split_namespaced("x", "..").is_err(),
            "the default namespace is checked too"
        );
    }

    #[test]
    fn labels_and_subdomains_have_their_bounds() {
        assert!(is_dns_label(&"a".repeat(63)));
        assert!(!is_dns_label(&"a".repeat(64)));
        let label = "a".repeat(63);
        assert!(is_dns_subdomain(&[label.as_str(); 3].join(".")));
        assert!(!is_dns_subdomain(&[label.as_str(); 4].join(".")));
    }
}
