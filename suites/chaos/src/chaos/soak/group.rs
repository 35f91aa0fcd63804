//! One group played: its jobs queued on the Lease through the Action, its faults injected at
//! their offsets, the history recorded and judged by the nemesis's checker, then whatever is
//! left recovered so the next group starts clean.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use fault_proxy::Proxy;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;
use tokio::sync::{Mutex, watch};

use super::actors::{self, Env};
use super::job::{self, Ran};
use super::judge::{Facts, classify};
use super::person::Done;
use super::schedule::{Fault, Group};
use super::stage;
use crate::chaos::cell::{PARENT, TARGET};
use crate::chaos::liveness::{self, End, LeaseSeen, Warranted};
use crate::chaos::nemesis::checker::{self, Event, Object, Outcome};
use crate::chaos::nemesis::history::{Recorder, WORK, since};
use crate::chaos::restart::plane::Plane;

/// One injected fault: its kind and the window it acted in.
#[derive(Debug, Clone)]
pub struct Fired {
    pub kind: &'static str,
    pub from: Instant,
    pub to: Instant,
}

/// How one job was judged.
#[derive(Debug, Clone)]
pub struct Judged {
    pub ran: Ran,
    pub verdict: Result<&'static str, String>,
    /// Faults that acted while its main step ran.
    pub faults: BTreeSet<&'static str>,
    /// A job that did not deploy, classified from the history ([`liveness::classify`]).
    pub liveness: Option<Result<Warranted, String>>,
    /// A person scaled its gate while it held it.
    pub broken: bool,
}

/// What one group left.
#[derive(Debug)]
pub struct Played {
    pub jobs: Vec<Judged>,
    pub fired: Vec<Fired>,
    /// I1 violations (work outside a proven pause), with the history around each.
    pub outside: Vec<(String, Vec<String>)>,
    /// I2 violations and what recovery could not restore.
    pub leaked: Vec<String>,
    /// The person's pause and resume, when the group has one.
    pub person: Option<Done>,
    /// The holder whose gate a person scaled while it held it.
    pub scaled: Option<String>,
    /// The next steps run to settle it, each with its exit.
    pub settled: Vec<String>,
}

/// Plays group `g`; `model` plays the namespace's controller (a person's resume may be kept
/// from Ready).
pub async fn play(
    env: &Env,
    model: &flux_model::model::ModelHandle,
    g: &Group,
) -> anyhow::Result<Played> {
    let members = [PARENT, TARGET];
    let ns = env.ctx.namespace.clone();
    // The work ConfigMap names no holder when the group starts: the recorder's first events
    // are the objects as they are, and the last group's last write is no write of this one.
    let body = serde_json::json!({ "data": { "holder": "", "seq": format!("group-{}", g.index) } });
    Api::<ConfigMap>::namespaced(env.client.clone(), &ns)
        .patch(WORK, &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    let recorder = Arc::new(Recorder::start(&env.client, &ns, &members).await?);
    let origin = Instant::now();
    let (done_tx, done) = watch::channel(false);
    let mut faults = Vec::new();
    for t in g.faults.clone() {
        let (plane, proxy, recorder, done) = (
            env.plane.clone(),
            env.proxy.clone(),
            recorder.clone(),
            done.clone(),
        );
        let site = (env.client.clone(), ns.clone());
        faults.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(t.at_ms)).await;
            inject(&plane, &proxy, &recorder, &site, &t.fault, done).await
        }));
    }
    let scaled = Arc::new(std::sync::Mutex::new(None::<String>));
    let scale_tasks = actors::spawn_scales(env, g, &done, &scaled);
    let jobs = actors::spawn_jobs(env, g, &scaled);
    let the_person = actors::person_of(env, model, g, origin);
    let the_jobs = async {
        let mut ran = Vec::new();
        for j in jobs {
            ran.push(j.await??);
        }
        anyhow::Ok(ran)
    };
    let (the_person, ran) = tokio::join!(the_person, the_jobs);
    let (ran, settled): (Vec<Ran>, Vec<_>) = ran?.into_iter().unzip();
    let (settled, settled_at) = settled
        .into_iter()
        .flatten()
        .unzip::<_, _, Vec<_>, Vec<_>>();
    let the_person = the_person.transpose()?;
    done_tx.send_replace(true);
    for s in scale_tasks {
        s.await?;
    }
    let scaled = scaled
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut fired = Vec::new();
    for f in faults {
        fired.extend(f.await??);
    }
    recorder.catch_up(&env.client, &ns, &members).await?;
    let history = recorder.events();
    let lease = recorder.leases(origin);
    drop(recorder);
    let mut outcomes: Vec<Outcome> = ran.iter().flat_map(outcomes).collect();
    outcomes.extend(the_person.iter().flat_map(|p| p.outcomes.clone()));
    let (outside, mut leaked) = violations(&history, &members, &outcomes);
    // The gate and the operator object first: a gate left fenced keeps its chain's release.
    leaked.extend(stage::left_and_cleaned(&env.client, &ns).await?);
    leaked.extend(env.site.recover_rest(None).await?.0);
    let mut broken = liveness::broken_by(&member_versions(&history));
    broken.extend(scaled.clone());
    let budget = liveness::budget_ms(env.ctx.wait_lease);
    let finished = finished(&ran, origin);
    let resumed: BTreeMap<String, u64> = the_person
        .iter()
        .filter_map(|p| Some((p.holder.clone(), since(origin, p.resume_span?.1))))
        .collect();
    let recovers = env.ctx.github.is_some();
    let seen = Seen {
        origin,
        budget_ms: budget,
        lease: &lease,
        broken: &broken,
        finished: &finished,
        resumed: &resumed,
        recovers,
        scaled: scaled.as_deref(),
        settled_at: settled_at.first().copied(),
    };
    let jobs = ran.into_iter().map(|r| judged(r, &fired, &seen)).collect();
    Ok(Played {
        jobs,
        fired,
        outside,
        leaked,
        person: the_person,
        scaled,
        settled: settled.into_iter().flatten().collect(),
    })
}

/// The job's two steps as the checker's outcomes (`action` and `post`): each says whether
/// something is still held (its error lines); a preempted job's main step counts as killed.
pub(crate) fn outcomes(r: &Ran) -> [Outcome; 2] {
    let errors = |lines: &[job::Line]| {
        lines
            .iter()
            .filter(|(_, l)| l.contains("error"))
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    [
        Outcome {
            holder: r.holder.clone(),
            verb: "action",
            code: r.main,
            // A preempted runner's holder may hold anything: the next jobs recover it.
            killed: r.preempted,
            last: errors(&r.main_lines),
        },
        Outcome {
            holder: r.holder.clone(),
            verb: "post",
            code: r.post,
            killed: false,
            last: errors(&r.post_lines),
        },
    ]
}

fn overlapping(fired: &[Fired], (a, b): (Instant, Instant)) -> BTreeSet<&'static str> {
    fired
        .iter()
        .filter(|f| f.from <= b && f.to >= a)
        .map(|f| f.kind)
        .collect()
}

fn judge(ran: Ran, fired: &[Fired]) -> Judged {
    let faults = overlapping(fired, ran.main_span);
    let facts = Facts {
        main: ran.main,
        command: ran.command.map(|c| c.0).filter(|c| *c != 0),
        cancel: ran.cancel,
        faults: faults.clone(),
        group_faulted: fired.iter().any(|f| f.from <= ran.main_span.1),
        lease_busy: ran.main == Some(3) && {
            let e = ran.main_error();
            e.contains("lease ") && e.contains("is held by")
        },
        post: ran.post,
        post_faults: overlapping(fired, ran.post_span),
        preempted: ran.preempted,
    };
    let verdict = if ran.timed_out {
        Err("the main step outran the harness's bound and was cancelled".into())
    } else {
        classify(&facts)
    };
    Judged {
        ran,
        verdict,
        faults,
        liveness: None,
        broken: false,
    }
}

/// `(rv, owner, suspend)` of every version of a member of the chain.
pub(crate) fn member_versions(history: &[Event]) -> Vec<(u64, Option<String>, bool)> {
    history
        .iter()
        .filter(|e| matches!(e.object, Object::Member(_)) && !e.deleted)
        .map(|e| (e.rv, e.owner.clone(), e.suspend))
        .collect()
}

/// When each job's GitHub run became `completed` (ms from `origin`): its post step's end, or
/// its preemption.
fn finished(ran: &[Ran], origin: Instant) -> BTreeMap<String, u64> {
    ran.iter()
        .filter(|r| !r.holder.is_empty())
        .map(|r| {
            let end = if r.preempted {
                r.main_span.1
            } else {
                r.post_span.1
            };
            (r.holder.clone(), since(origin, end))
        })
        .collect()
}

/// The checker's verdict on `history`: I1 violations (with the history around each), and
/// the rest (I2).
fn violations(
    history: &[Event],
    members: &[&str],
    outcomes: &[Outcome],
) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let mut outside = Vec::new();
    let mut leaked = Vec::new();
    for x in checker::check(history, members, outcomes).violations {
        if x.invariant == "I1" {
            outside.push((x.text, checker::around(history, x.rv, 12, 4)));
        } else {
            leaked.push(x.text);
        }
    }
    (outside, leaked)
}

/// One job judged: by its exits, by the history (liveness), then the exit verdict corrected
/// by the history ([`super::judge::by_history`]).
fn judged(r: Ran, fired: &[Fired], seen: &Seen<'_>) -> Judged {
    let mut j = judge(r, fired);
    j.liveness = live(&j, seen);
    j.broken = seen.scaled == Some(j.ran.holder.as_str());
    if let Some(h) = seen.scaled
        && !j.broken
        && j.ran.main_error().contains(h)
        && seen.settled_at.is_none_or(|at| j.ran.main_span.1 <= at)
        && let Some(Err(_)) = &j.liveness
    {
        // Refused by what a person's scale left of the holder in front of it, before the
        // on-call settled it: the person broke that pause.
        j.liveness = Some(Ok(Warranted::PauseBroken));
    }
    let post_ok = j.ran.post == Some(0);
    j.verdict = super::judge::by_history(j.verdict, j.liveness.as_ref(), j.broken, post_ok);
    j
}

/// What the group's history says, as each job's liveness is judged.
struct Seen<'a> {
    origin: Instant,
    budget_ms: u64,
    lease: &'a [LeaseSeen],
    broken: &'a [String],
    finished: &'a BTreeMap<String, u64>,
    /// Holders of a person's pause -> when its resume ended.
    resumed: &'a BTreeMap<String, u64>,
    /// The jobs ran with `recover-finished-runs` and a stand-in GitHub API.
    recovers: bool,
    /// The holder whose gate a person scaled, and when the on-call's next steps ended.
    scaled: Option<&'a str>,
    settled_at: Option<Instant>,
}

/// The liveness verdict of a job that did not deploy (its deploy script did not end 0).
fn live(j: &Judged, seen: &Seen<'_>) -> Option<Result<Warranted, String>> {
    let r = &j.ran;
    if r.command.is_some_and(|(c, _)| c == 0) {
        return None;
    }
    let (origin, budget_ms) = (seen.origin, seen.budget_ms);
    let job = liveness::Job {
        holder: r.holder.clone(),
        started_ms: since(origin, r.main_span.0),
        left_ms: since(origin, r.main_span.1),
        budget_ms,
        // A step the harness cancelled at its bound was no runner's cancel.
        end: if r.preempted {
            End::Killed
        } else if r.cancel.is_some() && !r.timed_out {
            End::Cancelled
        } else if r.command.is_some() {
            End::ScriptFailed
        } else {
            End::Left
        },
        faulted: !j.faults.is_empty(),
        recovers: seen.recovers,
    };
    let broken = seen.broken.contains(&r.holder);
    Some(liveness::classify_among(
        &job,
        seen.lease,
        broken,
        seen.finished,
        seen.resumed,
    ))
}

/// Injects `fault` now (a flux resume waits for a fenced member, a hang for its request,
/// until `done`); the window it acted in, if it was injected.
async fn inject(
    plane: &Mutex<Plane>,
    proxy: &Proxy,
    recorder: &Recorder,
    (client, ns): &(kube::Client, String),
    fault: &Fault,
    mut done: watch::Receiver<bool>,
) -> anyhow::Result<Option<Fired>> {
    let kind = fault.kind();
    let fired = |from: Instant| {
        Some(Fired {
            kind,
            from,
            to: Instant::now(),
        })
    };
    match fault {
        Fault::Restart { down_ms } => {
            let mut p = plane.lock().await;
            // The history holds every write so far before the server goes down (a restarted
            // server's watch cache starts at the current revision; the recorder lists again).
            let _ = recorder.catch_up(client, ns, &[PARENT, TARGET]).await;
            let from = Instant::now();
            p.stop().await?;
            tokio::time::sleep(Duration::from_millis(*down_ms)).await;
            p.spawn().await?;
            Ok(fired(from))
        }
        Fault::Hang { request, nth } => {
            let count = || proxy.counts().get(*request).copied().unwrap_or(0);
            let at = count() + nth;
            proxy.arm_on(request, at, fault_proxy::Fault::Hang);
            loop {
                if count() >= at {
                    return Ok(fired(Instant::now()));
                }
                if *done.borrow() {
                    // Never reached in this group: disarmed (a zero delay forwards it), or it
                    // would hang a request of a later group that injected nothing.
                    proxy.arm_on(request, at, fault_proxy::Fault::Delay(Duration::ZERO));
                    if count() >= at {
                        return Ok(fired(Instant::now()));
                    }
                    return Ok(None);
                }
                tokio::select! {
                    _ = done.changed() => {}
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
        }
        Fault::Refuse { ms } => {
            // Once a job holds the Lease, so the others are queued behind it.
            loop {
                let held = recorder
                    .leases(Instant::now())
                    .iter()
                    .max_by_key(|l| l.rv)
                    .is_some_and(|l| l.holder.is_some());
                if held {
                    let from = Instant::now();
                    proxy.refuse_for(Duration::from_millis(*ms)).await?;
                    tokio::time::sleep(Duration::from_millis(*ms)).await;
                    return Ok(fired(from));
                }
                if *done.borrow() {
                    return Ok(None);
                }
                tokio::select! {
                    _ = done.changed() => {}
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
            }
        }
        Fault::FluxResume { member } => {
            let name = [PARENT, TARGET][member % 2];
            let api = Api::<DynamicObject>::namespaced_with(
                client.clone(),
                ns,
                &testkit::fixtures::kustomization_resource(),
            );
            loop {
                if let Ok(o) = api.get(name).await {
                    let d = serde_json::to_value(&o)?;
                    let owner = d.pointer("/metadata/annotations/flux-handoff.io~1owner");
                    if owner.is_some() && d.pointer("/spec/suspend") == Some(&Value::Bool(true)) {
                        let body = serde_json::json!({ "spec": { "suspend": false } });
                        let ok = api
                            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                            .await
                            .is_ok();
                        return Ok(ok.then(|| fired(Instant::now())).flatten());
                    }
                }
                if *done.borrow() {
                    return Ok(None);
                }
                tokio::select! {
                    _ = done.changed() => {}
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        }
    }
}
