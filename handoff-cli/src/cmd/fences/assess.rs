//! The pure core of `fences`: from a discovery report (and the Lease as read) decide, for each
//! fence, whether its holder looks live, which release command it would take or why one is
//! withheld, and what `fences recover` may release. No I/O here.

use std::fmt;
use std::time::Duration;

use flux_fence::RecordedMark;
use flux_fence::discover::{FenceReport, FoundFence, FoundLease, FoundState, ReleasePlan};
use flux_fence::{MarkAt, ObjectRef};
use flux_suspend::flux::{RECONCILE_ANNOTATION, RECONCILE_DISABLED};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// Whether a fence's holder still looks alive, with the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The holder is the current Lease holder and its renewTime is fresh.
    Live {
        /// The Lease's last renewal.
        renewed: Option<Timestamp>,
    },
    /// The holder parked the Lease on purpose (`flux-handoff pause`): it stopped renewing, but
    /// a later `resume --holder` is expected. Not evidence of a crashed run.
    Paused,
    /// Nothing shows the holder alive.
    Orphaned(Orphan),
}

/// Why a holder looks gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Orphan {
    /// The Lease does not exist.
    NoLease,
    /// The Lease has no holder.
    LeaseFree,
    /// Another holder has the Lease.
    OtherHolder(String),
    /// A deliberate pause that the operator asked to release (`--include-paused`).
    PausedReleased,
    /// The holder has the Lease but stopped renewing it.
    Expired {
        /// When it expired (renewTime + leaseDurationSeconds), when known.
        at: Option<Timestamp>,
        /// The last renewal.
        renewed: Option<Timestamp>,
    },
}

impl fmt::Display for Orphan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoLease => f.write_str("the Lease does not exist"),
            Self::LeaseFree => f.write_str("the Lease has no holder"),
            Self::OtherHolder(h) => write!(f, "the Lease is held by {h}"),
            Self::Expired { at: Some(at), .. } => {
                write!(f, "lease expired at {at}; holder's renew stopped")
            }
            Self::Expired { at: None, .. } => f.write_str("lease expired; holder's renew stopped"),
            Self::PausedReleased => {
                f.write_str("a deliberate pause, released on request (--include-paused)")
            }
        }
    }
}

impl Liveness {
    /// `LIVE` or `ORPHANED-LOOKING`, as the table prints it.
    #[must_use]
    pub fn label(&self) -> &'static str {
        match self {
            Self::Live { .. } => "LIVE",
            Self::Paused => "PAUSED",
            Self::Orphaned(_) => "ORPHANED-LOOKING",
        }
    }

    /// The evidence in words.
    #[must_use]
    pub fn evidence(&self, now: Timestamp) -> String {
        match self {
            Self::Live {
                renewed: Some(r), ..
            } => format!(
                "holder has the Lease, renewed {} ago",
                age(duration_since(now, *r))
            ),
            Self::Live { renewed: None } => "holder has the Lease".into(),
            Self::Paused => {
                "paused on purpose by `flux-handoff pause` (Lease parked, not renewed)".into()
            }
            Self::Orphaned(o) => o.to_string(),
        }
    }
}

/// The Lease as the core needs it: discovery's view plus its recorded duration.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseView {
    /// As discovered.
    pub found: FoundLease,
    /// `leaseDurationSeconds`.
    pub duration: Option<Duration>,
}

impl LeaseView {
    /// When the Lease expires (last renewal + duration), when both are known.
    #[must_use]
    pub fn expires_at(&self) -> Option<Timestamp> {
        let last = self.found.renewed.or(self.found.acquired)?;
        let d = self.duration?;
        last.checked_add(k8s_openapi::jiff::SignedDuration::try_from(d).ok()?)
            .ok()
    }
}

/// Judges `holder` against the Lease as read.
#[must_use]
pub fn liveness(holder: &str, lease: Option<&LeaseView>) -> Liveness {
    let Some(l) = lease else {
        return Liveness::Orphaned(Orphan::NoLease);
    };
    match l.found.holder.as_deref() {
        None => Liveness::Orphaned(Orphan::LeaseFree),
        Some(h) if h != holder => Liveness::Orphaned(Orphan::OtherHolder(h.to_string())),
        Some(_) if l.found.parked => Liveness::Paused,
        Some(_) if l.found.expired => Liveness::Orphaned(Orphan::Expired {
            at: l.expires_at(),
            renewed: l.found.renewed,
        }),
        Some(_) => Liveness::Live {
            renewed: l.found.renewed,
        },
    }
}

/// Whether a fence is a handoff target (it carries `reconcile: disabled`); the others are
/// parents, released after their children.
#[must_use]
pub fn is_target(marks: &[RecordedMark]) -> bool {
    marks.iter().any(|m| {
        m.at == MarkAt::Annotation(RECONCILE_ANNOTATION.into())
            && m.value == json!(RECONCILE_DISABLED)
    })
}

/// `ks/ns/name` or `hr/ns/name`: the form `fences release` takes.
#[must_use]
pub fn short_ref(obj: &ObjectRef) -> String {
    let kind = match obj.resource.kind.as_str() {
        "HelmRelease" => "hr",
        _ => "ks",
    };
    format!("{kind}/{}/{}", obj.namespace, obj.name)
}

/// What can be done with one fence.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// This command releases it, with this CAS patch on the object as observed.
    Release {
        /// The command line.
        command: String,
        /// The JSON Patch it would send (compact JSON).
        patch: String,
    },
    /// No release can be justified now.
    Withheld(Withhold),
}

/// Why a release is withheld.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withhold {
    /// A parent whose children (targets) the same holder still holds.
    ChildrenHeld {
        /// The holder.
        holder: String,
        /// The children, as `fences release` names them.
        children: Vec<String>,
    },
    /// An exact mark moved since the fence.
    MarkMoved(MarkAt),
    /// The owner or prior annotation does not parse.
    Malformed {
        /// The owner annotation as found.
        owner: String,
        /// What is wrong.
        problem: String,
    },
    /// Something this version does not know how to release.
    Unknown,
}

impl fmt::Display for Withhold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ChildrenHeld { holder, children } => write!(
                f,
                "a parent whose child is still held by {holder}: release {} first",
                children.join(", ")
            ),
            Self::MarkMoved(at) => write!(
                f,
                "{at} was changed by another writer since the fence; a release cannot restore it safely (inspect it, then remove the fence annotations by hand)"
            ),
            Self::Malformed { owner, problem } => write!(
                f,
                "owner annotation {owner:?} is malformed ({problem}); inspect it and fix by hand"
            ),
            Self::Unknown => f.write_str("unknown fence state; inspect it by hand"),
        }
    }
}

/// One fence, judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The object.
    pub object: ObjectRef,
    /// The holder (`None` for a malformed owner annotation).
    pub holder: Option<String>,
    /// The epoch of the fence.
    pub epoch: Option<u64>,
    /// How long it has been held.
    pub age: Option<Duration>,
    /// A target (released first) or a parent.
    pub target: bool,
    /// Liveness of its holder (`None` for a malformed owner annotation).
    pub liveness: Option<Liveness>,
    /// The release command, or why it is withheld.
    pub action: Action,
}

/// Judges every fence of `report`. `command_suffix` is appended to each release command (e.g.
/// ` --config flux-handoff.toml` when a custom annotation prefix is configured).
#[must_use]
pub fn assess(report: &FenceReport, lease: Option<&LeaseView>, command_suffix: &str) -> Vec<Row> {
    report
        .fences
        .iter()
        .map(|f| assess_one(f, &report.fences, lease, command_suffix))
        .collect()
}

fn assess_one(
    found: &FoundFence,
    all: &[FoundFence],
    lease: Option<&LeaseView>,
    suffix: &str,
) -> Row {
    match &found.state {
        FoundState::Fence {
            owner,
            age,
            marks,
            release,
            ..
        } => {
            let holder = owner.holder.to_string();
            let target = is_target(marks);
            let action = match release {
                ReleasePlan::Withheld { at } => Action::Withheld(Withhold::MarkMoved(at.clone())),
                ReleasePlan::Patch(patch) => {
                    let children = held_children(&holder, found, all);
                    if !target && !children.is_empty() {
                        Action::Withheld(Withhold::ChildrenHeld {
                            holder: holder.clone(),
                            children,
                        })
                    } else {
                        Action::Release {
                            command: format!(
                                "flux-handoff fences release {} --holder {holder}{suffix}",
                                short_ref(&found.object)
                            ),
                            patch: patch.clone(),
                        }
                    }
                }
                _ => Action::Withheld(Withhold::Unknown),
            };
            Row {
                object: found.object.clone(),
                liveness: Some(liveness(&holder, lease)),
                holder: Some(holder),
                epoch: Some(owner.epoch.0),
                age: Some(*age),
                target,
                action,
            }
        }
        FoundState::Malformed {
            owner_annotation,
            problem,
        } => Row {
            object: found.object.clone(),
            holder: None,
            epoch: None,
            age: None,
            target: false,
            liveness: None,
            action: Action::Withheld(Withhold::Malformed {
                owner: owner_annotation.clone(),
                problem: problem.clone(),
            }),
        },
        _ => Row {
            object: found.object.clone(),
            holder: None,
            epoch: None,
            age: None,
            target: false,
            liveness: None,
            action: Action::Withheld(Withhold::Unknown),
        },
    }
}

/// The targets (children) `holder` still holds, other than `this`: a parent waits for them.
#[must_use]
pub fn held_children(holder: &str, this: &FoundFence, all: &[FoundFence]) -> Vec<String> {
    all.iter()
        .filter(|f| f.object != this.object)
        .filter_map(|f| match &f.state {
            FoundState::Fence { owner, marks, .. }
                if owner.holder.as_str() == holder && is_target(marks) =>
            {
                Some(short_ref(&f.object))
            }
            _ => None,
        })
        .collect()
}

/// What `fences recover` would do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecoverPlan {
    /// Fences to release, in order (targets before parents), with the evidence.
    pub release: Vec<(ObjectRef, String, String)>,
    /// Fences kept, with why.
    pub keep: Vec<(String, String)>,
    /// The Lease holder to clear (expired, with all of its fences released), and the evidence.
    pub lease: Option<(String, String)>,
}

/// Plans `fences recover`: only provably orphaned fences, children before parents; a parent
/// stays while a child of its holder stays; the Lease is cleared only when its holder's renew
/// stopped (expired) and none of its fences stays. A deliberate pause (parked Lease) is kept
/// unless `include_paused`: an unrenewed Lease is not evidence that its run crashed.
#[must_use]
pub fn plan_recover(
    rows: &[Row],
    lease: Option<&LeaseView>,
    now: Timestamp,
    include_paused: bool,
) -> RecoverPlan {
    let mut plan = RecoverPlan::default();
    let mut kept_targets_of: Vec<String> = Vec::new();
    let mut parents = Vec::new();
    for row in rows {
        let name = short_ref(&row.object);
        let (Some(holder), Some(live)) = (&row.holder, &row.liveness) else {
            let why = match &row.action {
                Action::Withheld(w) => w.to_string(),
                Action::Release { .. } => "its holder is unknown".into(),
            };
            plan.keep.push((name, why));
            continue;
        };
        let live = &match live {
            Liveness::Paused if include_paused => Liveness::Orphaned(Orphan::PausedReleased),
            other => other.clone(),
        };
        let keep = match (live, &row.action) {
            (Liveness::Live { .. }, _) => Some(format!("{holder} is live: {}", live.evidence(now))),
            (Liveness::Paused, _) => Some(format!(
                "{holder} {}; resume it with `flux-handoff resume --holder {holder}` (or recover \
                 with --include-paused)",
                live.evidence(now)
            )),
            // A parent withheld for its children waits for them below: they are judged first.
            (
                Liveness::Orphaned(_),
                Action::Release { .. } | Action::Withheld(Withhold::ChildrenHeld { .. }),
            ) => None,
            (Liveness::Orphaned(_), Action::Withheld(w)) => Some(w.to_string()),
        };
        if let Some(why) = keep {
            if row.target {
                kept_targets_of.push(holder.clone());
            }
            plan.keep.push((name, why));
            continue;
        }
        let Liveness::Orphaned(evidence) = live else {
            continue;
        };
        if row.target {
            plan.release
                .push((row.object.clone(), holder.clone(), evidence.to_string()));
        } else {
            parents.push((row, holder.clone(), evidence.to_string()));
        }
    }
    for (row, holder, evidence) in parents {
        if kept_targets_of.contains(&holder) {
            plan.keep.push((
                short_ref(&row.object),
                format!("a parent whose child is still held by {holder}"),
            ));
        } else {
            plan.release.push((row.object.clone(), holder, evidence));
        }
    }
    if let Some(l) = lease
        && let Some(holder) = &l.found.holder
        && l.found.expired
        && (!l.found.parked || include_paused)
    {
        let kept = rows.iter().any(|r| {
            r.holder.as_ref() == Some(holder)
                && !plan.release.iter().any(|(o, _, _)| *o == r.object)
        });
        if kept {
            plan.keep.push((
                format!("lease {}/{}", l.found.namespace, l.found.name),
                format!("{holder} still holds a fence that is kept"),
            ));
        } else {
            plan.lease = Some((holder.clone(), liveness(holder, Some(l)).evidence(now)));
        }
    } else if let Some(l) = lease
        && let Some(holder) = &l.found.holder
    {
        plan.keep.push((
            format!("lease {}/{}", l.found.namespace, l.found.name),
            format!(
                "{holder} is live: {}",
                liveness(holder, Some(l)).evidence(now)
            ),
        ));
    }
    plan
}

/// `1h02m`, `3m05s`, `12s`.
#[must_use]
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `now - then`, zero if `then` lies in the future.
#[must_use]
pub fn duration_since(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or_default()
}

/// One row as JSON (for `--output json`).
#[must_use]
pub fn row_json(row: &Row, now: Timestamp) -> Value {
    let (command, patch, withheld) = match &row.action {
        Action::Release { command, patch } => (
            Some(command.as_str()),
            serde_json::from_str::<Value>(patch).ok(),
            None,
        ),
        Action::Withheld(w) => (None, None, Some(w.to_string())),
    };
    json!({
        "object": short_ref(&row.object),
        "kind": row.object.resource.kind,
        "namespace": row.object.namespace,
        "name": row.object.name,
        "holder": row.holder,
        "epoch": row.epoch,
        "age_seconds": row.age.map(|a| a.as_secs()),
        "role": if row.target { "target" } else { "parent" },
        "liveness": row.liveness.as_ref().map(Liveness::label),
        "evidence": row.liveness.as_ref().map(|l| l.evidence(now)),
        "release_command": command,
        "release_patch": patch,
        "withheld": withheld,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, expired: bool) -> LeaseView {
        LeaseView {
            found: FoundLease {
                namespace: "flux-system".into(),
                name: "flux-handoff".into(),
                holder: holder.map(str::to_string),
                epoch: 3,
                acquired: None,
                renewed: Some(Timestamp::UNIX_EPOCH),
                expired,
                parked: false,
                release_patch: None,
            },
            duration: Some(Duration::from_secs(2)),
        }
    }

    fn row(holder: &str, name: &str, target: bool, live: Liveness, action: Action) -> Row {
        Row {
            object: flux_suspend::object::kustomization("ns", name),
            holder: Some(holder.into()),
            epoch: Some(3),
            age: Some(Duration::from_secs(5)),
            target,
            liveness: Some(live),
            action,
        }
    }

    fn release() -> Action {
        Action::Release {
            command: String::new(),
            patch: "[]".into(),
        }
    }

    #[test]
    fn liveness_is_live_only_for_the_fresh_lease_holder() {
        assert_eq!(liveness("a", None), Liveness::Orphaned(Orphan::NoLease));
        assert_eq!(
            liveness("a", Some(&lease(None, false))),
            Liveness::Orphaned(Orphan::LeaseFree)
        );
        assert_eq!(
            liveness("a", Some(&lease(Some("b"), false))),
            Liveness::Orphaned(Orphan::OtherHolder("b".into()))
        );
        assert!(matches!(
            liveness("a", Some(&lease(Some("a"), false))),
            Liveness::Live { .. }
        ));
        let expired = liveness("a", Some(&lease(Some("a"), true)));
        assert_eq!(
            expired.evidence(Timestamp::UNIX_EPOCH),
            "lease expired at 1970-01-01T00:00:02Z; holder's renew stopped"
        );
    }

    #[test]
    fn recover_releases_orphans_children_first_and_clears_the_expired_lease() {
        let l = lease(Some("a"), true);
        let gone = liveness("a", Some(&l));
        let rows = [
            row(
                "a",
                "parent",
                false,
                gone.clone(),
                Action::Withheld(Withhold::ChildrenHeld {
                    holder: "a".into(),
                    children: vec!["ks/ns/child".into()],
                }),
            ),
            row("a", "child", true, gone, release()),
        ];
        let plan = plan_recover(&rows, Some(&l), Timestamp::UNIX_EPOCH, false);
        let order: Vec<&str> = plan
            .release
            .iter()
            .map(|(o, _, _)| o.name.as_str())
            .collect();
        assert_eq!(order, ["child", "parent"]);
        assert_eq!(plan.lease.as_ref().map(|(h, _)| h.as_str()), Some("a"));
        assert!(plan.keep.is_empty(), "{:?}", plan.keep);
    }

    #[test]
    fn recover_keeps_live_fences_and_a_parent_whose_child_is_kept() {
        let l = lease(Some("a"), false);
        let live = liveness("a", Some(&l));
        let other = liveness("b", Some(&l));
        let rows = [
            row("a", "live", true, live, release()),
            row(
                "b",
                "moved",
                true,
                other.clone(),
                Action::Withheld(Withhold::MarkMoved(MarkAt::Field("/spec/suspend".into()))),
            ),
            row("b", "parent", false, other, release()),
        ];
        let plan = plan_recover(&rows, Some(&l), Timestamp::UNIX_EPOCH, false);
        assert!(plan.release.is_empty(), "{:?}", plan.release);
        assert_eq!(plan.lease, None, "a live Lease is never cleared");
        let kept: Vec<&str> = plan.keep.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            kept,
            [
                "ks/ns/live",
                "ks/ns/moved",
                "ks/ns/parent",
                "lease flux-system/flux-handoff"
            ]
        );
        assert!(plan.keep[0].1.starts_with("a is live"));
    }

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(Duration::from_secs(7)), "7s");
        assert_eq!(age(Duration::from_secs(65)), "1m05s");
        assert_eq!(age(Duration::from_mins(62)), "1h02m");
        assert_eq!(age(Duration::from_hours(25)), "1d01h");
    }

    #[test]
    fn parked_pause_is_paused_not_orphaned_and_recover_keeps_it_unless_asked() {
        let mut l = lease(Some("a"), true);
        l.found.parked = true;
        assert_eq!(liveness("a", Some(&l)), Liveness::Paused);
        assert_eq!(Liveness::Paused.label(), "PAUSED");
        let rows = vec![row("a", "apps", true, Liveness::Paused, release())];
        let plan = plan_recover(&rows, Some(&l), Timestamp::UNIX_EPOCH, false);
        assert!(plan.release.is_empty(), "{plan:?}");
        assert!(plan.lease.is_none(), "the parked Lease is kept too");
        assert!(plan.keep[0].1.contains("resume --holder a"), "{plan:?}");
        let plan = plan_recover(&rows, Some(&l), Timestamp::UNIX_EPOCH, true);
        assert_eq!(plan.release.len(), 1);
        assert!(
            plan.lease.is_some(),
            "with --include-paused the Lease is cleared too"
        );
    }
}
