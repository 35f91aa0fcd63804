//! Least privilege as data: which Kubernetes rights each flux-handoff feature needs for one
//! configuration ([`rights`]), the RBAC manifests that grant exactly those ([`manifests`]), and
//! the rule lines that grant one missing right ([`Right::rule`]). Pure: no I/O, so `doctor`
//! (which asks the API server about each right) and `flux-handoff rbac` (which prints the
//! manifests) share one decision, tested by table.
//!
//! Every right is as narrow as the API allows: a verb on a resource in one namespace, and on
//! one object by name (`resourceNames`) wherever the object is known in advance. Only `create`
//! and `list` cannot be limited by name. Nothing is granted cluster-wide unless asked for
//! (fences in every namespace, consumer namespaces by label selector).

use std::fmt::{self, Write as _};

/// A part of flux-handoff that needs rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Feature {
    /// The coordination Lease every handoff holds.
    Lease,
    /// Fencing and releasing targets and parents (pause, resume, run, fences release/recover).
    Fence,
    /// Watching each fenced object for its acknowledgement (without `watch` it is polled:
    /// slower, never less safe).
    Acknowledgement,
    /// `HandoffFenced` / `HandoffReleased` Events on fenced objects (failures are only logged).
    Events,
    /// Finding fences by their label (resume, fences, fences recover).
    Discover,
    /// `--retire restart`: the controller Deployment and its Pods.
    RetireRestart,
    /// A replicas gate (`deploy/NS/NAME=N`): the Deployment by name, and its `ReplicaSets` and
    /// Pods listed for the proof that none of its Pods of another count is left.
    Gate,
    /// A replicas gate: the `HorizontalPodAutoscaler`s and KEDA `ScaledObject`s of its
    /// namespace listed, so one that targets the Deployment is named before any write.
    GateAutoscaler,
    /// `ghcr reassert`: the pull Secret in each consumer namespace.
    GhcrConsumers,
    /// `ghcr reassert`: the root Secret Flux pulls with (it must exist).
    GhcrRoot,
    /// `ghcr reassert --namespace-selector`: finding consumer namespaces by label.
    GhcrSelector,
    /// `ghcr reassert --source`: requesting a reconcile of a Flux source as the pull proof.
    SourceProof,
    /// `ghcr reassert --secret-key`: the one data key of a staging Secret (it must exist).
    GhcrStagedKey,
    /// `ghcr reassert --push-secret --external-secret`: force-syncing External Secrets objects
    /// (an annotation patch) and reading each consumer Secret back (never writing it).
    GhcrExternalSecrets,
}

impl Feature {
    /// What the feature is, for people.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Lease => "the coordination Lease",
            Self::Fence => "fencing targets and parents",
            Self::Acknowledgement => "the acknowledgement is watched (polled without it)",
            Self::Events => "Events on fenced objects",
            Self::Discover => "resume and fences find fences by label",
            Self::RetireRestart => "--retire restart",
            Self::Gate => "a replicas gate scales its Deployment and counts its Pods",
            Self::GateAutoscaler => "a replicas gate looks for an autoscaler of its Deployment",
            Self::GhcrConsumers => "ghcr reassert writes the consumer pull Secret",
            Self::GhcrRoot => "ghcr reassert writes the root Secret",
            Self::GhcrSelector => "ghcr reassert finds consumer namespaces by label",
            Self::SourceProof => "ghcr reassert proves Flux can pull",
            Self::GhcrStagedKey => "ghcr reassert stages the credential in a Secret key",
            Self::GhcrExternalSecrets => {
                "ghcr reassert force-syncs External Secrets and reads the consumers back"
            }
        }
    }
}

/// One right: a verb on a resource, in a namespace or cluster-wide, on one object or all.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Right {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`.
    pub verb: &'static str,
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// `None`: all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// The one object it is needed on (`resourceNames`), when known in advance.
    pub name: Option<String>,
    /// Who needs it.
    pub feature: Feature,
}

impl fmt::Display for Right {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(n) = &self.name {
            write!(f, " {n}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => write!(f, " in all namespaces"),
        }
    }
}

impl Right {
    /// The YAML lines of the one RBAC rule that grants it (a list item, indented for `rules:`).
    #[must_use]
    pub fn rule(&self) -> String {
        rule_lines(
            self.group,
            self.resource,
            self.name.as_deref(),
            &[self.verb],
        )
    }

    /// Where the rule goes.
    #[must_use]
    pub fn placement(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("the Role bound in namespace {ns}"),
            None => "the ClusterRole bound by a ClusterRoleBinding".into(),
        }
    }
}

/// A Flux source `ghcr reassert` reconciles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// `ocirepositories` or `helmrepositories`.
    pub resource: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What `ghcr reassert` writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ghcr {
    /// The pull Secret's name in every consumer namespace.
    pub secret_name: String,
    /// The consumer namespaces, when listed.
    pub consumers: Vec<String>,
    /// Consumer namespaces are chosen by a label selector (needs cluster-wide namespace list;
    /// their Secrets need a Role in each matching namespace).
    pub selector: bool,
    /// The root Secret, `(namespace, name)`.
    pub root: Option<(String, String)>,
    /// The Flux sources proved afterwards.
    pub sources: Vec<Source>,
    /// The Secrets holding a staged key, `(namespace, name)`.
    pub staged: Vec<(String, String)>,
    /// The External Secrets route, when configured.
    pub eso: Option<EsoRights>,
}

/// What the External Secrets route of `ghcr reassert` drives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EsoRights {
    /// The `PushSecret`, `(namespace, name)`.
    pub push_secret: (String, String),
    /// The `ExternalSecret`'s name in each consumer namespace. Its target Secret is granted by
    /// this name too (ESO's default, `spec.target.name` unset or equal): a target of another
    /// name is refused by the API server when read back, so the route fails before the root.
    pub external_secret: String,
    /// The consumer namespaces.
    pub consumers: Vec<String>,
}

/// What one configuration touches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The Lease, `(namespace, name)`.
    pub lease: (String, String),
    /// Namespaces of the targets and parents, and where fences are looked for.
    pub object_namespaces: Vec<String>,
    /// Fences are looked for in every namespace (`-A`).
    pub all_namespaces: bool,
    /// The controller Deployment `(namespace, name)`, when `--retire restart` is used.
    pub restart: Option<(String, String)>,
    /// The Deployments of replicas gates, `(namespace, name)`.
    pub gates: Vec<(String, String)>,
    /// `ghcr reassert`, when configured.
    pub ghcr: Option<Ghcr>,
}

const LEASES: (&str, &str) = ("coordination.k8s.io", "leases");
const KS: (&str, &str) = ("kustomize.toolkit.fluxcd.io", "kustomizations");
const HR: (&str, &str) = ("helm.toolkit.fluxcd.io", "helmreleases");
const SECRETS: (&str, &str) = ("", "secrets");
const PUSH: (&str, &str) = ("external-secrets.io", "pushsecrets");
const EXTERNAL: (&str, &str) = ("external-secrets.io", "externalsecrets");

/// Every right `plan` needs, one per verb, resource, namespace and name, without duplicates,
/// in a stable order (Lease, fences, discovery, restart, ghcr).
#[must_use]
pub fn rights(plan: &Plan) -> Vec<Right> {
    let mut out = Rights(Vec::new());
    let (lease_ns, lease_name) = (plan.lease.0.as_str(), Some(plan.lease.1.as_str()));
    // `create` cannot be limited by name; reads and writes (an update with resourceVersion) can.
    out.add(Feature::Lease, "create", LEASES, Some(lease_ns), None);
    out.add(Feature::Lease, "get", LEASES, Some(lease_ns), lease_name);
    out.add(Feature::Lease, "update", LEASES, Some(lease_ns), lease_name);
    for ns in &plan.object_namespaces {
        for kind in [KS, HR] {
            out.add(Feature::Fence, "get", kind, Some(ns), None);
            out.add(Feature::Fence, "patch", kind, Some(ns), None);
            // The watch selects the one object by `metadata.name`, but fenced names are not
            // known in advance, so it is granted on the kind in the namespace like `get`.
            out.add(Feature::Acknowledgement, "watch", kind, Some(ns), None);
        }
        out.add(Feature::Events, "create", ("", "events"), Some(ns), None);
    }
    for kind in [KS, HR] {
        if plan.all_namespaces {
            out.add(Feature::Discover, "list", kind, None, None);
        } else {
            for ns in &plan.object_namespaces {
                out.add(Feature::Discover, "list", kind, Some(ns), None);
            }
        }
    }
    if let Some((ns, name)) = &plan.restart {
        let deploy = ("apps", "deployments");
        out.add(Feature::RetireRestart, "get", deploy, Some(ns), Some(name));
        out.add(
            Feature::RetireRestart,
            "patch",
            deploy,
            Some(ns),
            Some(name),
        );
        out.add(Feature::RetireRestart, "list", ("", "pods"), Some(ns), None);
    }
    for (ns, name) in &plan.gates {
        let deploy = ("apps", "deployments");
        out.add(Feature::Gate, "get", deploy, Some(ns), Some(name));
        out.add(Feature::Gate, "patch", deploy, Some(ns), Some(name));
        out.add(
            Feature::Gate,
            "list",
            ("apps", "replicasets"),
            Some(ns),
            None,
        );
        out.add(Feature::Gate, "list", ("", "pods"), Some(ns), None);
        let hpa = ("autoscaling", "horizontalpodautoscalers");
        out.add(Feature::GateAutoscaler, "list", hpa, Some(ns), None);
        let keda = ("keda.sh", "scaledobjects");
        out.add(Feature::GateAutoscaler, "list", keda, Some(ns), None);
        out.add(Feature::Events, "create", ("", "events"), Some(ns), None);
    }
    if let Some(g) = &plan.ghcr {
        out.ghcr(g);
    }
    out.0
}

struct Rights(Vec<Right>);

impl Rights {
    fn add(
        &mut self,
        feature: Feature,
        verb: &'static str,
        (group, resource): (&'static str, &'static str),
        ns: Option<&str>,
        name: Option<&str>,
    ) {
        let r = Right {
            verb,
            group,
            resource,
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            feature,
        };
        if !self.0.iter().any(|o| same_grant(o, &r)) {
            self.0.push(r);
        }
    }

    fn ghcr(&mut self, g: &Ghcr) {
        let name = Some(g.secret_name.as_str());
        for ns in &g.consumers {
            // Read, create when absent, then a JSON Patch with a test: never update.
            self.add(Feature::GhcrConsumers, "get", SECRETS, Some(ns), name);
            self.add(Feature::GhcrConsumers, "create", SECRETS, Some(ns), None);
            self.add(Feature::GhcrConsumers, "patch", SECRETS, Some(ns), name);
        }
        if g.selector {
            self.add(
                Feature::GhcrSelector,
                "list",
                ("", "namespaces"),
                None,
                None,
            );
        }
        if let Some((ns, root)) = &g.root {
            self.add(Feature::GhcrRoot, "get", SECRETS, Some(ns), Some(root));
            self.add(Feature::GhcrRoot, "patch", SECRETS, Some(ns), Some(root));
        }
        for (ns, name) in &g.staged {
            // A metadata read, a fresh read, then a JSON Patch testing the key's old value.
            self.add(Feature::GhcrStagedKey, "get", SECRETS, Some(ns), Some(name));
            self.add(
                Feature::GhcrStagedKey,
                "patch",
                SECRETS,
                Some(ns),
                Some(name),
            );
        }
        if let Some(e) = &g.eso {
            let (ns, name) = (
                Some(e.push_secret.0.as_str()),
                Some(e.push_secret.1.as_str()),
            );
            self.add(Feature::GhcrExternalSecrets, "get", PUSH, ns, name);
            self.add(Feature::GhcrExternalSecrets, "patch", PUSH, ns, name);
            let name = Some(e.external_secret.as_str());
            for ns in &e.consumers {
                self.add(
                    Feature::GhcrExternalSecrets,
                    "get",
                    EXTERNAL,
                    Some(ns),
                    name,
                );
                self.add(
                    Feature::GhcrExternalSecrets,
                    "patch",
                    EXTERNAL,
                    Some(ns),
                    name,
                );
                self.add(Feature::GhcrExternalSecrets, "get", SECRETS, Some(ns), name);
            }
        }
        for s in &g.sources {
            let kind = ("source.toolkit.fluxcd.io", s.resource);
            let (ns, name) = (Some(s.namespace.as_str()), Some(s.name.as_str()));
            self.add(Feature::SourceProof, "get", kind, ns, name);
            self.add(Feature::SourceProof, "patch", kind, ns, name);
        }
    }
}

/// Whether `a` already grants what `b` asks (same verb and resource where `b` is; a grant on
/// every object covers one by name).
fn same_grant(a: &Right, b: &Right) -> bool {
    a.verb == b.verb
        && a.group == b.group
        && a.resource == b.resource
        && a.namespace == b.namespace
        && (a.name.is_none() || a.name == b.name)
}

/// The subject the manifests bind: a `ServiceAccount`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// Its namespace.
    pub namespace: String,
    /// Its name (also the name of every Role and `RoleBinding`).
    pub name: String,
}

/// The RBAC manifests granting exactly [`rights`]`(plan)` to `subject`: its `ServiceAccount`,
/// a Role and `RoleBinding` per namespace (in order of first use), and a `ClusterRole` and
/// `ClusterRoleBinding` (named `<name>-<namespace>`) only when a right is cluster-wide. Each
/// rule is commented with the feature that needs it; `header` lines come first as comments.
#[must_use]
pub fn manifests(plan: &Plan, subject: &Subject, header: &[String]) -> String {
    let all = rights(plan);
    let mut s = String::new();
    for line in header {
        let _ = writeln!(s, "{}", format!("# {line}").trim_end());
    }
    let sa = &subject.name;
    let sa_ns = &subject.namespace;
    let _ = write!(
        s,
        "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {sa}\n  namespace: {sa_ns}\n"
    );
    let mut namespaces: Vec<&str> = Vec::new();
    for r in &all {
        if let Some(ns) = r.namespace.as_deref()
            && !namespaces.contains(&ns)
        {
            namespaces.push(ns);
        }
    }
    let binding = |kind: &str, name: &str, ns: Option<&str>, role_kind: &str| {
        let ns_line = ns
            .map(|n| format!("  namespace: {n}\n"))
            .unwrap_or_default();
        format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}\n{ns_line}roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: {role_kind}\n  name: {name}\nsubjects:\n  - kind: ServiceAccount\n    name: {sa}\n    namespace: {sa_ns}\n"
        )
    };
    for ns in namespaces {
        let here: Vec<&Right> = all
            .iter()
            .filter(|r| r.namespace.as_deref() == Some(ns))
            .collect();
        let _ = write!(
            s,
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {sa}\n  namespace: {ns}\nrules:\n{}",
            rules(&here)
        );
        s.push_str(&binding("RoleBinding", sa, Some(ns), "Role"));
    }
    let cluster: Vec<&Right> = all.iter().filter(|r| r.namespace.is_none()).collect();
    if !cluster.is_empty() {
        let name = format!("{sa}-{sa_ns}");
        let _ = write!(
            s,
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {name}\nrules:\n{}",
            rules(&cluster)
        );
        s.push_str(&binding("ClusterRoleBinding", &name, None, "ClusterRole"));
    }
    s
}

/// The rules for `rights`: one per feature, resource and name, its verbs merged in order.
fn rules(rights: &[&Right]) -> String {
    type Key<'a> = (Feature, &'a str, &'a str, Option<&'a str>);
    let mut groups: Vec<(Key<'_>, Vec<&str>)> = Vec::new();
    for r in rights {
        let key = (r.feature, r.group, r.resource, r.name.as_deref());
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(r.verb),
            None => groups.push((key, vec![r.verb])),
        }
    }
    let mut s = String::new();
    for ((feature, group, resource, name), verbs) in groups {
        let _ = writeln!(s, "  # {}", feature.describe());
        s.push_str(&rule_lines(group, resource, name, &verbs));
    }
    s
}

fn rule_lines(group: &str, resource: &str, name: Option<&str>, verbs: &[&str]) -> String {
    let quoted = |v: &[&str]| {
        v.iter()
            .map(|x| format!("\"{x}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let names = name
        .map(|n| format!("    resourceNames: [\"{n}\"]\n"))
        .unwrap_or_default();
    format!(
        "  - apiGroups: [\"{group}\"]\n    resources: [\"{resource}\"]\n{names}    verbs: [{}]\n",
        quoted(verbs)
    )
}

#[cfg(test)]
mod tests;
