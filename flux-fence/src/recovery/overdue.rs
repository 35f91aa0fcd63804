//! Pauses held past their max-hold. A holder may say how long it means to hold
//! ([`crate::LeaseConfig::max_hold`], `--max-hold`): the limit is written on the Lease and as
//! a mark of each fence ([`crate::AnnotationKeys::max_hold`]). A listing names each pause
//! held longer, with its holder, reason, age and limit, so a person (or a scheduled job that
//! alerts) can resume it.
//!
//! # Rules
//!
//! - **Time running out never resumes anything.** Nothing here writes; no path releases a
//!   fence or a Lease because its max-hold passed. Overdue is a fact to report, like a
//!   fence's age.
//! - **A pause is one owner value** (`holder;epoch`): its fences are listed together, its age
//!   is that of its oldest fence, its limit the shortest one recorded on them.
//! - **Ages come from the fencing process's clock** (the prior annotation's `since`), as every
//!   age in a listing: a fence dated in the future is not overdue.
//!
//! All pure: `overdue` decides one hold, [`overdue_pauses`] groups a discovery.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::assess::ChildMark;
use super::ends::{Ending, Hold, what_ends};
use super::words::{age, short_ref};
use crate::ObjectRef;
use crate::discover::{FoundFence, FoundLease, FoundState, ReleasePlan};
use crate::lease::decide::format_max_hold;

/// Whether a hold taken at `since` with the limit `max_hold` is past it at `now`: held
/// strictly longer than `max_hold`. A `since` in the future (another clock) is not overdue.
///
/// # Guarantees
/// Pure; monotonic in `now`.
#[must_use]
pub(crate) fn overdue(since: Timestamp, max_hold: Duration, now: Timestamp) -> bool {
    Duration::try_from(now.duration_since(since)).is_ok_and(|held| held > max_hold)
}

/// One pause held past its max-hold.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OverduePause {
    /// The holder, as its fences name it.
    pub holder: String,
    /// The epoch of its owner value.
    pub epoch: u64,
    /// The reason recorded on its fences (`--reason`), if any.
    pub reason: Option<String>,
    /// When its oldest fence was taken.
    pub since: Timestamp,
    /// How long it has been held (`now - since`).
    pub age: Duration,
    /// The limit it recorded.
    pub max_hold: Duration,
    /// Its targets (the children a pause names), in discovery order.
    pub targets: Vec<ObjectRef>,
    /// Every fenced object of the pause, in discovery order (targets and parents).
    pub objects: Vec<ObjectRef>,
}

impl OverduePause {
    /// The object an alert names: its first target, else its first object.
    #[must_use]
    pub fn subject(&self) -> Option<&ObjectRef> {
        self.targets.first().or_else(|| self.objects.first())
    }

    /// `held 3h05m, max-hold 2h`.
    #[must_use]
    pub fn held_line(&self) -> String {
        format!(
            "held {}, max-hold {}",
            age(self.age),
            format_max_hold(self.max_hold)
        )
    }

    /// What will end this pause, judged as recovery judges it ([`what_ends`]) on `fences`
    /// (the discovery it was found in) and `lease`, the Lease `ours` (`namespace/name`) as
    /// read: its resume when its holder parked that Lease, its run while it renews it,
    /// `fences recover` only where recovery acts.
    #[must_use]
    pub fn ending(&self, fences: &[FoundFence], lease: Option<&FoundLease>, ours: &str) -> Ending {
        let (mut other, mut moved) = (None, false);
        for f in fences {
            if let FoundState::Fence {
                owner,
                lease: taken_under,
                release,
                ..
            } = &f.state
                && owner.holder.as_str() == self.holder
                && owner.epoch.0 == self.epoch
            {
                other = other.or(taken_under.as_deref().filter(|l| *l != ours));
                moved |= matches!(release, ReleasePlan::Withheld { .. });
            }
        }
        what_ends(
            &Hold::new(&self.holder, lease.and_then(|l| l.holder.as_deref()))
                .parked(lease.is_some_and(|l| l.parked))
                .unrenewed(lease.is_some_and(|l| l.expired))
                .other_lease(other)
                .mark_moved(moved),
        )
    }

    /// The facts of one overdue pause (`--output json`).
    #[must_use]
    pub fn to_json(&self) -> Value {
        let names = |v: &[ObjectRef]| v.iter().map(short_ref).collect::<Vec<_>>();
        json!({
            "holder": self.holder,
            "epoch": self.epoch,
            "reason": self.reason,
            "since": self.since.to_string(),
            "age_seconds": self.age.as_secs(),
            "max_hold": format_max_hold(self.max_hold),
            "max_hold_seconds": self.max_hold.as_secs(),
            "targets": names(&self.targets),
            "objects": names(&self.objects),
        })
    }
}

/// The pauses among `fences` held past the max-hold they recorded, at `now`, in the order
/// their first fence was discovered. Fences without a max-hold (none given, or written by an
/// older version) are never overdue; malformed ones are skipped (listings show them).
#[must_use]
pub fn overdue_pauses(
    fences: &[FoundFence],
    child: &ChildMark,
    now: Timestamp,
) -> Vec<OverduePause> {
    let mut pauses: Vec<OverduePause> = Vec::new();
    for f in fences {
        let FoundState::Fence {
            owner,
            since,
            marks,
            max_hold,
            reason,
            ..
        } = &f.state
        else {
            continue;
        };
        let holder = owner.holder.to_string();
        let epoch = owner.epoch.0;
        let at = pauses
            .iter()
            .position(|p| p.holder == holder && p.epoch == epoch);
        let p = if let Some(i) = at {
            &mut pauses[i]
        } else {
            pauses.push(OverduePause {
                holder,
                epoch,
                reason: None,
                since: *since,
                age: Duration::ZERO,
                max_hold: Duration::MAX,
                targets: Vec::new(),
                objects: Vec::new(),
            });
            let last = pauses.len() - 1;
            &mut pauses[last]
        };
        p.since = p.since.min(*since);
        if let Some(m) = max_hold {
            p.max_hold = p.max_hold.min(*m);
        }
        if p.reason.is_none() {
            p.reason.clone_from(reason);
        }
        if child.is_child(marks) {
            p.targets.push(f.object.clone());
        }
        p.objects.push(f.object.clone());
    }
    pauses.retain(|p| p.max_hold != Duration::MAX && overdue(p.since, p.max_hold, now));
    for p in &mut pauses {
        p.age = Duration::try_from(now.duration_since(p.since)).unwrap_or_default();
    }
    pauses
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::discover::ReleasePlan;
    use crate::mark::{MarkAt, RecordedMark, Restore};

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn max_hold_overdue_is_held_strictly_longer_than_the_limit() {
        let h = Duration::from_hours;
        let table = [
            ("2026-01-01T00:00:00Z", h(2), "2026-01-01T01:59:59Z", false),
            ("2026-01-01T00:00:00Z", h(2), "2026-01-01T02:00:00Z", false),
            ("2026-01-01T00:00:00Z", h(2), "2026-01-01T02:00:01Z", true),
            (
                "2026-01-01T00:00:00Z",
                Duration::from_secs(1),
                "2026-01-02T00:00:00Z",
                true,
            ),
            // A fence dated in the future (the fencer's clock ran ahead): not overdue.
            ("2026-01-01T05:00:00Z", h(2), "2026-01-01T00:00:00Z", false),
        ];
        for (since, max, now, want) in table {
            assert_eq!(
                overdue(at(since), max, at(now)),
                want,
                "{since} {max:?} {now}"
            );
        }
    }

    fn ks(name: &str) -> ObjectRef {
        crate::guard::test_kustomization("ns", name)
    }

    fn fence(name: &str, owner: &str, since: &str, max: Option<u64>, target: bool) -> FoundFence {
        let marks = if target {
            vec![RecordedMark {
                at: MarkAt::Annotation("kustomize.toolkit.fluxcd.io/reconcile".into()),
                value: json!("disabled"),
                prior: None,
                restore: Restore::Exact,
            }]
        } else {
            Vec::new()
        };
        FoundFence {
            object: ks(name),
            state: FoundState::Fence {
                owner: owner.parse().unwrap(),
                since: at(since),
                age: Duration::ZERO,
                marks,
                release: ReleasePlan::Patch("[]".into()),
                lease: None,
                max_hold: max.map(Duration::from_secs),
                reason: Some(format!("why {owner}")),
            },
        }
    }

    /// What ends an overdue pause follows its Lease's liveness, never the holder's name
    /// alone: a dead run's (unparked, unrenewed) is recovered, not "released when it ends".
    #[test]
    fn max_hold_what_ends_an_overdue_pause_follows_its_leases_liveness() {
        let child = ChildMark::annotation("kustomize.toolkit.fluxcd.io/reconcile", "disabled");
        let fences = [fence(
            "child",
            "a;1",
            "2026-01-01T00:00:00Z",
            Some(60),
            true,
        )];
        let p = &overdue_pauses(&fences, &child, at("2026-01-01T00:10:00Z"))[0];
        let lease = |holder: Option<&str>, parked, expired| FoundLease {
            namespace: "fs".into(),
            name: "l".into(),
            holder: holder.map(str::to_string),
            epoch: 1,
            acquired: None,
            renewed: None,
            expired,
            parked,
            release_patch: None,
        };
        let a = || "a".to_string();
        let table = [
            (
                Some(lease(Some("a"), true, true)),
                Ending::Resume { holder: a() },
            ),
            (
                Some(lease(Some("a"), false, false)),
                Ending::ItsRun { holder: a() },
            ),
            (
                Some(lease(Some("a"), false, true)),
                Ending::Recover { holds_lease: true },
            ),
            (
                Some(lease(Some("b"), true, false)),
                Ending::Recover { holds_lease: false },
            ),
            (
                Some(lease(None, false, false)),
                Ending::Recover { holds_lease: false },
            ),
            (None, Ending::Recover { holds_lease: false }),
        ];
        for (l, want) in table {
            assert_eq!(p.ending(&fences, l.as_ref(), "fs/l"), want, "{l:?}");
        }
        // Taken under another Lease: only that one says.
        let mut other = fences.clone();
        if let FoundState::Fence { lease, .. } = &mut other[0].state {
            *lease = Some("fs/l2".into());
        }
        let parked = lease(Some("a"), true, false);
        assert_eq!(
            p.ending(&other, Some(&parked), "fs/l"),
            Ending::OtherLease("fs/l2".into())
        );
    }

    #[test]
    fn max_hold_pauses_are_grouped_by_owner_and_only_overdue_ones_listed() {
        let child = ChildMark::annotation("kustomize.toolkit.fluxcd.io/reconcile", "disabled");
        let fences = [
            fence("parent", "a;1", "2026-01-01T00:00:00Z", Some(60), false),
            fence("child", "a;1", "2026-01-01T00:00:05Z", Some(60), true),
            // Within its limit.
            fence("fresh", "b;2", "2026-01-01T00:09:00Z", Some(3600), true),
            // No limit recorded (an older version, or none given): never overdue.
            fence("old", "c;3", "2025-01-01T00:00:00Z", None, true),
        ];
        let got = overdue_pauses(&fences, &child, at("2026-01-01T00:10:00Z"));
        assert_eq!(got.len(), 1, "{got:?}");
        let p = &got[0];
        assert_eq!((p.holder.as_str(), p.epoch), ("a", 1));
        assert_eq!(p.reason.as_deref(), Some("why a;1"));
        assert_eq!(p.age, Duration::from_mins(10));
        assert_eq!(p.max_hold, Duration::from_mins(1));
        assert_eq!(p.subject(), Some(&ks("child")));
        assert_eq!(p.objects, [ks("parent"), ks("child")]);
        assert_eq!(p.held_line(), "held 10m00s, max-hold 1m");
        assert_eq!(
            p.to_json()["objects"],
            json!(["ks/ns/parent", "ks/ns/child"])
        );
    }
}
