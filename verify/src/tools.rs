//! The tools a person or another job runs: `resume --holder <run 0>`, `fences recover --yes`
//! while runs are active, and the same recovery once every run has ended (with
//! `--include-paused`), which the liveness property relies on.

use flux_fence::decide::ReleaseDecision;
use flux_fence::lease::GoneHolder;
use flux_fence::lease::{
    LeaseDecision, LeaseReleaseDecision, RecoverDecision, decide_lease_acquire,
    decide_lease_release, decide_recover, is_expired,
};
use flux_fence::{Epoch, OwnerValue};

use crate::spec::{Actor, Handoff, Mutant};
use crate::state::{P, State, T, Tool, ToolPc};
use crate::world::{LeaseObj, lease_config, sym, text};

impl Handoff {
    fn tool(s: &mut State, actor: Actor) -> &mut Tool {
        match actor {
            Actor::Resume => &mut s.resume,
            Actor::Recover => &mut s.recover,
            Actor::Janitor => &mut s.janitor,
            Actor::Run(_) => unreachable!("runs are not tools"),
        }
    }

    /// Writes a Lease decision (an update on the read resourceVersion, or a create) and
    /// returns the epoch it holds.
    fn put_lease(&self, s: &mut State, d: LeaseDecision) -> Option<u8> {
        match d {
            LeaseDecision::Create(l) => {
                s.lease = Some(LeaseObj::parse(&l, &self.keys.parked, 1));
            }
            LeaseDecision::Take(l) => {
                let cur = s.lease.as_ref().expect("took a present Lease");
                s.lease = Some(cur.updated(&l, &self.keys.parked).expect("same read"));
            }
            LeaseDecision::Ours { epoch } => return u8::try_from(epoch.0).ok(),
            _ => return None,
        }
        s.lease.as_ref().map(|l| l.transitions)
    }

    pub(crate) fn resume_step(&self, s: &mut State) {
        let holder = self.holder(Actor::Resume).clone();
        let read = s.lease.as_ref().map(|l| l.render(&self.keys.parked));
        match s.resume.pc {
            ToolPc::Idle | ToolPc::Lease => {
                // The decision `resume --holder` makes (a person or job that cannot attest the
                // holder's exit).
                let refused = !self.is(Mutant::ResumeAdoptsLiveHolder)
                    && !matches!(
                        flux_fence::recovery::decide_adopt(
                            read.as_ref(),
                            &holder,
                            &self.keys,
                            flux_fence::recovery::HolderProcess::Unknown,
                        ),
                        flux_fence::recovery::AdoptDecision::Acquire
                    );
                let d = decide_lease_acquire(read.as_ref(), &lease_config(), &holder, Self::now(s))
                    .expect("well-formed Lease");
                let epoch = if refused { None } else { self.put_lease(s, d) };
                s.resume = match epoch {
                    Some(epoch) => Tool {
                        pc: ToolPc::Release(T),
                        epoch,
                        kept: false,
                    },
                    None => Tool {
                        pc: ToolPc::Done,
                        ..s.resume
                    },
                };
            }
            ToolPc::Release(o) => {
                let mine = |h: &str| h == holder.as_str();
                let kept = self.release_recorded(s, Actor::Resume, o, &mine);
                s.resume.kept |= kept;
                s.resume.pc = if o == T && !kept {
                    ToolPc::Release(P)
                } else {
                    ToolPc::EndLease
                };
            }
            ToolPc::EndLease => {
                if !s.resume.kept {
                    self.drop_lease(s, Actor::Resume);
                }
                s.resume.pc = ToolPc::Done;
            }
            ToolPc::Done => {}
        }
    }

    pub(crate) fn recover_step(&self, s: &mut State, actor: Actor) {
        let me = self.holder(actor).clone();
        let include_paused = actor == Actor::Janitor;
        let before_lease = actor == Actor::Recover && self.is(Mutant::RecoveryBeforeLease);
        let pc = Self::tool(s, actor).pc;
        match pc {
            ToolPc::Idle if before_lease => Self::tool(s, actor).pc = ToolPc::Release(T),
            ToolPc::Idle | ToolPc::Lease => {
                if actor == Actor::Janitor
                    && let Some(l) = &s.lease
                    && l.holder.is_some()
                {
                    // Every run has ended: the recovery watches the Lease for a full duration.
                    s.clock = s.clock.max(l.renewed + 1);
                }
                let read = s.lease.as_ref().map(|l| l.render(&self.keys.parked));
                let now = Self::now(s);
                let epoch = match s
                    .lease
                    .as_ref()
                    .and_then(|l| l.holder.map(|h| (h, l.is_parked())))
                {
                    None => {
                        let d = decide_lease_acquire(read.as_ref(), &lease_config(), &me, now)
                            .expect("well-formed Lease");
                        self.put_lease(s, d)
                    }
                    Some((_, true)) if !include_paused => None,
                    Some((h, _)) => {
                        // Production judges "gone" by watching the Lease unchanged for a full
                        // duration on its own clock; with the model's one clock that is the
                        // Lease not renewed for a duration, judged on the version read now.
                        let spec = read
                            .as_ref()
                            .and_then(|l| l.spec.clone())
                            .unwrap_or_default();
                        let rv = read
                            .as_ref()
                            .and_then(|l| l.metadata.resource_version.clone())
                            .unwrap_or_default();
                        let gone = GoneHolder::new(
                            text(h),
                            rv,
                            "the Lease was not renewed for a full duration",
                        );
                        if is_expired(&spec, now) {
                            match decide_recover(read.as_ref(), &lease_config(), &me, &gone, now)
                                .expect("well-formed Lease")
                            {
                                RecoverDecision::Take(l) => {
                                    self.put_lease(s, LeaseDecision::Take(l))
                                }
                                _ => None,
                            }
                        } else {
                            None
                        }
                    }
                };
                let t = Self::tool(s, actor);
                match epoch {
                    Some(e) if !before_lease => {
                        t.epoch = e;
                        t.pc = ToolPc::Release(T);
                    }
                    Some(e) => {
                        t.epoch = e;
                        t.pc = ToolPc::EndLease;
                    }
                    None => t.pc = ToolPc::Done,
                }
            }
            ToolPc::Release(o) => {
                let lease = s.lease.clone();
                let now = Self::now(s);
                let orphan = |h: &str| {
                    if h == me.as_str() {
                        return false;
                    }
                    if !before_lease {
                        // We hold the Lease: every other holder's fence is orphaned.
                        return true;
                    }
                    // The old `fences recover`: judged by the Lease as read, without holding it.
                    lease.as_ref().is_none_or(|l| {
                        let spec = l.render(&self.keys.parked).spec.unwrap_or_default();
                        l.holder != Some(sym(h)) || (!l.is_parked() && is_expired(&spec, now))
                    })
                };
                let kept = self.release_recorded(s, actor, o, &orphan);
                let t = Self::tool(s, actor);
                t.kept |= kept;
                t.pc = match (o, before_lease) {
                    (T, _) if !kept => ToolPc::Release(P),
                    (_, true) => ToolPc::Lease,
                    (_, false) => ToolPc::EndLease,
                };
            }
            ToolPc::EndLease => {
                self.drop_lease(s, actor);
                Self::tool(s, actor).pc = ToolPc::Done;
            }
            ToolPc::Done => {}
        }
    }

    fn drop_lease(&self, s: &mut State, actor: Actor) {
        let holder = self.holder(actor).clone();
        let epoch = Epoch(u64::from(Self::tool(s, actor).epoch));
        let read = s.lease.as_ref().map(|l| l.render(&self.keys.parked));
        if let LeaseReleaseDecision::Update(next) =
            decide_lease_release(read.as_ref(), &holder, epoch, &self.keys.parked)
        {
            let cur = s.lease.as_ref().expect("released a present Lease");
            s.lease = Some(cur.updated(&next, &self.keys.parked).expect("same read"));
        }
    }

    /// Releases the fence recorded on object `o` if its holder passes `which`, from the
    /// annotations alone (`Fencer::adopt_recorded`: `held_from_annotations`, then
    /// `decide_release` and one CAS patch). Returns whether a fence was kept (a mark moved).
    fn release_recorded(
        &self,
        s: &mut State,
        actor: Actor,
        o: usize,
        which: &dyn Fn(&str) -> bool,
    ) -> bool {
        let obj = s.objs[o].clone();
        let Some(owner) = obj.get(&self.keys.owner) else {
            return false;
        };
        let Ok(owner) = owner.parse::<OwnerValue>() else {
            return true;
        };
        if !which(owner.holder.as_str()) {
            return o == T;
        }
        let Ok((held, _)) = flux_fence::decide::held_from_annotations(&obj.render(), &self.keys)
        else {
            return true;
        };
        match self.release_decision(&obj, &held) {
            ReleaseDecision::Patch(patch) => {
                if let Ok(next) = obj.patched(&patch) {
                    s.prev[o] = Some(obj.clone());
                    s.objs[o] = next;
                    self.note_release(s, actor, o, &obj);
                }
                false
            }
            ReleaseDecision::MarkMoved { .. } => true,
            _ => false,
        }
    }
}
