//! The pure core of `doctor`: which permissions a configured handoff needs, and the RBAC rule
//! that grants each. No I/O here.

use std::fmt;

/// One permission: a verb on a resource, in a namespace or cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// `get`, `list`, `create`, `update`, `patch`.
    pub verb: &'static str,
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// `None`: all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// The one object it is needed on, when a rule may name it (`resourceNames`).
    pub name: Option<String>,
    /// Which part of flux-handoff needs it.
    pub why: &'static str,
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resource = if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        let resource = match &self.name {
            Some(n) => format!("{resource} {n}"),
            None => resource,
        };
        match &self.namespace {
            Some(ns) => write!(f, "{} {resource} in {ns}", self.verb),
            None => write!(f, "{} {resource} in all namespaces", self.verb),
        }
    }
}

impl Need {
    /// The RBAC rule that grants it, and where to put it.
    #[must_use]
    pub fn fix(&self) -> String {
        let names = self
            .name
            .as_ref()
            .map(|n| format!(", resourceNames: [\"{n}\"]"))
            .unwrap_or_default();
        let rule = format!(
            "{{apiGroups: [\"{}\"], resources: [\"{}\"]{names}, verbs: [\"{}\"]}}",
            self.group, self.resource, self.verb
        );
        match &self.namespace {
            Some(ns) => {
                format!("add rule {rule} to a Role bound in namespace {ns} (see deploy/rbac.yaml)")
            }
            None => format!(
                "add rule {rule} to a ClusterRole bound by a ClusterRoleBinding (see deploy/rbac.yaml)"
            ),
        }
    }
}

/// What the configured handoff touches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The Lease's namespace.
    pub lease_namespace: String,
    /// The Lease's name.
    pub lease_name: String,
    /// The controller Deployment's name.
    pub controller_name: String,
    /// Namespaces of the targets and their parents.
    pub object_namespaces: Vec<String>,
    /// The controller's namespace when `--retire restart` is configured.
    pub restart_namespace: Option<String>,
    /// Namespaces of the Secrets `ghcr reassert` writes, when `[ghcr]` is configured.
    pub secret_namespaces: Option<Vec<String>>,
    /// Namespaces of the Flux sources `ghcr reassert` reconciles.
    pub source_namespaces: Vec<String>,
}

const KS: (&str, &str) = ("kustomize.toolkit.fluxcd.io", "kustomizations");
const HR: (&str, &str) = ("helm.toolkit.fluxcd.io", "helmreleases");

/// Every permission `plan` needs, one per verb, resource and namespace, in a stable order.
#[must_use]
#[allow(clippy::too_many_lines)] // one flat list of rules, in the order deploy/rbac.yaml has them
pub fn needs(plan: &Plan) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::new();
    let mut add = |verb,
                   (group, resource): (&'static str, &'static str),
                   ns: Option<&String>,
                   name: Option<&String>,
                   why| {
        let n = Need {
            verb,
            group,
            resource,
            namespace: ns.cloned(),
            name: name.cloned(),
            why,
        };
        if !out.contains(&n) {
            out.push(n);
        }
    };
    let lease = ("coordination.k8s.io", "leases");
    let lease_ns = Some(&plan.lease_namespace);
    // create cannot be limited by name; get and update can.
    add(
        "get",
        lease,
        lease_ns,
        Some(&plan.lease_name),
        "the coordination Lease",
    );
    add("create", lease, lease_ns, None, "the coordination Lease");
    add(
        "update",
        lease,
        lease_ns,
        Some(&plan.lease_name),
        "the coordination Lease",
    );
    for ns in &plan.object_namespaces {
        for kind in [KS, HR] {
            for verb in ["get", "patch"] {
                add(verb, kind, Some(ns), None, "fencing targets and parents");
            }
        }
        add(
            "create",
            ("", "events"),
            Some(ns),
            None,
            "Events on fenced objects",
        );
    }
    for kind in [KS, HR] {
        add(
            "list",
            kind,
            None,
            None,
            "resume and fences find every fence",
        );
    }
    if let Some(ns) = &plan.restart_namespace {
        let deploy = ("apps", "deployments");
        let name = Some(&plan.controller_name);
        add("get", deploy, Some(ns), name, "--retire restart");
        add("patch", deploy, Some(ns), name, "--retire restart");
        add(
            "list",
            ("", "pods"),
            Some(ns),
            None,
            "--retire restart waits for old Pods",
        );
    }
    if let Some(nss) = &plan.secret_namespaces {
        for ns in nss {
            for verb in ["get", "create", "update", "patch"] {
                add(verb, ("", "secrets"), Some(ns), None, "ghcr reassert");
            }
        }
        add(
            "list",
            ("", "namespaces"),
            None,
            None,
            "ghcr reassert finds namespaces",
        );
    }
    for ns in &plan.source_namespaces {
        let oci = ("source.toolkit.fluxcd.io", "ocirepositories");
        add(
            "get",
            oci,
            Some(ns),
            None,
            "ghcr reassert proves Flux can pull",
        );
        add(
            "patch",
            oci,
            Some(ns),
            None,
            "ghcr reassert proves Flux can pull",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            lease_namespace: "flux-system".into(),
            lease_name: "flux-handoff".into(),
            controller_name: "kustomize-controller".into(),
            object_namespaces: vec!["flux-system".into(), "apps".into()],
            ..Plan::default()
        }
    }

    #[test]
    fn a_plain_handoff_needs_lease_fence_event_and_cluster_list_permissions() {
        let n = needs(&plan());
        let text: Vec<String> = n.iter().map(ToString::to_string).collect();
        for want in [
            "get leases.coordination.k8s.io flux-handoff in flux-system",
            "create leases.coordination.k8s.io in flux-system",
            "update leases.coordination.k8s.io flux-handoff in flux-system",
            "patch kustomizations.kustomize.toolkit.fluxcd.io in apps",
            "get helmreleases.helm.toolkit.fluxcd.io in flux-system",
            "create events in apps",
            "list kustomizations.kustomize.toolkit.fluxcd.io in all namespaces",
        ] {
            assert!(text.iter().any(|t| t == want), "missing {want}: {text:?}");
        }
        assert!(
            !text
                .iter()
                .any(|t| t.contains("deployments") || t.contains("secrets"))
        );
        // One per verb+resource+namespace, no duplicates.
        let mut dedup = text.clone();
        dedup.dedup();
        assert_eq!(dedup.len(), text.len());
    }

    #[test]
    fn restart_ghcr_and_sources_add_their_permissions() {
        let mut p = plan();
        p.restart_namespace = Some("flux-system".into());
        p.secret_namespaces = Some(vec!["apps".into()]);
        p.source_namespaces = vec!["flux-system".into()];
        let text: Vec<String> = needs(&p).iter().map(ToString::to_string).collect();
        for want in [
            "patch deployments.apps kustomize-controller in flux-system",
            "list pods in flux-system",
            "update secrets in apps",
            "list namespaces in all namespaces",
            "patch ocirepositories.source.toolkit.fluxcd.io in flux-system",
        ] {
            assert!(text.iter().any(|t| t == want), "missing {want}: {text:?}");
        }
    }

    #[test]
    fn the_fix_names_the_rule_and_where_it_goes() {
        let n = &needs(&plan())[0];
        assert_eq!(
            n.fix(),
            "add rule {apiGroups: [\"coordination.k8s.io\"], resources: [\"leases\"], resourceNames: [\"flux-handoff\"], verbs: [\"get\"]} to a Role bound in namespace flux-system (see deploy/rbac.yaml)"
        );
    }
}
