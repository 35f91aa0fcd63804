//! Sound state-space reductions, applied to every state the model produces.
//!
//! Each one maps a state to a representative with exactly the same future behaviours, as far
//! as the properties can tell, so checking the representatives checks the original model:
//!
//! - **resourceVersion renaming.** Kubernetes resourceVersions are opaque: production and the
//!   model only compare them for equality (the acquire patch's `test`, `lost_write`, the judge's
//!   "unchanged since the last pass"). Renaming each object's versions in order to `1..=k`
//!   (its current one, always the largest, becomes `k`, so the next write's `k + 1` is still
//!   fresh) is a bijection every decision commutes with. States that differ only in how many
//!   status writes happened become one. The Lease's version is only compared within the step
//!   that read it (every Lease update is decided and written in one step), so it is dropped.
//! - **Dead variables.** A run that ended or crashed never reads its snapshot, proof, passes,
//!   holds or renewal again (only its epoch, which names its owner value, is still read), and
//!   a finished tool never reads its epoch again: they are reset.
//!
//! The reductions are a quotient in the sense of symmetry reduction (stateright's
//! `CheckerBuilder::symmetry_fn`, which in 0.31 only its DFS checker applies): here the
//! representative is taken in `next_state`, so breadth-first search (shortest counterexamples)
//! gets it too.

use std::collections::BTreeMap;

use crate::state::{Pc, Run, State, ToolPc};

/// The representative of `s`.
#[must_use]
pub fn canonical(mut s: State) -> State {
    for run in &mut s.runs {
        if run.finished() {
            let (pc, epoch) = (run.pc, run.epoch);
            *run = Run::new();
            run.pc = pc;
            run.epoch = epoch;
        }
    }
    for tool in [&mut s.resume, &mut s.recover, &mut s.janitor] {
        if tool.pc == ToolPc::Done {
            tool.epoch = 0;
            tool.kept = false;
        }
    }
    if let Some(l) = &mut s.lease {
        l.rv = 1;
    }
    for o in 0..s.objs.len() {
        rename_versions(&mut s, o);
    }
    s
}

/// Renames object `o`'s resourceVersions, in order, to `1..=k`.
fn rename_versions(s: &mut State, o: usize) {
    let uid = s.objs[o].uid;
    let mut seen = BTreeMap::new();
    seen.insert(s.objs[o].rv, 0);
    if let Some(p) = &s.prev[o] {
        seen.insert(p.rv, 0);
    }
    for run in &s.runs {
        if let Some(snap) = run.snap.as_ref().filter(|x| x.uid == uid) {
            seen.insert(snap.rv, 0);
        }
        for pass in &run.passes {
            seen.insert(pass[o].rv, 0);
        }
    }
    for (i, v) in seen.values_mut().enumerate() {
        *v = u16::try_from(i + 1).expect("a handful of versions");
    }
    let map = |rv: &mut u16| *rv = seen[rv];
    map(&mut s.objs[o].rv);
    if let Some(p) = &mut s.prev[o] {
        map(&mut p.rv);
    }
    for run in &mut s.runs {
        if let Some(snap) = run.snap.as_mut().filter(|x| x.uid == uid) {
            map(&mut snap.rv);
        }
        for pass in &mut run.passes {
            map(&mut pass[o].rv);
        }
    }
}

/// Steps a run takes that read and write nothing shared and that no property observes (a
/// release step with nothing held, the Lease release when none is held or a fence was kept)
/// commute with every other actor's step; they are merged into the step before them.
pub fn skip_local(s: &mut State, r: usize) {
    loop {
        let run = &mut s.runs[r];
        match run.pc {
            Pc::ReadRelease(o) if run.held[o].is_none() => run.pc = crate::state::next_release(o),
            Pc::EndLease if run.epoch == 0 || run.kept => run.pc = Pc::Done,
            _ => return,
        }
    }
}
