//! The actors of one group besides its faults: the deploy jobs (and the on-call who settles a
//! gate a person broke, with the steps the job printed), a person's `kubectl scale` of the
//! gate, and a person's pause and resume.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use fault_proxy::Proxy;
use tokio::sync::Mutex;

use super::job::Ctx;
use super::job::{self, Ran};
use super::person::{self, Done};
use super::schedule::{Extra, Group};
use super::stage;
use crate::chaos::cell::Site;
use crate::chaos::restart::plane::Plane;

/// What the group runs against.
pub struct Env {
    pub ctx: Ctx,
    pub plane: Arc<Mutex<Plane>>,
    pub proxy: Arc<Proxy>,
    pub client: kube::Client,
    pub site: Arc<Site>,
}

/// Group `g`'s person, played from `origin` when it has one.
pub(super) async fn person_of(
    env: &Env,
    model: &flux_model::model::ModelHandle,
    g: &Group,
    origin: Instant,
) -> Option<anyhow::Result<Done>> {
    let who = person::As {
        bin: env.ctx.handoff_bin.clone(),
        direct: env.ctx.direct.clone(),
        config: env.ctx.config.clone(),
        namespace: env.ctx.namespace.clone(),
    };
    let p = g.person.as_ref()?;
    Some(person::play(&who, &env.client, model, p, (g.index, origin)).await)
}

/// A person's `kubectl scale` of the gate while a gate job holds it (at most one a group):
/// each task leaves the holder whose fence it broke in `scaled`.
pub(super) fn spawn_scales(
    env: &Env,
    g: &Group,
    done: &watch::Receiver<bool>,
    scaled: &Arc<std::sync::Mutex<Option<String>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    g.jobs
        .iter()
        .filter_map(|j| match j.extra {
            Extra::Gate { scale_ms: Some(ms) } => Some(ms),
            _ => None,
        })
        .map(|ms| {
            let (client, ns) = (env.client.clone(), env.ctx.namespace.clone());
            let (done, scaled) = (done.clone(), scaled.clone());
            tokio::spawn(async move {
                let broke = stage::scale_during(&client, &ns, ms, done).await;
                *scaled.lock().unwrap_or_else(PoisonError::into_inner) = broke;
            })
        })
        .collect()
}

/// What a job's task gives: how it ran, and when its holder's gate was scaled, the next
/// steps run to settle it (each with its exit) and when they ended.
pub(super) type JobDone = (Ran, Option<(Vec<String>, Instant)>);

/// Starts each job of `g` at its offset; the on-call settles the gate a person broke with the
/// steps the run printed as soon as its post step ended.
pub(super) fn spawn_jobs(
    env: &Env,
    g: &Group,
    scaled: &Arc<std::sync::Mutex<Option<String>>>,
) -> Vec<tokio::task::JoinHandle<anyhow::Result<JobDone>>> {
    g.jobs
        .iter()
        .cloned()
        .map(|j| {
            let (ctx, site, scaled) = (env.ctx.clone(), env.site.clone(), scaled.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(j.at_ms)).await;
                let ran = job::run(&ctx, &j).await?;
                let broke = scaled
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let settled = if broke.as_deref() == Some(ran.holder.as_str()) {
                    let lines: Vec<&str> = (ran.main_lines.iter())
                        .chain(&ran.post_lines)
                        .map(|(_, l)| l.as_str())
                        .collect();
                    Some((stage::settle(&site, &lines).await?, Instant::now()))
                } else {
                    None
                };
                anyhow::Ok((ran, settled))
            })
        })
        .collect()
}
