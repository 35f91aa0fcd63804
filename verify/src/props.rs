//! The properties, each named as `cargo xtask verify` prints it.

use stateright::Property;

use crate::spec::Handoff;
use crate::state::{P, State, T, ToolPc, ghost};

/// Every property the checker evaluates, safety first, liveness last.
#[must_use]
pub fn all() -> Vec<Property<Handoff>> {
    vec![
        Property::always("one_run_in_work_phase", |m: &Handoff, s: &State| {
            (0..s.runs.len())
                .filter(|&r| s.runs[r].working() && m.live(s, r))
                .count()
                <= 1
        }),
        Property::always(
            "no_work_during_pre_fence_execution",
            |m: &Handoff, s: &State| {
                (0..s.runs.len()).all(|r| {
                    let run = &s.runs[r];
                    !(run.working() && m.live(s, r))
                        || [P, T].iter().all(|&o| {
                            let fenced_at = run.held[o].map_or(0, |h| h.seq);
                            s.ctl[o].exec.is_none_or(|e| e.seq >= fenced_at)
                        })
                })
            },
        ),
        Property::always("release_keeps_other_writers_changes", |_, s: &State| {
            s.ghost & ghost::OVERWROTE == 0
        }),
        Property::always("no_release_of_a_live_holders_fence", |_, s: &State| {
            s.ghost & ghost::LIVE_RELEASED == 0
        }),
        Property::always(
            "secret_written_only_under_own_proven_pause",
            |_, s: &State| s.ghost & ghost::SECRET_UNPROVEN == 0,
        ),
        Property::always("stable_chain_proven_whatever_its_status", |_, s: &State| {
            s.ghost & ghost::FROZEN_BLOCKS == 0
        }),
        // A parked mark outlives nothing: a Lease carries one only while the holder it names
        // holds it (a later holder of the same name would otherwise look parked).
        Property::always("parked_mark_only_while_its_holder_holds", |_, s: &State| {
            s.lease
                .as_ref()
                .is_none_or(|l| l.parked.is_none() || l.parked == l.holder)
        }),
        // The holder's deadline comes before recovery's takeover: no run is still in its work
        // phase (its command running, whatever requests it has pending) once another holder
        // took the Lease at a later epoch.
        Property::always("command_ends_before_takeover", |_, s: &State| {
            s.runs.iter().all(|run| {
                !run.working() || s.lease.as_ref().is_none_or(|l| l.transitions <= run.epoch)
            })
        }),
        Property::always("children_released_before_parents", |_, s: &State| {
            s.ghost & ghost::ORDER == 0
        }),
        // Not vacuous: some run does prove its pause and work (a `sometimes` property is
        // violated when no state satisfies it).
        Property::sometimes(
            "a_run_works_under_a_proven_pause",
            |m: &Handoff, s: &State| (0..s.runs.len()).any(|r| s.runs[r].working() && m.live(s, r)),
        ),
        Property::always(
            "nothing_stays_held_after_runs_end_and_recovery",
            |m: &Handoff, s: &State| {
                s.janitor.pc != ToolPc::Done
                    || s.person_moved_exact
                    || (s.objs.iter().all(|o| o.get(&m.keys.owner).is_none())
                        && s.lease.as_ref().is_none_or(|l| l.holder.is_none()))
            },
        ),
    ]
}
