//! `flux-handoff doctor`: a read-only preflight against any cluster. It checks that the API is
//! reachable, the Flux CRDs are served, the controller Deployment and the Lease namespace
//! exist, and — one `SelfSubjectAccessReview` per verb, resource, namespace and name — every
//! right the configured features need (`flux_suspend::rights` decides which). Each line is
//! `ok <check>` or `FAIL <check>: <fix>`, a missing right naming the feature that needs it and
//! the exact rule lines to add; exit 0 when all pass, 6 otherwise.

use clap::Args;
use flux_suspend::retire::Strategy;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;

use flux_suspend::rights::{self, Right};

use super::ghcr::SecretArgs;
use crate::cli::{FindArgs, Global, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::settings::{ParentSpec, Settings};
use crate::{client, config, exit, settings};

/// `doctor`: the same targets, Lease, controller and config as `pause`; the same fence scope
/// as `fences`; the same Secrets and sources as `ghcr reassert`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub find: FindArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
}

/// The result of every check, printed as it is made.
struct Report<'a> {
    out: &'a mut Output,
    checks: Vec<serde_json::Value>,
    failed: usize,
}

impl Report<'_> {
    fn ok(&mut self, check: &str) {
        if !self.out.is_json() {
            println!("ok   {check}");
        }
        self.checks.push(json!({ "check": check, "ok": true }));
    }

    fn fail(&mut self, check: &str, fix: &str) {
        if !self.out.is_json() {
            println!("FAIL {check}: {fix}");
        }
        self.failed += 1;
        self.checks
            .push(json!({ "check": check, "ok": false, "fix": fix }));
    }
}

/// Runs every check; exit 0 when all pass, 6 otherwise.
pub async fn run(global: &Global, args: &DoctorArgs, out: &mut Output) -> Result<u8, Failure> {
    let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
    let named = !(args.targets.target.is_empty() && file.targets.is_empty());
    let mut targets = args.targets.clone();
    if !named {
        // No target configured: check the objects of the default namespace.
        targets.target.push("unused".into());
    }
    let s = settings::resolve(global, &targets, &file).map_err(Failure::usage)?;
    let ghcr = super::rbac::ghcr_plan(&args.secrets, &file, &global.namespace)?;
    let client = client::client(global).await?;
    let mut r = Report {
        out,
        checks: Vec::new(),
        failed: 0,
    };
    match client.apiserver_version().await {
        Ok(v) => r.ok(&format!("API reachable: Kubernetes {}", v.git_version)),
        Err(e) => {
            r.fail(
                "API reachable",
                &format!(
                    "{} (check --kubeconfig/--context and the network)",
                    crate::failure::chain(&e)
                ),
            );
            return finish(&mut r);
        }
    }
    check_crds(&client, &mut r).await;
    let object_namespaces = check_targets(&client, &s, named, &global.namespace, &mut r).await;
    check_controller(&client, &s, &mut r).await;
    check_lease_namespace(&client, &s, &mut r).await;
    let object_namespaces = match args.find.scope(&object_namespaces) {
        Ok(flux_fence::discover::Scope::Namespaces(n)) => n,
        _ => object_namespaces,
    };
    let plan = super::rbac::plan(&s, object_namespaces, args.find.all_namespaces, ghcr);
    for right in rights::rights(&plan) {
        check_permission(&client, &right, &mut r).await;
    }
    finish(&mut r)
}

fn finish(r: &mut Report<'_>) -> Result<u8, Failure> {
    let failed = r.failed;
    let checks = std::mem::take(&mut r.checks);
    r.out.fact("checks", json!(checks));
    if failed == 0 {
        Ok(exit::SUCCESS)
    } else {
        Err(Failure::new(
            exit::KUBE_API,
            format!("doctor: {failed} check(s) failed"),
        ))
    }
}

async fn check_crds(client: &Client, r: &mut Report<'_>) {
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
        match client.list_api_group_resources(gv).await {
            Ok(list) if list.resources.iter().any(|x| x.name == plural) => r.ok(&check),
            Ok(_) | Err(kube::Error::Api(_)) => r.fail(
                &check,
                &format!("install Flux's {kind} CRD (flux install, or the CRD manifests)"),
            ),
            Err(e) => r.fail(&check, &crate::failure::chain(&e)),
        }
    }
}

/// Reads each target and its parent; returns the namespaces whose objects will be fenced.
async fn check_targets(
    client: &Client,
    s: &Settings,
    named: bool,
    default_ns: &str,
    r: &mut Report<'_>,
) -> Vec<String> {
    let mut nss = Vec::new();
    let mut push = |ns: &str| {
        if !nss.iter().any(|n: &String| n == ns) {
            nss.push(ns.to_string());
        }
    };
    if !named {
        push(default_ns);
        return nss;
    }
    for t in &s.targets {
        push(&t.object.namespace);
        let check = format!("target {} exists", t.object);
        let obj = match flux_suspend::object::get_json(client, &t.object).await {
            Ok(v) => {
                r.ok(&check);
                v
            }
            Err(e) => {
                r.fail(&check, &read_fix(&e));
                continue;
            }
        };
        let parent = match &t.parent {
            ParentSpec::None => None,
            ParentSpec::Explicit(p) => Some(p.clone()),
            ParentSpec::FromLabels => flux_suspend::flux::parent_of(&obj)
                .map(|p| flux_suspend::object::kustomization(&p.namespace, &p.name))
                .filter(|p| *p != t.object),
        };
        if let Some(p) = parent {
            push(&p.namespace);
            let check = format!("parent {p} exists");
            match flux_suspend::object::get_json(client, &p).await {
                Ok(_) => r.ok(&check),
                Err(e) => r.fail(&check, &read_fix(&e)),
            }
        }
    }
    nss
}

fn read_fix(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 => "not found: check the name and namespace".into(),
        kube::Error::Api(s) if s.code == 403 => format!("cannot check: forbidden ({})", s.message),
        other => crate::failure::chain(other),
    }
}

async fn check_controller(client: &Client, s: &Settings, r: &mut Report<'_>) {
    let c = &s.controller;
    let check = format!("controller Deployment {}/{} exists", c.namespace, c.name);
    let api: Api<Deployment> = Api::namespaced(client.clone(), &c.namespace);
    match api.get_opt(&c.name).await {
        Ok(Some(_)) => r.ok(&check),
        Ok(None) => r.fail(
            &check,
            "not found: pass --controller NS/NAME or set [controller] in the config",
        ),
        Err(kube::Error::Api(st)) if st.code == 403 && s.strategy != Strategy::Restart => r.ok(
            &format!("{check}: not readable by this identity, which only --retire restart needs"),
        ),
        Err(e) => r.fail(&check, &read_fix(&e)),
    }
}

/// The Lease's namespace exists: the Lease is there, or a dry-run create is accepted.
async fn check_lease_namespace(client: &Client, s: &Settings, r: &mut Report<'_>) {
    let l = &s.lease;
    let check = format!("Lease namespace {} exists", l.namespace);
    let api: Api<KubeLease> = Api::namespaced(client.clone(), &l.namespace);
    match api.get_opt(&l.name).await {
        Ok(Some(_)) => return r.ok(&check),
        Ok(None) => {}
        Err(e) => return r.fail(&check, &read_fix(&e)),
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
        ..PostParams::default()
    };
    match api.create(&dry, &probe).await {
        Ok(_) => r.ok(&check),
        Err(kube::Error::Api(st)) if st.code == 409 => r.ok(&check),
        Err(kube::Error::Api(st)) if st.code == 404 => r.fail(
            &check,
            &format!(
                "create it (kubectl create namespace {}) or pass --lease NS/NAME",
                l.namespace
            ),
        ),
        Err(e) => r.fail(&check, &read_fix(&e)),
    }
}

async fn check_permission(client: &Client, right: &Right, r: &mut Report<'_>) {
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
        Ok(res) if res.status.as_ref().is_some_and(|s| s.allowed) => r.ok(&check),
        Ok(_) => r.fail(
            &check,
            &format!(
                "{feature} needs it; add this rule to {} (`flux-handoff rbac` prints the \
                 whole manifest):\n{}",
                right.placement(),
                right.rule().trim_end()
            ),
        ),
        Err(e) => r.fail(
            &check,
            &format!("cannot ask the API server: {}", crate::failure::chain(&e)),
        ),
    }
}
