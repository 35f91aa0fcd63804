//! The hostile cases: the files they point at and the tables of invocations, grouped by the
//! setup they need (none, objects held by someone else, a registry).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::super::cell::{Cell, LEASE, PARENT, TARGET};
use super::super::secret;
use super::{Case, KUBE_API, REFUSED, Run, USAGE, case};
/// Files the cases point at.
pub(super) struct Files {
    malformed_kc: PathBuf,
    closed_kc: PathBuf,
    bad_token_kc: PathBuf,
    pub(super) configs: BTreeMap<&'static str, PathBuf>,
    pub(super) big: PathBuf,
}

impl Files {
    pub(super) fn write(dir: &Path, cell: &Cell) -> anyhow::Result<Self> {
        let token = format!("hostile-kc-{}", testkit::random_suffix(24));
        secret(&token);
        let malformed_kc = dir.join("kubeconfig-malformed");
        std::fs::write(
            &malformed_kc,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:1\"}}}}]\n\
                 users: [{{name: u, user: {{token: \"{token}}}}}]\ncurrent-context: x\n"
            ),
        )?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let closed_kc = dir.join("kubeconfig-closed");
        std::fs::write(
            &closed_kc,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}}}]\n\
                 users: [{{name: u, user: {{token: {token}}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
            ),
        )?;
        // The real server with a token it never issued.
        let mut kc: Value =
            serde_json::to_value(kube::config::Kubeconfig::read_from(&cell.direct)?)?;
        kc["users"] = json!([{ "name": "forged", "user": { "token": token } }]);
        for ctx in kc["contexts"].as_array_mut().into_iter().flatten() {
            ctx["context"]["user"] = json!("forged");
        }
        let bad_token_kc = dir.join("kubeconfig-forged");
        std::fs::write(&bad_token_kc, serde_json::to_string(&kc)?)?;
        // A file shaped like /etc/shadow, reached by `../../etc/shadow` from the cwd.
        let hash = format!("$6$hostile${}", testkit::random_suffix(40));
        secret(&hash);
        std::fs::write(
            dir.join("etc").join("shadow"),
            format!("root:{hash}:19000:0:99999:7:::\n"),
        )?;
        let base = std::fs::read_to_string(&cell.config)?;
        let mut configs = BTreeMap::new();
        for (name, text) in [
            (
                "unknown-key",
                format!("{base}\n[fence]\nretire = \"ack\"\nquiesence = true\n"),
            ),
            (
                "duplicate-key",
                format!("{base}\n[fence]\nretire = \"ack\"\nretire = \"none\"\n"),
            ),
            ("empty", String::new()),
            (
                "bad-duration",
                base.replace("duration = \"", "duration = \"forever"),
            ),
            (
                "short-lease",
                base.replace("duration = \"", "duration = \"1s\" # was "),
            ),
            (
                "wrong-kind",
                format!("{base}\n[[targets]]\nkind = \"GitRepository\"\nname = \"{TARGET}\"\n"),
            ),
            (
                "wrong-type",
                format!("{base}\n[fence]\nquiesce = \"yes please\"\n"),
            ),
            (
                "not-toml",
                "\u{0}\u{1}binary garbage \u{7f}[[[\n".to_string(),
            ),
            (
                "both-namespaces",
                format!(
                    "{base}\n[ghcr]\nnamespaces = [\"a\"]\nnamespace_selector = \"x=y\"\nsecret_name = \"s\"\n"
                ),
            ),
        ] {
            let p = dir.join(format!("config-{name}.toml"));
            std::fs::write(&p, text)?;
            configs.insert(name, p);
        }
        let big = dir.join("docker-config-oversized.json");
        let blob = "QUFB".repeat(600_000);
        std::fs::write(
            &big,
            format!("{{\"auths\":{{\"127.0.0.1:1\":{{\"auth\":\"{blob}\"}}}}}}"),
        )?;
        Ok(Self {
            malformed_kc,
            closed_kc,
            bad_token_kc,
            configs,
            big,
        })
    }
}

/// Cases on input alone (kubeconfig, flags, config files, names) against the seeded cell.
#[allow(clippy::too_many_lines)] // a table of cases, one per line
pub(super) fn input_cases(f: &Files, ns: &str) -> Vec<Case> {
    let pause = ["pause", "--target", TARGET];
    let cfg = |n: &str| f.configs[n].clone();
    vec![
        case(
            "kubeconfig malformed (token on the broken line)",
            USAGE,
            &pause,
        )
        .kubeconfig(&f.malformed_kc),
        case("kubeconfig file missing", USAGE, &pause)
            .kubeconfig(Path::new("/nonexistent/kubeconfig")),
        case("server unreachable (closed port)", KUBE_API, &pause).kubeconfig(&f.closed_kc),
        case("kubeconfig forged token", KUBE_API, &pause).kubeconfig(&f.bad_token_kc),
        case(
            "kubeconfig unknown context",
            USAGE,
            &["--context", "nope", "pause", "--target", TARGET],
        ),
        case(
            "target missing",
            KUBE_API,
            &["pause", "--target", "not-there"],
        ),
        case(
            "wrong kind (hr/ names a Kustomization)",
            KUBE_API,
            &["pause", "--target", &format!("hr/{TARGET}")],
        ),
        case(
            "explicit parent missing",
            KUBE_API,
            &["pause", "--target", TARGET, "--parent", "ghost"],
        ),
        case(
            "unknown target kind prefix",
            USAGE,
            &["pause", "--target", &format!("gitrepository/{ns}/{TARGET}")],
        ),
        case(
            "target with path traversal",
            USAGE,
            &["pause", "--target", "../../etc/passwd"],
        ),
        case(
            "target namespace .. (a request path)",
            USAGE,
            &["pause", "--target", &format!("../{TARGET}")],
        ),
        case("target ./..", USAGE, &["pause", "--target", "./.."]),
        case(
            "lease namespace ..",
            USAGE,
            &["pause", "--target", TARGET, "--lease", "../flux-handoff"],
        ),
        case(
            "parent ..",
            USAGE,
            &["pause", "--target", TARGET, "--parent", ".."],
        ),
        case(
            "fences release of ks/../name",
            USAGE,
            &[
                "fences",
                "release",
                "--holder",
                "local-x-1-abcdef",
                &format!("ks/../{TARGET}"),
            ],
        ),
        case("fences --in ..", USAGE, &["fences", "--in", ".."]),
        case(
            "target with control characters",
            USAGE,
            &["pause", "--target", "infra\u{1b}[2J\nstructure"],
        ),
        case(
            "bad namespace name",
            USAGE,
            &["-n", "Bad_NS", "pause", "--target", TARGET],
        ),
        case(
            "bad lease name",
            USAGE,
            &["pause", "--target", TARGET, "--lease", "a/b/c"],
        ),
        case(
            "bad retire strategy",
            USAGE,
            &["pause", "--target", TARGET, "--retire", "bogus"],
        ),
        case(
            "bad duration",
            USAGE,
            &["--timeout", "1x", "pause", "--target", TARGET],
        ),
        case(
            "zero interval",
            USAGE,
            &["--interval", "0s", "pause", "--target", TARGET],
        ),
        case(
            "interval above timeout",
            USAGE,
            &["--interval", "1h", "pause", "--target", TARGET],
        ),
        case(
            "conflicting flags --quiet --verbose",
            USAGE,
            &["-q", "-v", "pause", "--target", TARGET],
        ),
        case(
            "reason with a newline and workflow command",
            USAGE,
            &[
                "--reason",
                "deploy\n::add-mask::x",
                "pause",
                "--target",
                TARGET,
            ],
        ),
        case("run without a command", USAGE, &["run", "--target", TARGET]),
        case(
            "resume --holder malformed",
            USAGE,
            &["resume", "--holder", "bad holder;\n7", "--target", TARGET],
        ),
        case(
            "resume --holder empty",
            USAGE,
            &["resume", "--holder", "", "--target", TARGET],
        ),
        case(
            "fences release malformed object",
            USAGE,
            &[
                "fences",
                "release",
                "--holder",
                "local-x-1-abcdef",
                "ks/a/b/c/d",
            ],
        ),
        case("config unknown key", USAGE, &pause).config(&cfg("unknown-key")),
        case("config duplicate key", USAGE, &pause).config(&cfg("duplicate-key")),
        case("config empty, no target", USAGE, &["pause"]).config(&cfg("empty")),
        case("config bad duration", USAGE, &pause).config(&cfg("bad-duration")),
        case("config lease shorter than 2s", USAGE, &pause).config(&cfg("short-lease")),
        case("config wrong kind", USAGE, &["pause"]).config(&cfg("wrong-kind")),
        case("config wrong value type", USAGE, &pause).config(&cfg("wrong-type")),
        case("config binary garbage", USAGE, &pause).config(&cfg("not-toml")),
        case("config missing file", USAGE, &pause)
            .config(Path::new("/nonexistent/flux-handoff.toml")),
        case("config path traversal (../../etc/shadow)", USAGE, &pause)
            .config(Path::new("../../etc/shadow")),
        case("config is a directory", USAGE, &pause).config(Path::new("..")),
        case("config endless (/dev/zero)", USAGE, &pause).config(Path::new("/dev/zero")),
        case("kubeconfig endless (/dev/zero)", USAGE, &pause).kubeconfig(Path::new("/dev/zero")),
    ]
}

/// Objects and Leases held or suspended by someone else.
pub(super) async fn held_cases(r: &mut Run<'_>) -> anyhow::Result<()> {
    let foreign = flux_fence::Holder::local("elsewhere", 4242).to_string();
    let owner = "flux-handoff.io/owner";
    let prior = "flux-handoff.io/prior";
    let pause = ["pause", "--target", TARGET];
    let ks = kustomizations(r.cell);
    let patch = |v: Value| {
        let ks = ks.clone();
        async move {
            ks.patch(TARGET, &PatchParams::default(), &Patch::Merge(&v))
                .await?;
            anyhow::Ok(())
        }
    };
    // The parent re-applies its children from Git: a target suspended by hand would be
    // unsuspended by the next parent reconcile, so Git says `suspend: true` meanwhile (as a
    // person suspending it for good would commit).
    let targets = target_namespaces(r.cell).await?;
    let ns = r.cell.ns.name.clone();
    let git = |suspend: bool| -> Vec<Value> {
        targets
            .iter()
            .map(|(name, target_ns)| {
                let mut m = flux_model::model::seed::child_manifest(&ns, name, target_ns);
                m["spec"]["suspend"] = json!(suspend && name == TARGET);
                m
            })
            .collect()
    };
    r.cell.model.set_git(PARENT, git(true));
    patch(json!({ "spec": { "suspend": true } })).await?;
    r.check(case(
        "target suspended by someone else (no fence)",
        REFUSED,
        &pause,
    ))
    .await?;
    r.check(case(
        "run on a target suspended by someone else",
        REFUSED,
        &["run", "--target", TARGET, "--", "true"],
    ))
    .await?;
    let fence = json!({ "metadata": { "annotations": {
        owner: format!("{foreign};3"),
        prior: "{\"t\":\"2026-01-01T00:00:00Z\",\"m\":{}}",
    } } });
    patch(fence).await?;
    r.check(case("foreign owner fence on the target", REFUSED, &pause))
        .await?;
    r.check(case(
        "fences release of a fence not ours",
        REFUSED,
        &["fences", "release", "--holder", "local-me-1-abcdef", TARGET],
    ))
    .await?;
    r.check(case(
        "resume of a holder that holds nothing here",
        0,
        &[
            "resume",
            "--holder",
            "local-me-1-abcdef",
            "--target",
            TARGET,
        ],
    ))
    .await?;
    patch(json!({ "metadata": { "annotations": { owner: "garbage;;x\u{7}", prior: null } } }))
        .await?;
    r.check(case(
        "malformed owner annotation on the target",
        REFUSED,
        &pause,
    ))
    .await?;
    r.cell.model.set_git(PARENT, git(false));
    patch(json!({ "metadata": { "annotations": { owner: null, prior: null } }, "spec": { "suspend": false } })).await?;
    r.check(case(
        "fences release of an object not fenced",
        REFUSED,
        &["fences", "release", "--holder", "local-me-1-abcdef", TARGET],
    ))
    .await?;
    // A live Lease of another holder.
    let lease: Lease = serde_json::from_value(json!({
        "metadata": { "name": LEASE },
        "spec": { "holderIdentity": foreign, "leaseDurationSeconds": 3600,
                  "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now()) },
    }))?;
    let leases = r.cell.ns.api::<Lease>();
    if leases.get_opt(LEASE).await?.is_some() {
        leases.delete(LEASE, &DeleteParams::default()).await?;
    }
    leases.create(&PostParams::default(), &lease).await?;
    r.check(case("Lease held by someone else", REFUSED, &pause))
        .await?;
    leases.delete(LEASE, &DeleteParams::default()).await?;
    Ok(())
}

/// `spec.targetNamespace` of the seeded children, by name.
async fn target_namespaces(cell: &Cell) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for name in [TARGET, "apps"] {
        let o = kustomizations(cell).get(name).await?;
        let t = o.data["spec"]["targetNamespace"]
            .as_str()
            .unwrap_or_default();
        out.insert(name.to_string(), t.to_string());
    }
    Ok(out)
}

fn kustomizations(cell: &Cell) -> Api<DynamicObject> {
    Api::namespaced_with(
        cell.ns.client.clone(),
        &cell.ns.name,
        &testkit::fixtures::kustomization_resource(),
    )
}
