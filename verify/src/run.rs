//! A handoff run (protocol phases 2–10 with strategy `ack`): every decision is the production
//! one — `decide_lease_acquire`, `is_stale` + `decide_renew` (the Lease assertion),
//! `decide_acquire` / `lost_write`, `acknowledged`, the `Judge`, `decide_release`,
//! `decide_lease_release` / `decide_lease_park` — and the step order is `pause_steps`.

use flux_fence::Epoch;
use flux_fence::decide::AcquireDecision;
use flux_fence::decide::LostWrite;
use flux_fence::decide::ReleaseDecision;
use flux_fence::decide::decide_acquire;
use flux_fence::lease::{
    LeaseDecision, LeaseReleaseDecision, RenewDecision, decide_lease_acquire, decide_lease_park,
    decide_lease_release, decide_renew, is_stale,
};
use flux_fence::release::decide_release;
use flux_suspend::Strategy;
use flux_suspend::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED};
use flux_suspend::judge::{Judge, Member, Read, Role, Seen, Verdict, first_broken};
use flux_suspend::steps::{Step, pause_steps};
use serde_json::Value;

use crate::spec::{Actor, Handoff, Mutant};
use crate::state::{Hold, P, Pc, SeenC, State, T, ghost, next_release};
use crate::world::{LeaseObj, Obj, at, lease_config, sym, text};

impl Handoff {
    /// The pc after a pause step, following production's `pause_steps(Ack, no quiesce,
    /// with a parent)`.
    fn after(done: Step) -> Pc {
        let steps = pause_steps(Strategy::Ack, false, true);
        let i = steps
            .iter()
            .position(|s| *s == done)
            .expect("step in the plan");
        match steps.get(i + 1) {
            Some(Step::FenceParents) => Pc::ReadFence(P),
            Some(Step::AwaitParentAcks) => Pc::Ack(P),
            Some(Step::FenceTargets) => Pc::ReadFence(T),
            Some(Step::AwaitTargetAcks) => Pc::Ack(T),
            Some(Step::Prove) => Pc::Prove,
            None => Pc::Recheck,
            Some(other) => unreachable!("strategy ack has no step {other:?}"),
        }
    }

    fn fence_step(o: usize) -> Step {
        if o == P {
            Step::FenceParents
        } else {
            Step::FenceTargets
        }
    }

    /// `LeaseGuard::assert`: stale by our own clock, or not ours on a re-read, is a sticky
    /// loss; otherwise renew (an update on the read resourceVersion).
    pub(crate) fn assert_lease(&self, s: &mut State, r: usize) -> bool {
        let holder = self.holder(Actor::Run(r)).clone();
        let cfg = lease_config();
        let run = &s.runs[r];
        if run.lost || is_stale(at(run.renewed), Self::now(s), cfg.duration) {
            s.runs[r].lost = true;
            return false;
        }
        let read = s.lease.as_ref().map(|l| l.render(&self.keys.parked));
        if let RenewDecision::Renew(next) = decide_renew(
            read.as_ref(),
            &holder,
            Epoch(u64::from(run.epoch)),
            Self::now(s),
        ) {
            let cur = s.lease.as_ref().expect("renewed a present Lease");
            s.lease = Some(cur.updated(&next, &self.keys.parked).expect("same read"));
            s.runs[r].renewed = s.clock;
            true
        } else {
            s.runs[r].lost = true;
            false
        }
    }

    pub(crate) fn run_step(&self, s: &mut State, r: usize, lost: Option<bool>) {
        match s.runs[r].pc {
            Pc::Lease => self.take_lease(s, r),
            Pc::ReadFence(o) => {
                s.runs[r].snap = Some(s.objs[o].clone());
                s.runs[r].pc = Pc::WriteFence(o);
            }
            Pc::WriteFence(o) => self.write_fence(s, r, o, lost),
            Pc::Ack(o) => {
                s.runs[r].pc = Self::after(if o == P {
                    Step::AwaitParentAcks
                } else {
                    Step::AwaitTargetAcks
                });
            }
            Pc::Prove => self.prove_pass(s, r),
            Pc::Recheck => self.recheck(s, r),
            Pc::Work => self.work(s, r),
            Pc::ReadRelease(o) => {
                if s.runs[r].held[o].is_some() {
                    s.runs[r].snap = Some(s.objs[o].clone());
                    s.runs[r].pc = Pc::WriteRelease(o);
                } else {
                    s.runs[r].pc = next_release(o);
                }
            }
            Pc::WriteRelease(o) => self.write_release(s, r, o, lost),
            Pc::EndLease => self.end_lease(s, r),
            Pc::Done | Pc::Crashed => {}
        }
    }

    fn take_lease(&self, s: &mut State, r: usize) {
        let holder = self.holder(Actor::Run(r)).clone();
        let read = s.lease.as_ref().map(|l| l.render(&self.keys.parked));
        let d = decide_lease_acquire(read.as_ref(), &lease_config(), &holder, Self::now(s))
            .expect("well-formed Lease");
        let run = &mut s.runs[r];
        match d {
            LeaseDecision::Create(l) => {
                s.lease = Some(LeaseObj::parse(&l, &self.keys.parked, 1));
            }
            LeaseDecision::Take(l) => {
                let cur = s.lease.as_ref().expect("took a present Lease");
                s.lease = Some(cur.updated(&l, &self.keys.parked).expect("same read"));
            }
            LeaseDecision::Ours { epoch } => {
                run.epoch = u8::try_from(epoch.0).expect("small epoch");
                run.renewed = s.clock;
                run.pc = Pc::ReadFence(P);
                return;
            }
            _ => {
                run.pc = Pc::Done;
                return;
            }
        }
        run.epoch = s.lease.as_ref().expect("just written").transitions;
        run.renewed = s.clock;
        run.pc = Self::after_lease();
    }

    fn after_lease() -> Pc {
        match pause_steps(Strategy::Ack, false, true).first() {
            Some(Step::FenceParents) => Pc::ReadFence(P),
            other => unreachable!("ack with a parent starts by fencing it, not {other:?}"),
        }
    }

    /// `Fencer::apply_acquire`: decide on the object as read, assert the Lease, send the patch.
    /// The assertion and the patch are one step (a holder is not stalled for a lease
    /// duration between them: the timing assumption every lease makes, docs/verify.md).
    fn write_fence(&self, s: &mut State, r: usize, o: usize, lost: Option<bool>) {
        if !self.assert_lease(s, r) {
            s.runs[r].snap = None;
            s.runs[r].pc = Pc::ReadRelease(T);
            return;
        }
        let owner = self.owner(Actor::Run(r), s.runs[r].epoch);
        let snap = s.runs[r].snap.take().expect("read before write");
        let marks = Self::marks(r, o);
        let d = decide_acquire(
            Some(&snap.render()),
            &self.keys,
            &owner,
            &marks,
            None,
            at(0),
        )
        .expect("valid marks");
        let plan = match d {
            AcquireDecision::Patch(plan) => plan,
            AcquireDecision::AlreadyOurs { .. } => {
                let prior = s.objs[o].get(&self.keys.prior).expect("ours has a prior");
                s.runs[r].held[o] = Some(Hold {
                    prior: sym(prior),
                    seq: s.fences[o],
                });
                s.runs[r].pc = Self::after(Self::fence_step(o));
                return;
            }
            _ => {
                s.runs[r].pc = Pc::ReadRelease(T);
                return;
            }
        };
        let before = s.objs[o].clone();
        let landed = if lost == Some(false) {
            false
        } else if let Ok(next) = before.patched(&plan.patch) {
            s.prev[o] = Some(before.clone());
            s.objs[o] = next;
            s.fences[o] += 1;
            s.person_wrote[o] = None;
            Self::touched(s, o, &before);
            true
        } else {
            false
        };
        let hold = Hold {
            prior: sym(&plan.prior_annotation),
            seq: s.fences[o],
        };
        let run = &mut s.runs[r];
        if lost.is_none() {
            if landed {
                run.held[o] = Some(hold);
                run.pc = Self::after(Self::fence_step(o));
            } else {
                run.pc = Pc::ReadFence(o);
            }
            return;
        }
        // A lost response: re-read and accept only the exact post-state (production `lost_write`).
        match flux_fence::decide::lost_write(Some(&s.objs[o].render()), &self.keys, &plan) {
            LostWrite::Landed { .. } => {
                run.held[o] = Some(hold);
                run.pc = Self::after(Self::fence_step(o));
            }
            LostWrite::NotApplied => run.pc = Pc::ReadFence(o),
            _ => {
                // Fail closed: keep the unconfirmed guard so cleanup deals with it.
                run.held[o] = Some(hold);
                run.pc = Pc::ReadRelease(T);
            }
        }
    }

    fn seen(&self, obj: &Obj) -> SeenC {
        SeenC {
            rv: obj.rv,
            owner: obj.get(&self.keys.owner).map(sym),
            suspended: obj.suspend == Some(true),
            disabled: obj.get(RECONCILE_ANNOTATION) == Some(RECONCILE_DISABLED),
        }
    }

    /// The chain as the judge and the recheck see it: parent, then target (which must carry
    /// `reconcile: disabled`), owned by run `r`.
    fn members(&self, s: &State, r: usize) -> Vec<Member> {
        let owner = self.owner(Actor::Run(r), s.runs[r].epoch).to_string();
        let member =
            |role, uid: &str, disabled| Member::new(role, uid.to_string(), owner.clone(), disabled);
        vec![
            member(Role::Parent, s.objs[P].uid, false),
            member(Role::Target, s.objs[T].uid, true),
        ]
    }

    /// One read of object `o` as production's `read_for_proof` reduces it.
    fn read(obj: &Obj, owner_key: &str) -> Read {
        Read::Seen(
            Seen::new(obj.uid.to_string(), obj.rv.to_string())
                .with_owner(obj.get(owner_key).map(str::to_string))
                .with_suspended(obj.suspend == Some(true))
                .with_reconcile_disabled(obj.get(RECONCILE_ANNOTATION) == Some(RECONCILE_DISABLED)),
        )
    }

    /// `PauseCheck::still_holds` right before the protected write: one read of the chain,
    /// judged by production's `first_broken`. A broken pause writes nothing and goes to
    /// cleanup (the release then finds the moved mark and keeps that fence).
    fn recheck(&self, s: &mut State, r: usize) {
        if self.is(Mutant::SecretWriteWithoutRecheck) {
            s.runs[r].pc = Pc::Work;
            return;
        }
        let reads = [
            Self::read(&s.objs[P], &self.keys.owner),
            Self::read(&s.objs[T], &self.keys.owner),
        ];
        if first_broken(&self.members(s, r), &reads).is_some() {
            s.runs[r].pc = Pc::ReadRelease(T);
        } else {
            s.runs[r].rechecked_at = Some(s.flips);
            s.runs[r].pc = Pc::Work;
        }
    }

    fn prove_pass(&self, s: &mut State, r: usize) {
        let owner = self.owner(Actor::Run(r), s.runs[r].epoch).to_string();
        let mut judge = Judge::new(self.members(s, r));
        let now = [self.seen(&s.objs[P]), self.seen(&s.objs[T])];
        let to_read = |pass: &[SeenC; 2]| -> Vec<Read> {
            [P, T]
                .iter()
                .map(|&o| {
                    Read::Seen(
                        Seen::new(s.objs[o].uid.to_string(), pass[o].rv.to_string())
                            .with_owner(pass[o].owner.map(|x| text(x).to_string()))
                            .with_suspended(pass[o].suspended)
                            .with_reconcile_disabled(pass[o].disabled),
                    )
                })
                .collect()
        };
        let mut verdict = Verdict::Pending;
        for pass in s.runs[r].passes.iter().chain(std::iter::once(&now)) {
            verdict = judge.observe(&to_read(pass));
        }
        let mut proven = matches!(verdict, Verdict::Proven(_));
        if self.is(Mutant::JudgeReadsConditions) && (s.objs[P].reconciling || s.objs[T].reconciling)
        {
            proven = false;
        }
        let stable = s.runs[r].passes.len() == 2
            && s.runs[r].passes.iter().all(|p| *p == now)
            && now[P].owner == Some(sym(&owner))
            && now[T].owner == Some(sym(&owner))
            && now.iter().all(|x| x.suspended)
            && now[T].disabled;
        let run = &mut s.runs[r];
        if proven {
            run.proven = true;
            run.passes.clear();
            run.pc = Self::after(Step::Prove);
        } else {
            if stable {
                s.ghost |= ghost::FROZEN_BLOCKS;
            }
            run.passes.push(now);
            if run.passes.len() > 2 {
                run.passes.remove(0);
            }
        }
    }

    /// The work phase's protected write (a Secret): asserted Lease, then a CAS write. The
    /// assertion and the write are one step here (see docs/verify.md).
    fn work(&self, s: &mut State, r: usize) {
        let ok = self.assert_lease(s, r);
        if ok {
            let owner = self.owner(Actor::Run(r), s.runs[r].epoch).to_string();
            // A person may set `spec.suspend=false` by hand on a fenced object at any time:
            // no Kubernetes write can be conditional on another object, so no protocol can
            // stop that override between the writer's last re-read and its write. It is
            // excused only there: a flip after this run's last re-read of the chain (the
            // ghost sequence number), on the object whose flag the person flipped under this
            // very fence (the release then finds the mark moved, keeps the fence and reports
            // it: properties 3 and 9). A flip before the re-read must have stopped the write.
            let after_recheck = s.runs[r].rechecked_at.is_some_and(|at| s.flips > at);
            let unsuspended_by_hand = |o: usize| {
                after_recheck && s.person_wrote[o] == Some(crate::world::sym("/spec/suspend"))
            };
            let fenced = |o: usize| {
                let obj = &s.objs[o];
                obj.get(&self.keys.owner) == Some(owner.as_str())
                    && (obj.suspend == Some(true) || unsuspended_by_hand(o))
            };
            let under_proof = s.runs[r].proven
                && fenced(P)
                && fenced(T)
                && s.objs[T].get(RECONCILE_ANNOTATION) == Some(RECONCILE_DISABLED)
                && self.live(s, r);
            if !under_proof {
                s.ghost |= ghost::SECRET_UNPROVEN;
            }
        }
        s.runs[r].pc = Pc::ReadRelease(T);
    }

    pub(crate) fn park(&self, s: &mut State, r: usize) {
        let holder = self.holder(Actor::Run(r)).clone();
        let epoch = Epoch(u64::from(s.runs[r].epoch));
        let read = s.lease.as_ref().map(|l| l.render(&self.keys.parked));
        if let LeaseReleaseDecision::Update(next) =
            decide_lease_park(read.as_ref(), &holder, epoch, &self.keys.parked)
        {
            let cur = s.lease.as_ref().expect("parked a present Lease");
            s.lease = Some(cur.updated(&next, &self.keys.parked).expect("same read"));
            s.runs[r].parked = true;
            s.runs[r].pc = Pc::Done;
        } else {
            // Not ours any more: release what is still provably ours.
            s.runs[r].pc = Pc::ReadRelease(T);
        }
    }

    /// Releases decide on the object as read (`snap`) and send the patch to what the server
    /// holds now. Releases do not assert the Lease (cleanup after a lost Lease still releases
    /// what is provably ours).
    fn write_release(&self, s: &mut State, r: usize, o: usize, lost: Option<bool>) {
        let snap = s.runs[r].snap.take().expect("read before write");
        let fence = s.runs[r].held[o].expect("releasing a held fence");
        let owner = self.owner(Actor::Run(r), s.runs[r].epoch).to_string();
        let held = self.held(&owner, fence.prior, snap.uid);
        match self.release_decision(&snap, &held) {
            ReleaseDecision::Patch(patch) => {
                if lost == Some(false) {
                    s.runs[r].pc = Pc::ReadRelease(o);
                    return;
                }
                let before = s.objs[o].clone();
                if let Ok(next) = before.patched(&patch) {
                    s.prev[o] = Some(before.clone());
                    s.objs[o] = next;
                    self.note_release(s, Actor::Run(r), o, &before);
                    if lost.is_none() {
                        s.runs[r].held[o] = None;
                        s.runs[r].pc = next_release(o);
                        return;
                    }
                }
                // 422 or a lost answer: re-read and decide again.
                s.runs[r].pc = Pc::ReadRelease(o);
            }
            ReleaseDecision::MarkMoved { .. } => {
                s.runs[r].kept = true;
                // Never release a parent while its child is still ours.
                s.runs[r].pc = Pc::EndLease;
            }
            _ => {
                s.runs[r].held[o] = None;
                s.runs[r].pc = next_release(o);
            }
        }
    }

    /// `decide_release`, or a mutant of it.
    pub(crate) fn release_decision(
        &self,
        read: &Obj,
        held: &flux_fence::decide::Held,
    ) -> ReleaseDecision {
        let mut obj = read.render();
        let ours = held.owner.to_string();
        if self.is(Mutant::ReleaseWithoutOwnerTest) {
            // Decide as if the owner were ours, then drop the owner test from the patch.
            set_owner(&mut obj, &self.keys.owner, &ours);
        }
        if self.is(Mutant::ReleaseIgnoresMovedMarks) {
            for m in &held.marks {
                if let Some(slot) = obj.pointer_mut(&m.at.pointer()) {
                    *slot = m.value.clone();
                }
            }
        }
        let d = decide_release(Some(&obj), &self.keys, held).expect("encodable patch");
        match d {
            ReleaseDecision::Patch(p) if self.mutant.is_some() => {
                let owner_ptr = flux_fence::pointer::escape(&self.keys.owner);
                let ops =
                    p.0.into_iter()
                        .filter(|op| {
                            let drop_owner = self.is(Mutant::ReleaseWithoutOwnerTest)
                                && matches!(op, json_patch::PatchOperation::Test(t)
                                if t.path.as_str().ends_with(&owner_ptr));
                            let drop_mark = self.is(Mutant::ReleaseIgnoresMovedMarks)
                                && matches!(op, json_patch::PatchOperation::Test(t)
                                if held.marks.iter().any(|m| t.path.as_str() == m.at.pointer()));
                            !drop_owner && !drop_mark
                        })
                        .collect();
                ReleaseDecision::Patch(json_patch::Patch(ops))
            }
            other => other,
        }
    }

    fn end_lease(&self, s: &mut State, r: usize) {
        let run = &s.runs[r];
        if run.epoch != 0 && !run.kept {
            let holder = self.holder(Actor::Run(r)).clone();
            let read = s.lease.as_ref().map(|l| l.render(&self.keys.parked));
            if let LeaseReleaseDecision::Update(next) = decide_lease_release(
                read.as_ref(),
                &holder,
                Epoch(u64::from(run.epoch)),
                &self.keys.parked,
            ) {
                let cur = s.lease.as_ref().expect("released a present Lease");
                s.lease = Some(cur.updated(&next, &self.keys.parked).expect("same read"));
            }
        }
        s.runs[r].pc = Pc::Done;
    }
}

fn set_owner(obj: &mut Value, key: &str, owner: &str) {
    if obj.pointer("/metadata/annotations").is_none() {
        obj["metadata"]["annotations"] = serde_json::json!({});
    }
    obj["metadata"]["annotations"][key] = Value::String(owner.to_string());
}
