//! security: (a) the `ServiceAccount` of the shipped RBAC (`deploy/rbac.yaml`, namespace renamed)
//! runs the full handoff `run --target infrastructure -- true`: exit 0, the cluster back as
//! before, no fence left. (b) `ghcr reassert` as that `ServiceAccount`, allowed Secrets in two
//! consumer namespaces and not in a third: exit 6 with an error naming the forbidden namespace,
//! and every Secret read back against the fan-out's contract (docs/design/protocol.md: one
//! write in flight at first and one more per success; no write starts once a failure is known;
//! writes in flight finish; the root last, never after a failure). With the forbidden namespace
//! first it is the only write started: nothing is written. With it second, the first consumer's
//! success opens a window of two, so the forbidden and the third consumer start together, before
//! either answers: the first and third are written — the forbidden and the root keep their old
//! value.
//! Every token is registered with [`secret`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testkit::TestNs;
use testkit::registry::LocalRegistry;

use super::cell::{Cell, TARGET};
use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally, finish, last_line, secret};

const SA: &str = "flux-handoff";
const USER: &str = "robot";
const PULL_SECRET: &str = "ghcr-auth";
const KUBE_API: i32 = 6;

/// Both checks in one cell.
pub async fn run(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let cell = Cell::new(s, "chaos-sec").await?;
    let ns = cell.ns.name.clone();
    let docs = testkit::rbac::documents(&ns)?;
    testkit::rbac::apply(&cell.ns.client, &ns, &docs).await?;
    let kubeconfig = sa_kubeconfig(&cell).await?;
    let sa = testkit::config_from(&kubeconfig)
        .await
        .map(Client::try_from)??;
    for (verb, group, resource) in [
        ("patch", "kustomize.toolkit.fluxcd.io", "kustomizations"),
        ("create", "coordination.k8s.io", "leases"),
        ("create", "", "events"),
    ] {
        testkit::rbac::await_may(&sa, verb, group, resource, &ns, true).await?;
    }
    let mut findings = Vec::new();
    let mut ok = 0;
    let mut checks = 0;
    for problems in [
        least_privilege_run(s, base, &cell, &kubeconfig).await?,
        forbidden_namespace(s, base, &cell, &kubeconfig, &sa, true).await?,
        forbidden_namespace(s, base, &cell, &kubeconfig, &sa, false).await?,
    ] {
        checks += 1;
        if problems.is_empty() {
            ok += 1;
        }
        findings.extend(problems);
    }
    testkit::rbac::remove_cluster_scoped(&cell.ns.client, &docs).await;
    cell.shutdown().await;
    Ok(Tally {
        scenario: "security",
        count: checks,
        line: format!(
            "chaos: security checks={checks} ok={ok} violations={}",
            checks - ok
        ),
        findings,
    })
}

/// (a) The full handoff as the least-privilege `ServiceAccount`.
async fn least_privilege_run(
    s: &Settings,
    base: &Baseline,
    cell: &Cell,
    kubeconfig: &Path,
) -> anyhow::Result<Vec<Finding>> {
    let before = cell.state().await?;
    let mut c = cell.cli(kubeconfig);
    c.args(["run", "--target", TARGET, "--", "true"]);
    let (code, _, err) = finish(c.spawn()?, s.run_bound).await?;
    let mut f = Vec::new();
    let what = "security least-privilege run";
    if code != 0 {
        f.push(Finding::new(
            Kind::Other,
            format!("{what}: exit {code}: {}", last_line(&err)),
        ));
    }
    for d in cell.state().await?.diff(&before, &base.allowed) {
        f.push(Finding::new(Kind::UnexpectedChange, format!("{what}: {d}")));
    }
    let fenced = cell.state().await?.fenced();
    if !fenced.is_empty() {
        f.push(Finding::new(
            Kind::LeakedFence,
            format!("{what}: still fenced: {fenced:?}"),
        ));
    }
    Ok(f)
}

/// (b) Consumers `[forbidden, first, last]` (`forbidden_first`) or `[first, forbidden, last]`, then the root
/// Secret in the cell's namespace. The `ServiceAccount` may write Secrets in `first` and `last` (a
/// `RoleBinding` of a Role with the manifest's Secret verbs), not in `forbidden`.
#[allow(clippy::too_many_lines)] // one check, read top to bottom
async fn forbidden_namespace(
    s: &Settings,
    base: &Baseline,
    cell: &Cell,
    kubeconfig: &Path,
    sa: &Client,
    forbidden_first: bool,
) -> anyhow::Result<Vec<Finding>> {
    let what = format!(
        "security reassert with the forbidden namespace {}",
        if forbidden_first { "first" } else { "second" }
    );
    let pass = format!("sec-pw-{}", testkit::random_suffix(20));
    let old = format!("sec-old-{}", testkit::random_suffix(20));
    secret(&pass);
    secret(&old);
    let reg = LocalRegistry::start(&[(USER, &pass)]).await?;
    reg.push_image(USER, &pass, "team/app", "v1").await?;
    let (first, forbidden, last) = (
        TestNs::new("chaos-sec-a").await?,
        TestNs::new("chaos-sec-f").await?,
        TestNs::new("chaos-sec-b").await?,
    );
    let all = [&first, &forbidden, &last, &cell.ns];
    for n in all {
        put_old_secret(n, &reg.host, &old).await?;
    }
    for n in [&first, &last] {
        grant_secrets(n, &cell.ns.name).await?;
        testkit::rbac::await_may(sa, "update", "", "secrets", &n.name, true).await?;
    }
    testkit::rbac::await_may(sa, "get", "", "secrets", &forbidden.name, false).await?;
    let order = if forbidden_first {
        [&forbidden, &first, &last]
    } else {
        [&first, &forbidden, &last]
    };
    let consumers = order.map(|n| n.name.as_str()).join(",");
    let before = versions(&all).await?;
    let state = cell.state().await?;
    let image = format!("{}/team/app:v1", reg.host);
    let root = format!("{}/{PULL_SECRET}", cell.ns.name);
    let mut c = cell.cli(kubeconfig);
    c.env("TOK", &pass).args([
        "ghcr",
        "reassert",
        "--credential-env",
        "TOK",
        "--username",
        USER,
        "--image",
        &image,
        "--insecure-http-host",
        &reg.host,
        "--secret-name",
        PULL_SECRET,
        "--namespace-list",
        &consumers,
        "--root-secret",
        &root,
    ]);
    if !forbidden_first {
        // Inside a handoff, so the pause and its resume are exercised with the failure.
        c.args(["--target", TARGET]);
    }
    let (code, _, err) = finish(c.spawn()?, s.run_bound).await?;
    let mut f = Vec::new();
    let line = last_line(&err);
    if code != KUBE_API {
        f.push(Finding::new(
            Kind::Other,
            format!("{what}: exit {code}, documented {KUBE_API}: {line}"),
        ));
    }
    if !line.starts_with("error: ")
        || !line.contains(&format!("{}/{PULL_SECRET}: forbidden", forbidden.name))
    {
        f.push(Finding::new(
            Kind::Other,
            format!("{what}: the error does not name {}: {line}", forbidden.name),
        ));
    }
    let after = versions(&all).await?;
    let written: Vec<&String> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    let allowed = if forbidden_first {
        Vec::new()
    } else {
        // Sorted as `written` is (it comes from a BTreeMap).
        let mut both = vec![
            format!("{}/{PULL_SECRET}", first.name),
            format!("{}/{PULL_SECRET}", last.name),
        ];
        both.sort();
        both
    };
    if written
        .iter()
        .map(|w| w.as_str())
        .ne(allowed.iter().map(String::as_str))
    {
        f.push(Finding::new(
            Kind::UnexpectedChange,
            format!("{what}: Secrets written {written:?}, the contract allows {allowed:?}"),
        ));
    }
    for n in &allowed {
        let (ns, name) = n.split_once('/').context("namespace/name")?;
        if !holds(&first.client, ns, name, &pass).await? {
            f.push(Finding::new(
                Kind::UnexpectedChange,
                format!("{what}: {n} was written but does not hold the new credential"),
            ));
        }
    }
    for d in cell.state().await?.diff(&state, &base.allowed) {
        f.push(Finding::new(Kind::UnexpectedChange, format!("{what}: {d}")));
    }
    Ok(f)
}

/// `namespace/name` -> resourceVersion of every Secret in `namespaces`.
async fn versions(namespaces: &[&TestNs]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for n in namespaces {
        for sec in n
            .api::<Secret>()
            .list(&kube::api::ListParams::default())
            .await?
            .items
        {
            if let (Some(name), Some(rv)) = (sec.metadata.name, sec.metadata.resource_version) {
                out.insert(format!("{}/{name}", n.name), rv);
            }
        }
    }
    Ok(out)
}

/// Whether Secret `ns/name` holds `pass` for [`USER`] (compared, never printed).
async fn holds(client: &Client, ns: &str, name: &str, pass: &str) -> anyhow::Result<bool> {
    let sec = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let Some(raw) = sec.data.and_then(|d| d.get(".dockerconfigjson").cloned()) else {
        return Ok(false);
    };
    let text = String::from_utf8_lossy(&raw.0).into_owned();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{pass}"));
    Ok(text.contains(&auth) || text.contains(&format!("\"password\":\"{pass}\"")))
}

/// A pull Secret holding an old credential for `host`.
async fn put_old_secret(n: &TestNs, host: &str, old: &str) -> anyhow::Result<()> {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{old}"));
    let config = json!({ "auths": { host: { "username": USER, "password": old, "auth": auth } } });
    let sec: Secret = serde_json::from_value(json!({
        "metadata": { "name": PULL_SECRET },
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": { ".dockerconfigjson": config.to_string() },
    }))?;
    let api = n.api::<Secret>();
    if api.get_opt(PULL_SECRET).await?.is_some() {
        api.delete(PULL_SECRET, &DeleteParams::default()).await?;
    }
    api.create(&PostParams::default(), &sec).await?;
    Ok(())
}

/// The manifest's Secret rule, bound in `n` to the `ServiceAccount` of namespace `sa_ns`
/// (as deploy/rbac.yaml tells users to do for other namespaces).
async fn grant_secrets(n: &TestNs, sa_ns: &str) -> anyhow::Result<()> {
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": SA },
        "rules": [{ "apiGroups": [""], "resources": ["secrets"],
                    "verbs": ["get", "create", "update", "patch"] }],
    }))?;
    n.api::<Role>()
        .create(&PostParams::default(), &role)
        .await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": SA },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA },
        "subjects": [{ "kind": "ServiceAccount", "name": SA, "namespace": sa_ns }],
    }))?;
    n.api::<RoleBinding>()
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// A kubeconfig authenticating as the `ServiceAccount` (a fresh bound token, registered as a
/// secret), next to the cell's other files.
async fn sa_kubeconfig(cell: &Cell) -> anyhow::Result<PathBuf> {
    let token = cell.ns.service_account_token(SA).await?;
    secret(&token);
    let path = cell.through_proxy.with_file_name("kubeconfig-sa");
    testkit::kubeconfig_with_token(&cell.direct, "sa", &token, &path)?;
    Ok(path)
}
