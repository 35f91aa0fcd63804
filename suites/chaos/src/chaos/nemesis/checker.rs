//! The nemesis's judge: a pure function over a recorded history.
//!
//! The history is every watch event of the cell's Kustomizations, its Lease and the work
//! `ConfigMap`, each with its resourceVersion. On the suite's control plane (one etcd)
//! resourceVersions are one global order of writes, so sorting by them puts every work write
//! among the fence writes exactly as the server applied them. No wall clock is read.
//!
//! - **I1**: a work write naming holder H lies after H's fence on every member of the chain
//!   (owner `H;epoch`, one epoch, `spec.suspend=true`) and before the first of them is
//!   released or changed. One exception is counted, not flagged: a person's `flux resume`
//!   (`spec.suspend=false` under H's still-present owner) is a break the tool can only detect;
//!   writes after it and before H's first release are `after_break`.
//! - **I2**: at the end nothing is fenced and the Lease is free, except by a holder that said
//!   so (its last line mentions what is held), was killed with SIGKILL, or parked a pause that was not
//!   resumed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Which object an event is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Object {
    /// A Kustomization of the cell, by name.
    Member(String),
    /// The cell's Lease.
    Lease,
    /// The work `ConfigMap`.
    Work,
}

/// One watch event: the object as it was after one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub rv: u64,
    pub object: Object,
    /// The object was deleted by this write.
    pub deleted: bool,
    /// Members: the owner annotation (`H;epoch`).
    pub owner: Option<String>,
    /// Members: `spec.suspend`.
    pub suspend: bool,
    /// Lease: `holderIdentity`; Work: the holder the write names.
    pub holder: Option<String>,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dash = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
        match &self.object {
            Object::Member(n) => write!(
                f,
                "rv={} kustomization/{n} owner={} suspend={}",
                self.rv,
                dash(&self.owner),
                self.suspend
            )?,
            Object::Lease => write!(f, "rv={} lease holder={}", self.rv, dash(&self.holder))?,
            Object::Work => write!(f, "rv={} WORK by {}", self.rv, dash(&self.holder))?,
        }
        if self.deleted {
            write!(f, " (deleted)")?;
        }
        Ok(())
    }
}

/// How an actor's process ended, as far as I2 needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub holder: String,
    /// `run`, `pause`, `resume`, `recover`, `rogue`.
    pub verb: &'static str,
    pub code: Option<i32>,
    /// killed with SIGKILL by the nemesis.
    pub killed: bool,
    /// Its last line of stderr.
    pub last: String,
}

/// What the checker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Work writes judged.
    pub writes: usize,
    /// Work writes after a person's `flux resume` and before the holder's release.
    pub after_break: usize,
    pub violations: Vec<Violation>,
}

/// One broken invariant, with the resourceVersion it is about (for the history excerpt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub rv: u64,
    pub text: String,
}

/// Judges `history` (any order; sorted here) for a chain of `members` and the actors'
/// `outcomes`.
#[must_use]
pub fn check(history: &[Event], members: &[&str], outcomes: &[Outcome]) -> Verdict {
    let mut events = history.to_vec();
    events.sort_by(|a, b| a.rv.cmp(&b.rv).then(a.object.cmp(&b.object)));
    events.dedup();
    let mut state: BTreeMap<&str, (Option<String>, bool)> = BTreeMap::new();
    let mut lease: Option<String> = None;
    let mut v = Verdict {
        writes: 0,
        after_break: 0,
        violations: Vec::new(),
    };
    for e in &events {
        match &e.object {
            Object::Member(n) => {
                if let Some(m) = members.iter().find(|m| **m == n.as_str()) {
                    let owner = if e.deleted { None } else { e.owner.clone() };
                    state.insert(m, (owner, e.suspend && !e.deleted));
                }
            }
            Object::Lease => lease = e.holder.clone().filter(|h| !h.is_empty() && !e.deleted),
            Object::Work => {
                let Some(h) = &e.holder else { continue };
                v.writes += 1;
                match fenced_by(h, members, &state) {
                    Fenced::Whole => {}
                    Fenced::Broken => v.after_break += 1,
                    Fenced::Not(why) => v.violations.push(Violation {
                        invariant: "I1",
                        rv: e.rv,
                        text: format!("work write of {h} at rv {}: {why}", e.rv),
                    }),
                }
            }
        }
    }
    let end = events.last().map_or(0, |e| e.rv);
    let excused = excused(outcomes);
    for m in members {
        if let Some((Some(owner), _)) = state.get(m) {
            let h = owner.split(';').next().unwrap_or_default();
            if !excused.contains(h) {
                v.violations.push(Violation {
                    invariant: "I2",
                    rv: end,
                    text: format!("{m} still fenced by {owner} at the end, and {h} never said so"),
                });
            }
        }
    }
    if let Some(h) = &lease
        && !excused.contains(h.as_str())
    {
        v.violations.push(Violation {
            invariant: "I2",
            rv: end,
            text: format!("the Lease is still held by {h} at the end, and it never said so"),
        });
    }
    v
}

enum Fenced {
    Whole,
    Broken,
    Not(String),
}

/// Whether every member carries `holder`'s fence (one epoch) and is suspended.
fn fenced_by(
    holder: &str,
    members: &[&str],
    state: &BTreeMap<&str, (Option<String>, bool)>,
) -> Fenced {
    let mut epochs = BTreeSet::new();
    let mut broken = false;
    for m in members {
        match state.get(m) {
            Some((Some(owner), suspend)) if owner.split(';').next() == Some(holder) => {
                epochs.insert(owner.clone());
                broken |= !suspend;
            }
            Some((Some(owner), _)) => return Fenced::Not(format!("{m} is fenced by {owner}")),
            _ => return Fenced::Not(format!("{m} is not fenced")),
        }
    }
    if epochs.len() > 1 {
        return Fenced::Not(format!("the chain carries several fences {epochs:?}"));
    }
    if broken {
        Fenced::Broken
    } else {
        Fenced::Whole
    }
}

/// Holders allowed to hold something at the end: killed with SIGKILL ones, those whose last line says
/// something is held, and pauses never resumed successfully.
fn excused(outcomes: &[Outcome]) -> BTreeSet<&str> {
    let resumed: BTreeSet<&str> = outcomes
        .iter()
        .filter(|o| o.verb == "resume" && o.code == Some(0))
        .map(|o| o.holder.as_str())
        .collect();
    outcomes
        .iter()
        .filter(|o| {
            o.killed
                || (o.code != Some(0) && o.last.contains("held"))
                || (o.verb == "pause" && o.code == Some(0) && !resumed.contains(o.holder.as_str()))
                || (o.verb == "resume" && o.code != Some(0))
        })
        .map(|o| o.holder.as_str())
        .collect()
}

/// The events around `rv`: `before` events up to it and `after` events past it.
#[must_use]
pub fn around(history: &[Event], rv: u64, before: usize, after: usize) -> Vec<String> {
    let mut events = history.to_vec();
    events.sort_by(|a, b| a.rv.cmp(&b.rv).then(a.object.cmp(&b.object)));
    let at = events.partition_point(|e| e.rv <= rv);
    events[at.saturating_sub(before)..(at + after).min(events.len())]
        .iter()
        .map(|e| {
            let mark = if e.rv == rv { ">>" } else { "  " };
            format!("{mark} {e}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN: [&str; 2] = ["flux-system", "infrastructure"];

    fn member(rv: u64, name: &str, owner: Option<&str>, suspend: bool) -> Event {
        Event {
            rv,
            object: Object::Member(name.into()),
            deleted: false,
            owner: owner.map(Into::into),
            suspend,
            holder: None,
        }
    }

    fn lease(rv: u64, holder: Option<&str>) -> Event {
        Event {
            rv,
            object: Object::Lease,
            deleted: false,
            owner: None,
            suspend: false,
            holder: holder.map(Into::into),
        }
    }

    fn work(rv: u64, holder: &str) -> Event {
        Event {
            holder: Some(holder.into()),
            object: Object::Work,
            ..lease(rv, None)
        }
    }

    fn outcome(holder: &str, verb: &'static str, code: i32, last: &str) -> Outcome {
        Outcome {
            holder: holder.into(),
            verb,
            code: Some(code),
            killed: false,
            last: last.into(),
        }
    }

    /// A whole run of `h`: Lease, parent, target fenced; work at 20 and 21; released.
    fn clean(h: &str) -> Vec<Event> {
        let owner = format!("{h};1");
        vec![
            member(1, "flux-system", None, false),
            member(2, "infrastructure", None, false),
            lease(10, Some(h)),
            member(11, "flux-system", Some(&owner), true),
            member(12, "infrastructure", Some(&owner), true),
            work(20, h),
            work(21, h),
            member(30, "infrastructure", None, false),
            member(31, "flux-system", None, false),
            lease(32, None),
        ]
    }

    #[test]
    fn nemesis_a_clean_history_passes_in_any_order() {
        let mut h = clean("a");
        h.reverse();
        let v = check(&h, &CHAIN, &[outcome("a", "run", 0, "")]);
        assert_eq!(v.writes, 2);
        assert!(v.violations.is_empty(), "{v:?}");
    }

    #[test]
    fn nemesis_work_before_the_whole_chain_is_fenced_is_flagged() {
        let mut h = clean("a");
        h.push(work(11, "a")); // parent fenced, target not yet
        h.push(work(5, "a")); // nothing fenced: the rogue mutant
        let v = check(&h, &CHAIN, &[]);
        let rvs: Vec<u64> = v.violations.iter().map(|x| x.rv).collect();
        assert_eq!(rvs, [5, 11], "{v:?}");
        assert!(
            v.violations[1]
                .text
                .contains("infrastructure is not fenced")
        );
    }

    #[test]
    fn nemesis_work_after_the_first_release_or_under_another_owner_is_flagged() {
        let mut h = clean("a");
        h.push(work(30, "a")); // the target released at 30
        h.extend([
            lease(40, Some("b")),
            member(41, "flux-system", Some("b;2"), true),
            member(42, "infrastructure", Some("b;2"), true),
            work(43, "a"),
            work(44, "b"),
            member(45, "infrastructure", None, false),
            member(46, "flux-system", None, false),
            lease(47, None),
        ]);
        let v = check(&h, &CHAIN, &[]);
        let rvs: Vec<u64> = v.violations.iter().map(|x| x.rv).collect();
        assert_eq!(rvs, [30, 43], "{v:?}");
        assert!(v.violations[1].text.contains("fenced by b;2"));
    }

    #[test]
    fn nemesis_a_person_resume_is_counted_until_the_release_not_after() {
        let mut h = clean("a");
        h.push(member(22, "infrastructure", Some("a;1"), false)); // flux resume
        h.push(work(23, "a"));
        h.push(member(29, "flux-system", Some("a;1"), true));
        let v = check(&h, &CHAIN, &[]);
        assert_eq!((v.after_break, v.violations.len()), (1, 0), "{v:?}");
        let mut late = h.clone();
        late.push(work(33, "a"));
        assert_eq!(check(&late, &CHAIN, &[]).violations.len(), 1);
    }

    #[test]
    fn nemesis_fences_left_at_the_end_need_a_holder_that_said_so() {
        let left: Vec<Event> = clean("a").into_iter().take(7).collect();
        let v = check(&left, &CHAIN, &[outcome("a", "run", 0, "done")]);
        assert_eq!(v.violations.len(), 3, "two fences and the Lease: {v:?}");
        assert!(v.violations.iter().all(|x| x.invariant == "I2"));
        for excuse in [
            outcome(
                "a",
                "run",
                7,
                "error: release failed; flux-handoff fences (what is still held)",
            ),
            outcome(
                "a",
                "pause",
                0,
                "resume with: flux-handoff resume --holder a",
            ),
            Outcome {
                killed: true,
                ..outcome("a", "run", -1, "")
            },
        ] {
            assert!(
                check(&left, &CHAIN, std::slice::from_ref(&excuse))
                    .violations
                    .is_empty(),
                "{excuse:?}"
            );
        }
        let resumed = [outcome("a", "pause", 0, ""), outcome("a", "resume", 0, "")];
        assert_eq!(check(&left, &CHAIN, &resumed).violations.len(), 3);
    }

    #[test]
    fn nemesis_the_excerpt_marks_the_violation() {
        let h = clean("a");
        let lines = around(&h, 20, 2, 1);
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with(">> rv=20 WORK by a"), "{lines:?}");
    }
}
