//! Mutation points: the ordered mutating requests of one clean run.

use anyhow::bail;

use super::cell::Cell;
use super::{Settings, finish};

/// What a clean run does.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// `verb resource` of each mutating request, in order (point k is `points[k-1]`).
    pub points: Vec<String>,
    /// Annotation keys a clean run changes on purpose (compared away afterwards).
    pub allowed: Vec<String>,
}

/// Runs `run --target infrastructure -- true` once through the recorder.
pub async fn run(s: &Settings) -> anyhow::Result<Baseline> {
    let cell = Cell::new(s, "chaos-discover").await?;
    let before = cell.state().await?;
    let child = cell.run_cmd().spawn()?;
    let (code, _, err) = finish(child, s.run_bound).await?;
    if code != 0 {
        bail!("the clean run exited {code}: {}", err.trim());
    }
    let after = cell.state().await?;
    let points: Vec<String> = cell
        .recorder
        .mutations()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    let mut allowed = Vec::new();
    for (name, b) in &before.objects {
        let a = &after.objects[name];
        if a.spec != b.spec {
            bail!("a clean run left {name}'s spec changed");
        }
        for (k, v) in &a.annotations {
            if b.annotations.get(k) != Some(v) && !allowed.contains(k) {
                allowed.push(k.clone());
            }
        }
        if b.annotations.keys().any(|k| !a.annotations.contains_key(k)) {
            bail!("a clean run removed an annotation of {name}");
        }
    }
    if !after.fenced().is_empty() || after.lease_holder.is_some() {
        bail!("a clean run left fences or the Lease held: {after:?}");
    }
    cell.shutdown().await;
    Ok(Baseline { points, allowed })
}
