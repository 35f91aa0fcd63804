//! A readable line per step of a counterexample: actor, step, object state.

use crate::spec::{Action, Handoff};
use crate::state::{P, State, T};
use crate::world::{Obj, text};

fn obj(m: &Handoff, o: &Obj) -> String {
    let owner = o.get(&m.keys.owner).unwrap_or("-");
    let nonce = o
        .get(flux_suspend::flux::REQUESTED_AT_ANNOTATION)
        .unwrap_or("-");
    let disabled = o.get(flux_suspend::flux::RECONCILE_ANNOTATION).is_some();
    format!(
        "rv={} owner={owner} suspend={:?} requestedAt={} handled={} disabled={disabled} reconciling={}",
        o.rv,
        o.suspend,
        short(nonce),
        o.handled.map_or("-", |h| short(text(h))),
        o.reconciling
    )
}

fn short(t: &str) -> &str {
    t.get(11..19).unwrap_or(t)
}

/// One step: the action, then what the server and the actors hold after it.
#[must_use]
pub fn step(m: &Handoff, s: &State, a: Action) -> String {
    let lease = s.lease.as_ref().map_or("absent".to_string(), |l| {
        format!(
            "holder={} epoch={} renewed@{} parked={}",
            l.holder.map_or("-", text),
            l.transitions,
            l.renewed,
            l.parked.map_or("-", text)
        )
    });
    let runs: Vec<String> = s
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| format!("run{i}:{:?}@{}", r.pc, r.epoch))
        .collect();
    format!(
        "{a:?}\n      parent: {}\n      target: {}\n      lease:  {lease} clock={}\n      actors: {} ctl=[{:?}, {:?}] resume={:?} recover={:?}",
        obj(m, &s.objs[P]),
        obj(m, &s.objs[T]),
        s.clock,
        runs.join(" "),
        s.ctl[P].exec.map(|e| e.seq),
        s.ctl[T].exec.map(|e| e.seq),
        s.resume.pc,
        s.recover.pc
    )
}
