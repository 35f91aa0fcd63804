//! The chain on record (issue 25) under crashes and a second Lease.
//!
//! - `outside` — a target outside the default namespace: a Kustomization in a namespace of
//!   its own, applied by the cell's parent. Odd rounds: `run` is killed (SIGKILL) while its
//!   command runs, then `fences recover --yes` (scope: the cell's namespace only) must find the target
//!   through the Lease's chain record and restore it, the parent and the Lease. Even rounds:
//!   `pause`, then the resume line it printed, run exactly as printed, must give everything
//!   back.
//! - `second-lease` — a run under `--lease <ns>/other` while `fences recover --yes` with the
//!   default Lease runs: the recovery must leave its fences alone. Odd rounds: the run then
//!   ends by itself and must exit 0 with everything given back. Even rounds: the run is
//!   killed (SIGKILL); recovery with the default Lease still keeps its fences, recovery with
//!   `--lease <ns>/other` releases them.
//!
//! Every round ends by comparing what the server holds (spec and annotations of every
//! member, the Lease holder and its chain record) with the state before.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use flux_model::model::{FluxModel, ModelConfig, ModelHandle};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;
use testkit::TestNs;
use testkit::fixtures::{kustomization, kustomization_resource};

use super::cell::{Cell, LEASE, PARENT, TARGET};
use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally, finish};

const CHAIN_KEY: &str = "flux-handoff.io/chain";
const OTHER_LEASE: &str = "other";

/// `outside`: a target in a namespace of its own.
pub async fn outside(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let cell = Cell::new(s, "chaos-outside").await?;
    let tenant = Tenant::new(&cell).await?;
    let mut findings = Vec::new();
    let (mut crashed, mut printed) = (0, 0);
    for round in 1..=s.rounds {
        let before = snapshot(&cell, &tenant, &[LEASE]).await?;
        let problems = if round % 2 == 1 {
            crashed += 1;
            crash_then_recover(s, &cell, &tenant).await?
        } else {
            printed += 1;
            pause_then_printed_resume(s, &cell, &tenant).await?
        };
        findings.extend(problems.into_iter().map(|f| Finding {
            text: format!("outside round {round}: {}", f.text),
            ..f
        }));
        let after = snapshot(&cell, &tenant, &[LEASE]).await?;
        findings.extend(diff(&before, &after, &base.allowed, round, "outside"));
    }
    cell.shutdown().await;
    Ok(Tally {
        scenario: "outside",
        count: s.rounds,
        line: format!(
            "chaos: outside rounds={} crash_recovered={crashed} printed_resume={printed} violations={}",
            s.rounds,
            findings.len()
        ),
        findings,
    })
}

/// `second-lease`: a run under another Lease while recovery runs with the default one.
pub async fn second_lease(s: &Settings, base: &Baseline) -> anyhow::Result<Tally> {
    let cell = Cell::new(s, "chaos-lease2").await?;
    let mut findings = Vec::new();
    let (mut ended, mut killed) = (0, 0);
    for round in 1..=s.rounds {
        let before = snapshot(&cell, &NoTenant, &[LEASE, OTHER_LEASE]).await?;
        let problems = other_lease_round(s, &cell, round % 2 == 0).await?;
        if round % 2 == 0 {
            killed += 1;
        } else {
            ended += 1;
        }
        findings.extend(problems.into_iter().map(|f| Finding {
            text: format!("second-lease round {round}: {}", f.text),
            ..f
        }));
        let after = snapshot(&cell, &NoTenant, &[LEASE, OTHER_LEASE]).await?;
        findings.extend(diff(&before, &after, &base.allowed, round, "second-lease"));
    }
    cell.shutdown().await;
    Ok(Tally {
        scenario: "second-lease",
        count: s.rounds,
        line: format!(
            "chaos: second-lease rounds={} ended={ended} killed_then_recovered={killed} violations={}",
            s.rounds,
            findings.len()
        ),
        findings,
    })
}

/// A namespace of its own holding Kustomization `app`, applied by the cell's parent (its
/// labels), with a controller model for it.
struct Tenant {
    ns: TestNs,
    _model: ModelHandle,
}

const APP: &str = "app";

impl Tenant {
    async fn new(cell: &Cell) -> anyhow::Result<Self> {
        let ns = TestNs::new("chaos-tenant").await?;
        let obj = kustomization(APP)
            .managed_by(PARENT, &cell.namespace)
            .build(&ns.name);
        let api: Api<DynamicObject> =
            Api::namespaced_with(ns.client.clone(), &ns.name, &kustomization_resource());
        api.create(&PostParams::default(), &obj).await?;
        let model = FluxModel::start(ns.client.clone(), ModelConfig::namespaced(&ns.name));
        model.wait_settled(APP, 0).await?;
        Ok(Self { ns, _model: model })
    }

    fn target(&self) -> String {
        format!("ks/{}/{APP}", self.ns.name)
    }
}

/// The objects a snapshot reads besides the cell's parent and target.
trait Extra {
    fn extra(&self) -> Option<(String, String)>;
}

impl Extra for Tenant {
    fn extra(&self) -> Option<(String, String)> {
        Some((self.ns.name.clone(), APP.to_string()))
    }
}

struct NoTenant;

impl Extra for NoTenant {
    fn extra(&self) -> Option<(String, String)> {
        None
    }
}

/// What the server holds: spec and annotations of each member, and of each Lease named its
/// holder and whether it carries a chain record.
type Snapshot = BTreeMap<String, String>;

async fn snapshot(cell: &Cell, extra: &dyn Extra, leases: &[&str]) -> anyhow::Result<Snapshot> {
    let mut out = BTreeMap::new();
    let mut objects = vec![
        (cell.namespace.clone(), PARENT.to_string()),
        (cell.namespace.clone(), TARGET.to_string()),
    ];
    objects.extend(extra.extra());
    for (ns, name) in objects {
        let o = flux_suspend::object::get_json(
            &cell.client,
            &flux_suspend::object::kustomization(&ns, &name),
        )
        .await?;
        let key = format!("{ns}/{name}");
        out.insert(format!("{key} spec"), o["spec"].to_string());
        if let Some(a) = o
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            for (k, v) in a {
                out.insert(format!("{key} annotation {k}"), v.to_string());
            }
        }
    }
    for name in leases {
        let l = Api::<Lease>::namespaced(cell.client.clone(), &cell.namespace)
            .get_opt(name)
            .await?;
        let holder = l
            .as_ref()
            .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
            .filter(|h| !h.is_empty());
        if let Some(h) = holder {
            out.insert(format!("lease {name} held by"), h);
        }
        if l.as_ref()
            .and_then(|l| l.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key(CHAIN_KEY))
        {
            out.insert(format!("lease {name} chain record"), "present".into());
        }
    }
    Ok(out)
}

fn diff(
    before: &Snapshot,
    after: &Snapshot,
    allowed: &[String],
    round: usize,
    scenario: &str,
) -> Vec<Finding> {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .filter(|k| {
            !allowed
                .iter()
                .any(|a| k.ends_with(&format!(" annotation {a}")))
        })
        .map(|k| {
            let kind = if k.contains("/owner") || k.starts_with("lease ") {
                Kind::LeakedFence
            } else {
                Kind::UnexpectedChange
            };
            Finding::new(
                kind,
                format!("{scenario} round {round}: afterwards {k} differs"),
            )
        })
        .collect()
}

/// A marker file the command creates and waits on (it ends when the file is removed).
fn marker(s: &Settings) -> (std::path::PathBuf, String) {
    let m = s
        .scratch
        .join(format!("chain-mark-{}", testkit::random_suffix(6)));
    let p = m.display();
    let script = format!("touch {p} && while [ -e {p} ]; do sleep 0.1; done");
    (m, script)
}

async fn wait_for(path: &std::path::Path, child: &mut tokio::process::Child) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
    while !path.exists() {
        if child.try_wait()?.is_some() {
            anyhow::bail!("the run ended before its command started");
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("the command never started");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn crash_then_recover(
    s: &Settings,
    cell: &Cell,
    tenant: &Tenant,
) -> anyhow::Result<Vec<Finding>> {
    let mut problems = Vec::new();
    let (m, script) = marker(s);
    let target = tenant.target();
    let mut c = cell.cli(&cell.direct);
    c.args([
        "run",
        "--target",
        target.as_str(),
        "--",
        "sh",
        "-c",
        script.as_str(),
    ]);
    let mut child = c.spawn()?;
    wait_for(&m, &mut child).await?;
    child.start_kill()?;
    let _ = finish(child, s.run_bound).await;
    let _ = std::fs::remove_file(&m);
    // `fences` scans the cell's namespace only: the target is listed through the record.
    let report = cell.fences().await?;
    let shown = super::cell::listed(&report);
    if !shown.iter().any(|n| n == APP) {
        problems.push(Finding::new(
            Kind::LeakedFence,
            format!("fences does not list {target}: {shown:?}"),
        ));
    }
    cell.wait_lease_expired(Duration::from_mins(1)).await?;
    let (code, _, err) = cell
        .direct(&["fences", "recover", "--yes", "--include-paused"])
        .await?;
    if code != 0 {
        problems.push(Finding::new(
            Kind::LeakedFence,
            format!("fences recover exited {code}: {}", super::last_line(&err)),
        ));
    }
    Ok(problems)
}

async fn pause_then_printed_resume(
    s: &Settings,
    cell: &Cell,
    tenant: &Tenant,
) -> anyhow::Result<Vec<Finding>> {
    let mut problems = Vec::new();
    let target = tenant.target();
    let mut c = cell.cli(&cell.direct);
    c.args(["pause", "--target", target.as_str()]);
    let (code, _, err) = finish(c.spawn()?, s.run_bound).await?;
    if code != 0 {
        problems.push(Finding::new(
            Kind::Other,
            format!("pause exited {code}: {}", super::last_line(&err)),
        ));
        return Ok(problems);
    }
    let line = err
        .lines()
        .find_map(|l| l.split_once("resume with: ").map(|(_, r)| r.to_string()))
        .context("pause printed no resume line")?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut c = tokio::process::Command::new(&s.bin);
    c.env_remove("GITHUB_ACTIONS")
        .env_remove("FLUX_HANDOFF_CONFIG")
        .env_remove("FLUX_HANDOFF_HOLDER")
        .env_remove("KUBECONFIG")
        .args(&words[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let (code, _, err) = finish(c.spawn()?, s.run_bound).await?;
    if code != 0 {
        problems.push(Finding::new(
            Kind::LeakedFence,
            format!(
                "the printed `{line}` exited {code}: {}",
                super::last_line(&err)
            ),
        ));
    }
    Ok(problems)
}

async fn other_lease_round(s: &Settings, cell: &Cell, kill: bool) -> anyhow::Result<Vec<Finding>> {
    let mut problems = Vec::new();
    let other = format!("{}/{OTHER_LEASE}", cell.namespace);
    let (m, script) = marker(s);
    let mut c = cell.cli(&cell.direct);
    c.args(["run", "--target", TARGET, "--lease", other.as_str()]);
    c.args(["--", "sh", "-c", script.as_str()]);
    let mut child = c.spawn()?;
    wait_for(&m, &mut child).await?;
    let mut child = Some(child);
    let owner = |o: &Value| {
        o.pointer("/metadata/annotations/flux-handoff.io~1owner")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let held = owner(&cell.get(TARGET).await?);
    if kill && let Some(mut c) = child.take() {
        c.start_kill()?;
        let _ = finish(c, s.run_bound).await;
    }
    // The default Lease (the cell's config) is not the one these fences were taken under.
    let (code, _, err) = cell.direct(&["fences", "recover", "--yes"]).await?;
    if code != 0 {
        problems.push(Finding::new(
            Kind::Other,
            format!(
                "fences recover (default Lease) exited {code}: {}",
                super::last_line(&err)
            ),
        ));
    }
    for name in [TARGET, PARENT] {
        if owner(&cell.get(name).await?) != held {
            problems.push(Finding::new(
                Kind::UnexpectedChange,
                format!("recovery with the default Lease touched {name}, fenced under {other}"),
            ));
        }
    }
    let _ = std::fs::remove_file(&m);
    if kill {
        let (code, _, err) = cell
            .direct(&["fences", "--lease", other.as_str(), "recover", "--yes"])
            .await?;
        if code != 0 {
            problems.push(Finding::new(
                Kind::LeakedFence,
                format!(
                    "fences recover --lease {other} exited {code}: {}",
                    super::last_line(&err)
                ),
            ));
        }
    } else if let Some(c) = child {
        let (code, _, err) = finish(c, s.run_bound).await?;
        if code != 0 {
            problems.push(Finding::new(
                Kind::Other,
                format!(
                    "the run under {other} exited {code}: {}",
                    super::last_line(&err)
                ),
            ));
        }
    }
    Ok(problems)
}
