//! The merge-queue soak (issue 36, item 3): N emulated deploy jobs through the GitHub Action
//! (`node action/main.js`, then `node action/post.js`), in overlapping groups of 2–4 queued on
//! one Lease with `--wait-lease`, with random runner cancels, API server restarts, hung
//! connections, connections refused while jobs wait and a person's `flux resume`
//! ([`schedule`]).
//!
//! The soak runs on a control plane of its own (the restart scenario's [`Plane`]: fixed
//! ports and data, so a restart serves the same address), one seeded namespace with the
//! controller model, the fault proxy in front of the API server for every job. Each job's
//! command is the nemesis's work ([`crate::chaos::nemesis::work`]): writes the server orders
//! with the fence writes. Per group the nemesis's history recorder and checker judge I1 (work
//! outside a proven pause) and I2 (fences or a Lease left that no step reported), and
//! [`judge::classify`] judges each job's exits.
//!
//! Every job that did not deploy is also classified from the recorded history by the liveness
//! checker ([`crate::chaos::liveness`]): warranted (and why) or unwarranted.
//!
//! The last line is `soak: jobs=N ejections=N unwarranted=N leaked_fences=N
//! work_outside_pause=N overhead_p50_ms=N overhead_p99_ms=N`; each ejection, unwarranted job or
//! violation is printed with its seed, its group and the command that replays that group.

pub mod actors;
pub mod group;
pub mod job;
pub mod judge;
pub mod person;
pub mod preempt;
pub mod schedule;
pub mod stage;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use super::Settings;
use super::nemesis::history::WORK;
use super::restart::mini::Mini;
use super::restart::plane::Plane;
use actors::Env;
use group::Played;
use judge::{Figures, percentile};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub jobs: usize,
    /// Play only this group of the plan (a replay).
    pub group: Option<usize>,
    /// Draw a person's pause/resume, replicas gates with a scale and Flux Operator targets
    /// ([`schedule::plan_with`]).
    pub actors: bool,
    /// The repository's `action/` directory.
    pub action: PathBuf,
    /// The control plane's state directory; its kubeconfig is `<dir>/envtest/kubeconfig`,
    /// which `FLUX_HANDOFF_KUBECONFIG` must name (the fault proxy and the work read it).
    pub plane_dir: PathBuf,
}

/// The command that replays group `g` of `o`'s plan.
#[must_use]
pub fn replay(o: &Options, g: usize) -> String {
    format!(
        "cargo xtask soak --jobs {} --seed {} --group {g} --dev{}",
        o.jobs,
        o.seed,
        if o.actors { " --actors" } else { "" }
    )
}

/// Runs the soak; whether it passed.
pub async fn run(s: &Settings, o: &Options) -> anyhow::Result<bool> {
    let started = Instant::now();
    let (plane, client) = Plane::own(s, &o.plane_dir, "soak").await?;
    let mini = Mini::new(s, &plane, &client).await?;
    eprintln!(
        "soak: control plane up, namespace {} ({:.0}s)",
        mini.namespace,
        started.elapsed().as_secs_f64()
    );
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": WORK } }))?;
    Api::<ConfigMap>::namespaced(client.clone(), &mini.namespace)
        .create(&PostParams::default(), &cm)
        .await?;
    // The Flux Operator object and the gated Deployment some jobs pause too, and their model.
    let operator = stage::start(&client, &mini.namespace).await?;
    let proxy = fault_proxy::Proxy::start().await?;
    // The stand-in GitHub API every job's `recover-finished-runs` asks.
    let github = Arc::new(testkit::github_stub::GithubStub::start().await?);
    let kubeconfig = mini.dir.join("kubeconfig-soak");
    proxy.write_kubeconfig(&kubeconfig)?;
    let site = Arc::new(crate::chaos::cell::Site::new(
        s,
        client.clone(),
        &mini.namespace,
        plane.kubeconfig.clone(),
    )?);
    let env = Env {
        ctx: job::Ctx {
            action: o.action.clone(),
            handoff_bin: s.bin.clone(),
            kubeconfig,
            direct: plane.kubeconfig.clone(),
            config: site.config.clone(),
            namespace: mini.namespace.clone(),
            dir: mini.dir.join("jobs"),
            seed: o.seed,
            wait_lease: job::WAIT_LEASE,
            github: Some(github.clone()),
        },
        plane: Arc::new(tokio::sync::Mutex::new(plane)),
        proxy: Arc::new(proxy),
        client: client.clone(),
        site,
    };
    let plan = schedule::plan_with(o.seed, o.jobs, o.actors);
    let mut tally = Tally::default();
    for g in &plan.groups {
        if o.group.is_some_and(|only| only != g.index) {
            continue;
        }
        describe(g);
        let t0 = Instant::now();
        let played = group::play(&env, &mini.model, g)
            .await
            .with_context(|| format!("soak seed {} group {}", o.seed, g.index))?;
        tally.add(o, g.index, &played, t0);
    }
    mini.model.shutdown().await;
    operator.shutdown().await;
    let leaks = super::leaks::scan(&client).await?;
    for f in &leaks.findings {
        eprintln!("soak: SECRET seed={} {}", o.seed, f.text);
    }
    env.plane.lock().await.stop().await?;
    eprintln!(
        "soak: the stand-in GitHub API was asked {} times",
        github.seen().len()
    );
    let figures = tally.report(&leaks.line, started);
    println!("{}", figures.line());
    Ok(figures.passed() && leaks.findings.is_empty())
}

/// Prints group `g`'s plan: its jobs, faults and person.
fn describe(g: &schedule::Group) {
    let jobs: Vec<String> = g
        .jobs
        .iter()
        .map(|j| {
            let cancel = j
                .cancel_ms
                .map(|c| format!(" cancel@{c}ms"))
                .unwrap_or_default();
            let fails = if j.fails { " fails" } else { "" };
            let preempt = j
                .preempt_ms
                .map(|p| format!(" preempt@{p}ms"))
                .unwrap_or_default();
            format!(
                "#{}@{}ms w{}{fails}{cancel}{preempt}{}",
                j.index, j.at_ms, j.writes, j.extra
            )
        })
        .collect();
    let faults: Vec<String> = g
        .faults
        .iter()
        .map(|t| format!("{}@{}ms", t.fault, t.at_ms))
        .collect();
    eprintln!("soak: group {}: jobs {jobs:?} faults {faults:?}", g.index);
    if let Some(p) = &g.person {
        eprintln!(
            "soak: group {}: person pause apps @{}ms hold {}ms{}",
            g.index,
            p.at_ms,
            p.hold_ms,
            if p.ready_fails { " ready_fails" } else { "" }
        );
    }
}

/// Counts over the groups.
#[derive(Debug, Default)]
struct Tally {
    jobs: usize,
    ejections: usize,
    liveness: super::liveness::Tally,
    leaked: usize,
    outside: usize,
    cancels: usize,
    preempted: usize,
    /// `recovered: … from finished run holder …` lines of the jobs (a dead holder recovered).
    recovered: usize,
    /// Gates a person scaled while a job held them.
    scaled: usize,
    /// A person's pauses taken, and resumes that exited 10 (released, not Ready).
    pauses: usize,
    not_ready: usize,
    /// Undisturbed jobs (exit 0, no cancel, no fault in their window).
    overheads: Vec<u64>,
    all_overheads: Vec<u64>,
    main_ms: Vec<u64>,
    fired: Vec<&'static str>,
    exits: Vec<String>,
}

impl Tally {
    fn add(&mut self, o: &Options, g: usize, p: &Played, t0: Instant) {
        let mut exits = Vec::new();
        for j in &p.jobs {
            let r = &j.ran;
            self.jobs += 1;
            self.cancels += usize::from(r.cancel.is_some());
            self.preempted += usize::from(r.preempted);
            for (_, l) in r
                .main_lines
                .iter()
                .filter(|(_, l)| l.contains("from finished run holder"))
            {
                self.recovered += 1;
                eprintln!("soak:   {}: {l}", r.holder);
            }
            self.main_ms.push(r.main_ms());
            let code = |c: Option<i32>| c.map_or_else(|| "killed".into(), |c| c.to_string());
            exits.push(format!("{}:{}/{}", r.holder, code(r.main), code(r.post)));
            if let Some((_, command_ms)) = r.command {
                let o = judge::overhead_ms(r.main_ms(), command_ms, r.queued_ms);
                self.all_overheads.push(o);
                if r.main == Some(0) && r.cancel.is_none() && j.faults.is_empty() {
                    self.overheads.push(o);
                }
            }
            if r.main != Some(0) || r.post != Some(0) {
                let why = j.verdict.as_ref().map_or("EJECTED", |w| *w);
                eprintln!(
                    "soak:   {} main {}: {} | post {}: {} ({why})",
                    r.holder,
                    code(r.main),
                    r.main_error(),
                    code(r.post),
                    r.post_error()
                );
            }
            if let Some(l) = &j.liveness {
                self.liveness.add(l);
                if let Err(why) = l {
                    eprintln!(
                        "soak: UNWARRANTED seed={} group={g} holder={} main {}: {why}",
                        o.seed,
                        r.holder,
                        code(r.main)
                    );
                    eprintln!("soak:   main: {}", r.main_error());
                    eprintln!("soak:   replay: {}", replay(o, g));
                }
            }
            if let Err(why) = &j.verdict {
                self.ejections += 1;
                eprintln!(
                    "soak: EJECTION seed={} group={g} holder={} cancel={:?} faults={:?}: {why}",
                    o.seed, r.holder, r.cancel, j.faults
                );
                eprintln!("soak:   main: {}", r.main_error());
                eprintln!("soak:   post: {}", r.post_error());
                eprintln!("soak:   replay: {}", replay(o, g));
            }
        }
        if let Some(h) = &p.scaled {
            self.scaled += 1;
            eprintln!("soak:   a person scaled the gate held by {h}; settled by:");
            for s in &p.settled {
                eprintln!("soak:     {s}");
            }
        }
        if let Some(person) = &p.person {
            self.person(o, g, person, &p.fired);
        }
        for (text, around) in &p.outside {
            self.outside += 1;
            eprintln!("soak: VIOLATION seed={} group={g} I1: {text}", o.seed);
            eprintln!("soak:   replay: {}", replay(o, g));
            for l in around {
                eprintln!("soak:   {l}");
            }
        }
        for text in &p.leaked {
            self.leaked += 1;
            eprintln!("soak: LEAK seed={} group={g} I2: {text}", o.seed);
            eprintln!("soak:   replay: {}", replay(o, g));
        }
        self.fired.extend(p.fired.iter().map(|f| f.kind));
        let fired: Vec<&str> = p.fired.iter().map(|f| f.kind).collect();
        eprintln!(
            "soak: group {g}: {:.1}s fired {fired:?} exits(main/post) {exits:?}",
            t0.elapsed().as_secs_f64()
        );
        self.exits.extend(p.jobs.iter().map(|j| match &j.verdict {
            Ok(why) => (*why).to_string(),
            Err(_) => "EJECTED".into(),
        }));
    }

    /// A person's pause and resume: a Lease its resume left is a leak; a resume that did not
    /// exit as documented (0, or 10 when kept from Ready) with no fault in its window, or a
    /// pause that failed so, is an ejection of the person.
    fn person(&mut self, o: &Options, g: usize, p: &person::Done, fired: &[group::Fired]) {
        self.pauses += usize::from(p.resume_span.is_some());
        self.not_ready += usize::from(p.resume_code == Some(10));
        eprintln!(
            "soak:   person {} resume exit {:?}{}",
            p.holder,
            p.resume_code,
            if p.ready_failed {
                " (apps kept from Ready)"
            } else {
                ""
            }
        );
        let faulted = fired
            .iter()
            .any(|f| f.kind == "restart" || f.kind == "hang");
        for text in &p.problems {
            if text.contains("still held") {
                self.leaked += 1;
                eprintln!("soak: LEAK seed={} group={g} person: {text}", o.seed);
            } else if faulted {
                eprintln!("soak:   person (fault in the group): {text}");
                continue;
            } else {
                self.ejections += 1;
                eprintln!("soak: EJECTION seed={} group={g} person: {text}", o.seed);
            }
            eprintln!("soak:   replay: {}", replay(o, g));
        }
    }

    /// Prints the counts behind the figures on stderr; the figures.
    fn report(&mut self, leaks: &str, started: Instant) -> Figures {
        let figures = self.figures();
        eprintln!("soak: exits: {}", self.exits.join(", "));
        eprintln!(
            "soak: faults fired: restart={} hang={} flux_resume={} refuse={} cancels={} \
             preempted={} recovered={} person_pauses={} resumes_not_ready={} gates_scaled={}",
            self.fired("restart"),
            self.fired("hang"),
            self.fired("flux_resume"),
            self.fired("refuse"),
            self.cancels,
            self.preempted,
            self.recovered,
            self.pauses,
            self.not_ready,
            self.scaled
        );
        eprintln!(
            "soak: overhead over all {} jobs that reached their command's end: p50={}ms \
             p99={}ms; main step p50={}ms",
            self.all_overheads.len(),
            percentile(&self.all_overheads, 50),
            percentile(&self.all_overheads, 99),
            percentile(&self.main_ms, 50),
        );
        eprintln!(
            "soak: jobs that did not deploy: unwarranted={} {}",
            self.liveness.unwarranted,
            self.liveness.line()
        );
        eprintln!("soak: {leaks}");
        eprintln!("soak: wall time {:.0}s", started.elapsed().as_secs_f64());
        figures
    }

    fn fired(&self, kind: &str) -> usize {
        self.fired.iter().filter(|k| **k == kind).count()
    }

    fn figures(&mut self) -> Figures {
        let mut by: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
        for e in &self.exits {
            *by.entry(e.clone()).or_default() += 1;
        }
        self.exits = by.into_iter().map(|(k, n)| format!("{k}: {n}")).collect();
        Figures {
            jobs: self.jobs,
            ejections: self.ejections,
            unwarranted: self.liveness.unwarranted,
            leaked_fences: self.leaked,
            work_outside_pause: self.outside,
            overhead_p50_ms: percentile(&self.overheads, 50),
            overhead_p99_ms: percentile(&self.overheads, 99),
        }
    }
}
