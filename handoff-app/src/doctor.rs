//! A read-only preflight against any cluster ([`doctor`]): the API is reachable, the Flux
//! CRDs are served, each target (and its parent) exists, the controller Deployment and the
//! Lease namespace exist, and — one `SelfSubjectAccessReview` per verb, resource, namespace and
//! name — every right the configured features need ([`crate::rights`] decides which). Each
//! check is a [`Finding`]: passed, or a problem with the fix in words (a missing right names
//! the feature that needs it and the exact rule lines to add). Nothing is written: the only
//! create is a dry-run of the Lease when it does not exist yet.
//!
//! The controller Deployment's arguments also tell whether Flux's feature gate
//! `CancelHealthCheckOnNewRevision` is on ([`gate`]): without it an acknowledgement waits until
//! an in-flight health check gives up, and doctor says how long that can be for the objects it
//! read (an `ok` line: advice, not a failure). Pauses held past their max-hold: module `overdue`.
//! A replicas gate's Deployment that an autoscaler targets: module `autoscaler`.

mod autoscaler;
pub mod gate;
pub mod operator;
mod overdue;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::rights::{self, Ghcr, Plan, Right};
use flux_fence::LeaseConfig;
use flux_suspend::io::ControllerRef;
use flux_suspend::{ParentSpec, Strategy, TargetSpec};

/// What to check: the same targets, Lease, controller and fence scope as a handoff, and the
/// `ghcr reassert` configuration, if any.
#[derive(Debug, Clone, Default)]
pub struct Checkup {
    /// The targets; empty: only the objects of `namespace` are checked for rights.
    pub targets: Vec<TargetSpec>,
    /// The default namespace (fences are looked for there when no target is named).
    pub namespace: String,
    /// The Lease.
    pub lease: LeaseConfig,
    /// The controller Deployment.
    pub controller: ControllerRef,
    /// The retirement strategy (`Restart` needs rights on the controller).
    pub strategy: Strategy,
    /// More namespaces where fences are looked for.
    pub also_in: Vec<String>,
    /// Fences are looked for in every namespace.
    pub all_namespaces: bool,
    /// `ghcr reassert`, when configured.
    pub ghcr: Option<Ghcr>,
    /// The fence keys (the annotation prefix), to find pauses held past their max-hold.
    pub keys: flux_fence::AnnotationKeys,
}

/// One check: passed, or a problem and its fix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What was checked, e.g. `Flux CRD kustomizations (kustomize.toolkit.fluxcd.io/v1) served`.
    pub check: String,
    /// `None` when it passed; else what to do, in words (may span lines).
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            fix: None,
        }
    }

    fn fail(check: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            fix: Some(fix.into()),
        }
    }

    /// Whether the check passed.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.fix.is_none()
    }

    /// `{"check": ..., "ok": true}`, or with `"ok": false` and the `"fix"`.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        match &self.fix {
            None => serde_json::json!({ "check": self.check, "ok": true }),
            Some(fix) => serde_json::json!({ "check": self.check, "ok": false, "fix": fix }),
        }
    }
}

impl std::fmt::Display for Finding {
    /// `ok   <check>` or `FAIL <check>: <fix>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fix {
            None => write!(f, "ok   {}", self.check),
            Some(fix) => write!(f, "FAIL {}: {fix}", self.check),
        }
    }
}

impl Checkup {
    /// The rights this configuration needs, known without reading the cluster: on the
    /// objects of the default namespace, the targets', explicit parents' and [`Self::also_in`]
    /// (a parent found by labels in another namespace needs that namespace in `also_in`).
    #[must_use]
    pub fn plan(&self) -> Plan {
        let mut namespaces = vec![self.namespace.clone()];
        for t in &self.targets {
            namespaces.push(t.object.namespace.clone());
            if let ParentSpec::Explicit(p) = &t.parent {
                namespaces.push(p.namespace.clone());
            }
        }
        self.plan_in(&namespaces, true)
    }

    /// The rights plan with fences in `namespaces` (and `also_in` when `also`), in order,
    /// without duplicates.
    fn plan_in(&self, namespaces: &[String], also: bool) -> Plan {
        let mut object_namespaces: Vec<String> = Vec::new();
        let extra = self.also_in.iter().filter(|_| also);
        for ns in namespaces.iter().chain(extra) {
            if !object_namespaces.contains(ns) {
                object_namespaces.push(ns.clone());
            }
        }
        let c = &self.controller;
        Plan {
            lease: (self.lease.namespace.clone(), self.lease.name.clone()),
            object_namespaces,
            all_namespaces: self.all_namespaces,
            restart: (self.strategy == Strategy::Restart)
                .then(|| (c.namespace.clone(), c.name.clone())),
            gates: self
                .targets
                .iter()
                .filter(|t| t.replicas.is_some())
                .map(|t| (t.object.namespace.clone(), t.object.name.clone()))
                .collect(),
            ghcr: self.ghcr.clone(),
        }
    }
}

/// Runs every check, calling `seen` with each finding as it is made, and returns them all.
/// When the API is unreachable that is the only finding. Read-only.
pub async fn doctor(
    client: &Client,
    checkup: &Checkup,
    seen: &mut (dyn FnMut(&Finding) + Send),
) -> Vec<Finding> {
    let mut found = Vec::new();
    let mut note = |f: Finding| {
        seen(&f);
        found.push(f);
    };
    match client.apiserver_version().await {
        Ok(v) => note(Finding::ok(format!(
            "API reachable: Kubernetes {}",
            v.git_version
        ))),
        Err(e) => {
            let fix = format!(
                "{} (check --kubeconfig/--context and the network)",
                chain(&e)
            );
            note(Finding::fail("API reachable", fix));
            return found;
        }
    }
    check_crds(client, &mut note).await;
    let (namespaces, waits) = check_targets(client, checkup, &mut note).await;
    for f in autoscaler::findings(client, &checkup.targets).await {
        note(f);
    }
    let (found_controller, deployment) = check_controller(client, checkup).await;
    note(found_controller);
    if let Some(d) = deployment {
        note(gate_finding(
            &checkup.controller,
            &d,
            waits.longest("Kustomization"),
        ));
        if let Some(f) = operator::finding(&checkup.controller, &d, checkup.strategy) {
            note(f);
        }
    }
    if waits.helm.is_some() {
        let helm = ControllerRef {
            namespace: checkup.controller.namespace.clone(),
            name: HELM_CONTROLLER.into(),
        };
        if let Some(d) = read_deployment(client, &helm).await {
            note(gate_finding(&helm, &d, waits.longest("HelmRelease")));
            if let Some(f) = operator::finding(&helm, &d, checkup.strategy) {
                note(f);
            }
        }
    }
    note(check_lease_namespace(client, &checkup.lease).await);
    note(overdue::check(client, checkup, &namespaces).await);
    // Every namespace (-A) needs no namespace named; the targets' are checked as read.
    let plan = checkup.plan_in(&namespaces, !checkup.all_namespaces);
    for right in rights::rights(&plan) {
        note(check_permission(client, &right).await);
    }
    found
}

async fn check_crds(client: &Client, note: &mut impl FnMut(Finding)) {
    for (gv, plural, kind) in [
        (
            "kustomize.toolkit.fluxcd.io/v1",
            "kustomizations",
            "Kustomization",
        ),
        ("helm.toolkit.fluxcd.io/v2", "helmreleases", "HelmRelease"),
        (
            "source.toolkit.fluxcd.io/v1",
            "ocirepositories",
            "OCIRepository",
        ),
    ] {
        let check = format!("Flux CRD {plural} ({gv}) served");
        note(match client.list_api_group_resources(gv).await {
            Ok(list) if list.resources.iter().any(|x| x.name == plural) => Finding::ok(check),
            Ok(_) | Err(kube::Error::Api(_)) => Finding::fail(
                check,
                format!("install Flux's {kind} CRD (flux install, or the CRD manifests)"),
            ),
            Err(e) => Finding::fail(check, chain(&e)),
        });
    }
}

/// The helm-controller Deployment, looked for beside the configured controller when a target
/// is a `HelmRelease`.
const HELM_CONTROLLER: &str = "helm-controller";

/// The longest health-check wait among the objects read, per controller.
#[derive(Debug, Default)]
struct Waits {
    kustomize: Option<(String, std::time::Duration)>,
    helm: Option<(String, std::time::Duration)>,
}

impl Waits {
    fn see(&mut self, object: &flux_fence::ObjectRef, obj: &serde_json::Value) {
        let slot = if object.resource.kind == "HelmRelease" {
            &mut self.helm
        } else {
            &mut self.kustomize
        };
        if let Some(w) = gate::health_wait(obj)
            && slot.as_ref().is_none_or(|(_, old)| w > *old)
        {
            *slot = Some((object.to_string(), w));
        }
    }

    fn longest(&self, kind: &str) -> Option<(&str, std::time::Duration)> {
        let slot = if kind == "HelmRelease" {
            &self.helm
        } else {
            &self.kustomize
        };
        slot.as_ref().map(|(o, w)| (o.as_str(), *w))
    }
}

/// Reads each target and its parent; returns the namespaces whose objects will be fenced and
/// the longest health-check waits among them.
async fn check_targets(
    client: &Client,
    c: &Checkup,
    note: &mut impl FnMut(Finding),
) -> (Vec<String>, Waits) {
    let mut waits = Waits::default();
    let mut nss: Vec<String> = Vec::new();
    let mut push = |ns: &str| {
        if !nss.iter().any(|n| n == ns) {
            nss.push(ns.to_string());
        }
    };
    if c.targets.is_empty() {
        push(&c.namespace);
        return (nss, waits);
    }
    for t in &c.targets {
        push(&t.object.namespace);
        let check = format!("target {} exists", t.object);
        let obj = match flux_suspend::object::get_json(client, &t.object).await {
            Ok(v) => {
                note(Finding::ok(check));
                waits.see(&t.object, &v);
                v
            }
            Err(e) => {
                note(Finding::fail(check, read_fix(&e)));
                continue;
            }
        };
        let parent = match &t.parent {
            ParentSpec::Explicit(p) => Some(p.clone()),
            ParentSpec::FromLabels => {
                flux_suspend::object::parent_from_labels(&obj).filter(|p| *p != t.object)
            }
            _ => None,
        };
        if let Some(p) = parent {
            push(&p.namespace);
            let check = format!("parent {p} exists");
            note(match flux_suspend::object::get_json(client, &p).await {
                Ok(v) => {
                    waits.see(&p, &v);
                    Finding::ok(check)
                }
                Err(e) => Finding::fail(check, read_fix(&e)),
            });
        }
    }
    (nss, waits)
}

fn read_fix(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 => "not found: check the name and namespace".into(),
        kube::Error::Api(s) if s.code == 403 => format!("cannot check: forbidden ({})", s.message),
        other => chain(other),
    }
}

/// The controller Deployment exists (and, when read, its JSON for the gate).
async fn check_controller(client: &Client, c: &Checkup) -> (Finding, Option<serde_json::Value>) {
    let ControllerRef { namespace, name } = &c.controller;
    let check = format!("controller Deployment {namespace}/{name} exists");
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(Some(d)) => (Finding::ok(check), serde_json::to_value(d).ok()),
        Ok(None) => (
            Finding::fail(
                check,
                "not found: pass --controller NS/NAME or set [controller] in the config",
            ),
            None,
        ),
        Err(kube::Error::Api(st)) if st.code == 403 && c.strategy != Strategy::Restart => (
            Finding::ok(format!(
                "{check}: not readable by this identity, which only --retire restart needs"
            )),
            None,
        ),
        Err(e) => (Finding::fail(check, read_fix(&e)), None),
    }
}

/// The Deployment `c`, when it exists and may be read (else nothing is said about it).
async fn read_deployment(client: &Client, c: &ControllerRef) -> Option<serde_json::Value> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), &c.namespace);
    let d = api.get_opt(&c.name).await.ok()??;
    serde_json::to_value(d).ok()
}

/// The gate finding of Deployment `c` (always `ok`: the gate is advice).
fn gate_finding(
    c: &ControllerRef,
    deployment: &serde_json::Value,
    longest: Option<(&str, std::time::Duration)>,
) -> Finding {
    let state = gate::gate_state(&gate::container_args(deployment));
    Finding::ok(gate::gate_advice(&c.to_string(), state, longest))
}

/// The Lease's namespace exists: the Lease is there, or a dry-run create is accepted.
async fn check_lease_namespace(client: &Client, l: &LeaseConfig) -> Finding {
    let check = format!("Lease namespace {} exists", l.namespace);
    let api: Api<KubeLease> = Api::namespaced(client.clone(), &l.namespace);
    match api.get_opt(&l.name).await {
        Ok(Some(_)) => return Finding::ok(check),
        Ok(None) => {}
        Err(e) => return Finding::fail(check, read_fix(&e)),
    }
    let probe = KubeLease {
        metadata: ObjectMeta {
            name: Some(l.name.clone()),
            namespace: Some(l.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
    };
    let dry = PostParams {
        dry_run: true,
        field_manager: Some(flux_fence::api::FIELD_MANAGER.into()),
    };
    match api.create(&dry, &probe).await {
        Ok(_) => Finding::ok(check),
        Err(kube::Error::Api(st)) if st.code == 409 => Finding::ok(check),
        Err(kube::Error::Api(st)) if st.code == 404 => Finding::fail(
            check,
            format!(
                "create it (kubectl create namespace {}) or pass --lease NS/NAME",
                l.namespace
            ),
        ),
        Err(e) => Finding::fail(check, read_fix(&e)),
    }
}

async fn check_permission(client: &Client, right: &Right) -> Finding {
    let review = SelfSubjectAccessReview {
        metadata: ObjectMeta::default(),
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(right.group.to_string()),
                resource: Some(right.resource.to_string()),
                verb: Some(right.verb.to_string()),
                namespace: right.namespace.clone(),
                name: right.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        status: None,
    };
    let feature = right.feature.describe();
    let check = format!("may {right} ({feature})");
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &review).await {
        Ok(res) if res.status.as_ref().is_some_and(|s| s.allowed) => Finding::ok(check),
        Ok(_) => Finding::fail(
            check,
            format!(
                "{feature} needs it; add this rule to {} (`flux-handoff rbac` prints the \
                 whole manifest):\n{}",
                right.placement(),
                right.rule().trim_end()
            ),
        ),
        Err(e) => Finding::fail(check, format!("cannot ask the API server: {}", chain(&e))),
    }
}

/// `error: cause: cause` on one line ([`flux_fence::one_line`]).
fn chain(e: &kube::Error) -> String {
    flux_fence::one_line(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_covers_the_targets_explicit_parents_and_also_in_once_each() {
        let ks = flux_suspend::object::kustomization;
        let c = Checkup {
            namespace: "flux-system".into(),
            targets: vec![
                TargetSpec::new(ks("apps", "a"))
                    .with_parent(ParentSpec::Explicit(ks("infra", "root"))),
                TargetSpec::new(ks("apps", "b")),
            ],
            strategy: Strategy::Restart,
            also_in: vec!["extra".into(), "apps".into()],
            ..Checkup::default()
        };
        let plan = c.plan();
        assert_eq!(
            plan.object_namespaces,
            ["flux-system", "apps", "infra", "extra"]
        );
        assert_eq!(
            plan.restart,
            Some(("flux-system".into(), "kustomize-controller".into()))
        );
        assert_eq!(plan.lease, ("flux-system".into(), "flux-handoff".into()));
        let checked = c.plan_in(&["apps".into()], false);
        assert_eq!(checked.object_namespaces, ["apps"]);
        assert_eq!(Checkup::default().plan().restart, None);
    }

    #[test]
    fn a_finding_reads_as_ok_or_fail_with_its_fix() {
        let ok = Finding::ok("API reachable");
        let fail = Finding::fail("target x exists", "not found");
        assert_eq!(ok.to_string(), "ok   API reachable");
        assert_eq!(fail.to_string(), "FAIL target x exists: not found");
        assert_eq!(
            fail.to_json(),
            serde_json::json!({"check": "target x exists", "ok": false, "fix": "not found"})
        );
        assert!(ok.is_ok() && !fail.is_ok());
    }

    #[test]
    fn an_api_answer_reads_as_its_message_and_code() {
        let status = |message: &str, reason: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, reason)
                    .with_code(403)
                    .boxed(),
            )
        };
        let table = [
            (status("nope", "Forbidden"), "nope (HTTP 403 Forbidden)"),
            (
                status("", ""),
                "the API server refused the request (HTTP 403)",
            ),
        ];
        for (e, want) in table {
            assert_eq!(chain(&e), want);
        }
    }
}
