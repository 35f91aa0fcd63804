//! The transition system: `stateright`'s [`Model`] over the state, each action of
//! [`crate::spec`] taken by the production decision functions.

use flux_suspend::flux::REQUESTED_AT_ANNOTATION;
use stateright::{Model, Property};

use crate::spec::{Action, Actor, Handoff, Mutant};
use crate::state::{Budget, Ctl, P, Pc, Run, State, T, Tool, ToolPc};
use crate::world::{Obj, sym, text};

/// A tool that refuses at its first step and changes nothing is pruned: the state where it
/// has not run yet (and may still run later) has every behaviour of the one where it ended,
/// and no property reads a tool's own progress.
fn refused_outright(before: Tool, after: Tool, s: &State, n: &State) -> bool {
    before.pc == ToolPc::Idle
        && after.pc == ToolPc::Done
        && State {
            resume: s.resume,
            recover: s.recover,
            ..n.clone()
        } == *s
}

impl Model for Handoff {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let b = self.bounds;
        let mut parent = Obj::new("uid-parent");
        let mut target = Obj::new("uid-target");
        // Both were reconciled before: a handled nonce from long ago.
        parent.handled = Some(sym("2026-11-30T00:00:00Z"));
        target.handled = parent.handled;
        parent.set(REQUESTED_AT_ANNOTATION, Some("2026-11-30T00:00:00Z"));
        target.set(REQUESTED_AT_ANNOTATION, Some("2026-11-30T00:00:00Z"));
        vec![State {
            objs: [parent, target],
            prev: [None, None],
            lease: None,
            clock: 0,
            runs: vec![Run::new(); b.runs],
            // A reconcile of each is queued: an execution may be running when a run starts.
            ctl: [
                Ctl {
                    exec: None,
                    dirty: true,
                },
                Ctl {
                    exec: None,
                    dirty: true,
                },
            ],
            budget: Budget {
                faults: b.faults,
                crashes: b.crashes,
                lost: b.lost,
                restarts: b.restarts,
                intervals: b.intervals,
                person: b.person,
                ticks: b.ticks,
                giveups: b.giveups,
            },
            resume: Tool::idle(),
            recover: Tool::idle(),
            janitor: Tool::idle(),
            fences: [0, 0],
            person_wrote: [None, None],
            person_moved_exact: false,
            flips: 0,
            ghost: 0,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let janitor_started = s.janitor.pc != ToolPc::Idle;
        for (r, run) in s.runs.iter().enumerate() {
            if run.finished() {
                continue;
            }
            if run.pc != Pc::Ack(P) && run.pc != Pc::Ack(T) || self.acked(s, r) {
                out.push(Action::Run(r));
            }
            if matches!(run.pc, Pc::WriteFence(_) | Pc::WriteRelease(_)) && s.budget.lost > 0 {
                out.push(Action::RunLost(r, true));
                out.push(Action::RunLost(r, false));
            }
            if matches!(run.pc, Pc::Ack(_) | Pc::Prove) && s.budget.giveups > 0 {
                out.push(Action::RunGiveUp(r));
            }
            if run.pc == Pc::Recheck && self.bounds.park {
                out.push(Action::RunPark(r));
            }
            if s.budget.crashes > 0 {
                out.push(Action::RunCrash(r));
            }
        }
        Self::env_actions(s, out);
        if s.budget.ticks > 0 && !janitor_started {
            out.push(Action::Tick);
        }
        // `resume --holder <run 0>` names a holder that exists: run 0 has taken the Lease.
        if self.bounds.resume
            && s.resume.pc != ToolPc::Done
            && !janitor_started
            && s.runs[0].epoch != 0
        {
            out.push(Action::Resume);
        }
        if self.bounds.recover && s.recover.pc != ToolPc::Done && !janitor_started {
            out.push(Action::Recover);
        }
        if s.janitor.pc != ToolPc::Done
            && s.runs.iter().all(Run::finished)
            && !s.resume.busy()
            && !s.recover.busy()
        {
            out.push(Action::Janitor);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut n = s.clone();
        // A clock jump while a run is live stalls it past its Lease: a fault. A jump once no
        // run is live is the wait for a dead holder's Lease to expire, which every recovery
        // after a crash needs: free.
        let stall = action == Action::Tick && (0..s.runs.len()).any(|r| self.live(s, r));
        if action.is_fault() || stall {
            n.budget.faults = n.budget.faults.checked_sub(1)?;
        }
        match action {
            Action::Run(r) => self.run_step(&mut n, r, None),
            Action::RunLost(r, applied) => {
                n.budget.lost -= 1;
                self.run_step(&mut n, r, Some(applied));
            }
            Action::RunGiveUp(r) => {
                n.budget.giveups -= 1;
                n.runs[r].pc = Pc::ReadRelease(T);
            }
            Action::RunPark(r) => self.park(&mut n, r),
            Action::RunCrash(r) => {
                n.budget.crashes -= 1;
                n.runs[r].pc = Pc::Crashed;
                n.runs[r].snap = None;
            }
            Action::Tick => {
                n.budget.ticks -= 1;
                n.clock += 1;
            }
            Action::Resume => {
                self.resume_step(&mut n);
                if self.reduced && refused_outright(s.resume, n.resume, s, &n) {
                    return None;
                }
            }
            Action::Recover => {
                self.recover_step(&mut n, Actor::Recover);
                if self.reduced && refused_outright(s.recover, n.recover, s, &n) {
                    return None;
                }
            }
            Action::Janitor => self.recover_step(&mut n, Actor::Janitor),
            other => self.env_step(&mut n, other),
        }
        self.self_fence(&mut n);
        Some(if self.reduced {
            self.representative(n)
        } else {
            n
        })
    }

    fn properties(&self) -> Vec<Property<Self>> {
        crate::props::all()
    }

    fn format_step(&self, last: &State, action: Action) -> Option<String> {
        let next = self.next_state(last, action)?;
        Some(crate::trace::step(self, &next, action))
    }
}

impl Handoff {
    /// The holder's own deadline (flux-fence's `lease::deadline`): it lies before a full lease
    /// duration after its last renewal, and recovery needs a full duration unchanged, so once a
    /// tick has passed, a run in its work phase that did not renew since (stalled there, or
    /// reaching it stalled: `wait_lost` then resolves at once) has stopped its command and goes
    /// to cleanup, its Lease counted lost. Applied after every step. The mutant keeps it
    /// working.
    fn self_fence(&self, s: &mut State) {
        if self.is(Mutant::HolderWaitsForRequests) {
            return;
        }
        let clock = s.clock;
        for run in &mut s.runs {
            if run.working() && run.renewed != clock {
                run.lost = true;
                run.pc = Pc::ReadRelease(T);
            }
        }
    }

    /// Whether run `r`'s acknowledgement wait is satisfied (production `acknowledged`, or
    /// the `>=` mutant).
    pub(crate) fn acked(&self, s: &State, r: usize) -> bool {
        let Pc::Ack(o) = s.runs[r].pc else {
            return false;
        };
        let nonce = Self::nonce(r, o);
        if self.is(Mutant::AckAtLeast) {
            return s.objs[o].handled.is_some_and(|h| text(h) >= nonce.as_str());
        }
        flux_suspend::retire::acknowledged(&s.objs[o].render(), &nonce)
    }
}
