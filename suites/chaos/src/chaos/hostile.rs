//! hostile input: the real binary fed broken kubeconfigs, unreachable servers, missing objects
//! and CRDs, objects held or suspended by someone else, broken configs and flags, hostile
//! credentials and path traversal. Each case must exit with its documented code, print its
//! error as one line (no backtrace, no snippet dump, no log noise), and change nothing: the
//! spec and annotations of parent and target, the Lease, the Secrets and the flux-handoff
//! Events in the namespace are read back before and after; a case answered with exit 2
//! ("nothing was touched") must not have sent a single request to the API server.

mod cases;
mod ghcr;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::ListParams;
use tokio::process::Command;

use super::cell::{Cell, LEASE, State};
use super::discover::Baseline;
use super::{Finding, Kind, Settings, Tally, error_line_problem, finish};
use cases::{Files, held_cases, input_cases};
use ghcr::ghcr_cases;

const USAGE: i32 = 2;
const REFUSED: i32 = 3;
const REGISTRY: i32 = 5;
const KUBE_API: i32 = 6;
const USER: &str = "robot";
/// `reportingComponent` of the Events flux-handoff records.
const COMPONENT: &str = "flux-handoff";

/// One hostile invocation.
struct Case {
    name: &'static str,
    args: Vec<String>,
    want: i32,
    /// Kubeconfig; `None`: the cell's, through the proxy (so requests are counted).
    kubeconfig: Option<PathBuf>,
    /// Config file; `None`: the cell's.
    config: Option<PathBuf>,
    env: Vec<(&'static str, String)>,
}

fn case(name: &'static str, want: i32, args: &[&str]) -> Case {
    Case {
        name,
        args: args.iter().map(|a| (*a).to_string()).collect(),
        want,
        kubeconfig: None,
        config: None,
        env: Vec::new(),
    }
}

impl Case {
    fn kubeconfig(mut self, p: &Path) -> Self {
        self.kubeconfig = Some(p.to_path_buf());
        self
    }
    fn config(mut self, p: &Path) -> Self {
        self.config = Some(p.to_path_buf());
        self
    }
    fn env(mut self, var: &'static str, value: &str) -> Self {
        self.env.push((var, value.to_string()));
        self
    }
}

/// What a case must leave as it found it.
#[derive(Debug, PartialEq)]
struct Snap {
    state: State,
    lease_version: Option<String>,
    events: BTreeSet<String>,
    secrets: BTreeMap<String, String>,
}

struct Run<'a> {
    s: &'a Settings,
    cell: &'a Cell,
    /// Working directory of every case (relative paths resolve against it).
    cwd: PathBuf,
    ran: usize,
    ok: usize,
    findings: Vec<Finding>,
}

/// Runs every case (the quick run too: they are cheap) in one cell.
pub async fn run(s: &Settings, _base: &Baseline) -> anyhow::Result<Tally> {
    let cell = Cell::new(s, "chaos-hostile").await?;
    let dir = s.scratch.join(&cell.ns.name).join("hostile");
    let cwd = dir.join("a").join("b");
    std::fs::create_dir_all(&cwd)?;
    std::fs::create_dir_all(dir.join("etc"))?;
    let mut r = Run {
        s,
        cell: &cell,
        cwd,
        ran: 0,
        ok: 0,
        findings: Vec::new(),
    };
    let files = Files::write(&dir, &cell)?;
    for c in input_cases(&files, &cell.ns.name) {
        r.check(c).await?;
    }
    held_cases(&mut r).await?;
    ghcr_cases(&mut r, &files).await?;
    let (ran, ok) = (r.ran, r.ok);
    let findings = r.findings;
    cell.shutdown().await;
    Ok(Tally {
        scenario: "hostile",
        count: ran,
        line: format!("chaos: hostile cases={ran} ok={ok} violations={}", ran - ok),
        findings,
    })
}

impl Run<'_> {
    /// Runs `c`; (exit code, stdout, stderr), recorded for the leak scan.
    async fn exec(&self, c: &Case) -> anyhow::Result<(i32, String, String)> {
        let cell = self.cell;
        let mut cmd = Command::new(&self.s.bin);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.cwd)
            .current_dir(&self.cwd)
            .arg("--kubeconfig")
            .arg(c.kubeconfig.as_ref().unwrap_or(&cell.through_proxy))
            .arg("--config")
            .arg(c.config.as_ref().unwrap_or(&cell.config))
            .args([
                "--namespace",
                &cell.ns.name,
                "--interval",
                "200ms",
                "--timeout",
                "20s",
            ])
            .args(&c.args)
            .envs(c.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        finish(cmd.spawn()?, self.s.run_bound).await
    }

    async fn snap(&self) -> anyhow::Result<Snap> {
        let cell = self.cell;
        let lease_version = cell
            .ns
            .api::<Lease>()
            .get_opt(LEASE)
            .await?
            .and_then(|l| l.metadata.resource_version);
        let events = cell
            .ns
            .api::<Event>()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.reporting_component.as_deref() == Some(COMPONENT)
                    || e.source.as_ref().and_then(|s| s.component.as_deref()) == Some(COMPONENT)
            })
            .filter_map(|e| e.metadata.name)
            .collect();
        let secrets = cell
            .ns
            .api::<Secret>()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|s| Some((s.metadata.name?, s.metadata.resource_version?)))
            .collect();
        Ok(Snap {
            state: cell.state().await?,
            lease_version,
            events,
            secrets,
        })
    }

    /// Runs one case and checks its exit code, its error line and that nothing changed.
    async fn check(&mut self, c: Case) -> anyhow::Result<()> {
        let before = self.snap().await?;
        let requests = self.cell.proxy.total();
        let (code, _out, err) = self.exec(&c).await?;
        let after = self.snap().await?;
        let mut problems = Vec::new();
        if code != c.want {
            problems.push((Kind::Other, format!("exit {code}, documented {}", c.want)));
        }
        if code != 0
            && let Some(e) = error_line_problem(&err)
        {
            problems.push((Kind::Other, e));
        }
        // Bad input is refused by the one error line alone: no log line of its own (kube-client
        // logged one per failed request).
        if let Some(l) = err.lines().find(|l| l.contains(" ERROR ")) {
            problems.push((Kind::Other, format!("stderr carries a log line: {l:?}")));
        }
        for d in after.state.diff(&before.state, &[]) {
            if !d.starts_with("lease held by") {
                problems.push((Kind::UnexpectedChange, d));
            }
        }
        // A resume that holds nothing takes and frees the Lease as that holder, by design.
        if after.state.lease_holder != before.state.lease_holder
            || (c.want != 0 && after.lease_version != before.lease_version)
        {
            problems.push((
                Kind::UnexpectedChange,
                format!(
                    "the Lease changed: {:?} -> {:?}",
                    before.lease_version, after.lease_version
                ),
            ));
        }
        for e in after.events.difference(&before.events) {
            problems.push((
                Kind::UnexpectedChange,
                format!("flux-handoff Event {e} created"),
            ));
        }
        if after.secrets != before.secrets {
            problems.push((
                Kind::UnexpectedChange,
                format!(
                    "Secrets changed: {:?} -> {:?}",
                    before.secrets.keys(),
                    after.secrets.keys()
                ),
            ));
        }
        let sent = self.cell.proxy.total() - requests;
        if code == USAGE && sent > 0 {
            problems.push((
                Kind::Other,
                format!("exit 2 (\"nothing was touched\") after {sent} API request(s)"),
            ));
        }
        self.ran += 1;
        if problems.is_empty() {
            self.ok += 1;
        } else {
            eprintln!(
                "flux-chaos: hostile {:?}: exit {code}, stderr {err:?}",
                c.name
            );
        }
        self.findings.extend(
            problems
                .into_iter()
                .map(|(k, t)| Finding::new(k, format!("hostile {:?}: {t}", c.name))),
        );
        Ok(())
    }
}
