//! Table tests of the recover plan.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::ObjectRef;
use crate::discover::FoundLease;
use crate::mark::MarkAt;
use crate::recovery::assess::{Action, LeaseView, Liveness, Orphan, Row, Withhold};

fn ks(name: &str) -> ObjectRef {
    crate::guard::test_kustomization("ns", name)
}

fn lease(holder: Option<&str>, parked: bool, expired: bool) -> LeaseView {
    LeaseView {
        found: FoundLease {
            namespace: "flux-system".into(),
            name: "flux-handoff".into(),
            holder: holder.map(str::to_string),
            epoch: 3,
            acquired: None,
            renewed: Some(Timestamp::UNIX_EPOCH),
            expired,
            parked,
            release_patch: None,
        },
        duration: Some(Duration::from_secs(2)),
        resource_version: Some("40".into()),
        max_hold: None,
    }
}

fn row(holder: &str, name: &str, child: bool, action: Action) -> Row {
    Row {
        object: ks(name),
        holder: Some(holder.into()),
        epoch: Some(3),
        age: Some(Duration::from_secs(5)),
        child,
        liveness: None,
        action,
    }
}

fn release() -> Action {
    Action::Release { patch: "[]".into() }
}

fn unchanged(holder: &str, rv: &str) -> HolderEvidence {
    HolderEvidence::Unchanged {
        holder: holder.into(),
        resource_version: rv.into(),
        watched: Duration::from_secs(2),
    }
}

fn names(plan: &RecoverPlan) -> Vec<&str> {
    plan.release
        .iter()
        .map(|p| p.object.name.as_str())
        .collect()
}

fn parent_and_child(holder: &str) -> Vec<Row> {
    vec![
        row(
            holder,
            "parent",
            false,
            Action::Withheld(Withhold::ChildrenHeld {
                holder: holder.into(),
                children: vec![ks("child")],
            }),
        ),
        row(holder, "child", true, release()),
    ]
}

#[test]
fn listing_liveness_is_a_wall_clock_hint_only() {
    use crate::recovery::assess::liveness;
    assert_eq!(liveness("a", None), Liveness::Orphaned(Orphan::NoLease));
    assert_eq!(
        liveness("a", Some(&lease(None, false, false))),
        Liveness::Orphaned(Orphan::LeaseFree)
    );
    assert_eq!(
        liveness("a", Some(&lease(Some("b"), false, false))),
        Liveness::Orphaned(Orphan::OtherHolder("b".into()))
    );
    assert!(matches!(
        liveness("a", Some(&lease(Some("a"), false, false))),
        Liveness::Live { .. }
    ));
    assert_eq!(
        liveness("a", Some(&lease(Some("a"), true, true))),
        Liveness::Paused
    );
    let Liveness::Orphaned(o) = liveness("a", Some(&lease(Some("a"), false, true))) else {
        panic!("expected orphaned")
    };
    assert_eq!(
        o.to_string(),
        "lease expired at 1970-01-01T00:00:02Z; holder's renew stopped"
    );
}

type Case = (&'static str, LeaseView, HolderEvidence, PlanOptions, bool);

/// The whole table: (lease, evidence, options) → whether the holder is gone (its fences
/// released, children first, and the Lease taken over at the version read).
fn cases() -> Vec<Case> {
    let opts = PlanOptions::default();
    let paused = PlanOptions::default().include_paused(true);
    let changed = HolderEvidence::Changed {
        holder: "a".into(),
        after: Duration::from_secs(1),
    };
    let reported = HolderEvidence::Reported {
        holder: "a".into(),
        resource_version: "40".into(),
        evidence: "run 9 attempt 1 completed".into(),
    };
    vec![
        // A wall clock saying "expired" proves nothing.
        (
            "expired, unwatched",
            lease(Some("a"), false, true),
            HolderEvidence::None,
            opts.clone(),
            false,
        ),
        (
            "watched, renewed",
            lease(Some("a"), false, true),
            changed.clone(),
            opts.clone(),
            false,
        ),
        (
            "watched, unchanged",
            lease(Some("a"), false, false),
            unchanged("a", "40"),
            opts.clone(),
            true,
        ),
        (
            "unchanged, but moved since",
            lease(Some("a"), false, false),
            unchanged("a", "39"),
            opts.clone(),
            false,
        ),
        (
            "evidence about another",
            lease(Some("a"), false, false),
            unchanged("b", "40"),
            opts.clone(),
            false,
        ),
        (
            "reported gone",
            lease(Some("a"), false, false),
            reported,
            opts.clone(),
            true,
        ),
        (
            "parked, not opted in",
            lease(Some("a"), true, true),
            unchanged("a", "40"),
            opts.clone(),
            false,
        ),
        (
            "parked, opted in, unwatched",
            lease(Some("a"), true, true),
            HolderEvidence::None,
            paused.clone(),
            false,
        ),
        (
            "parked, opted in, renewed",
            lease(Some("a"), true, true),
            changed,
            paused.clone(),
            false,
        ),
        (
            "parked, opted in, unchanged",
            lease(Some("a"), true, false),
            unchanged("a", "40"),
            paused.clone(),
            true,
        ),
    ]
}

#[test]
fn the_lease_holder_is_gone_only_on_evidence_at_the_version_read() {
    for (what, l, evidence, o, gone) in cases() {
        let plan = plan_recover(&parent_and_child("a"), Some(&l), &evidence, &o);
        if gone {
            assert_eq!(names(&plan), ["child", "parent"], "{what}: {plan:?}");
            let take = plan.take_lease.as_ref().expect(what);
            assert_eq!(
                (take.holder.as_str(), take.resource_version.as_str()),
                ("a", "40"),
                "{what}"
            );
            assert!(plan.keep.is_empty(), "{what}: {plan:?}");
        } else {
            assert!(plan.is_empty(), "{what}: {plan:?}");
            assert_eq!(
                plan.keep.len(),
                3,
                "{what}: both fences and the Lease kept: {plan:?}"
            );
        }
    }
}

#[test]
fn fences_of_a_holder_without_the_lease_need_no_watch_and_no_takeover() {
    let opts = PlanOptions::default();
    for (l, why) in [
        (None, Orphan::NoLease),
        (Some(lease(None, false, false)), Orphan::LeaseFree),
        (
            Some(lease(Some("b"), false, false)),
            Orphan::OtherHolder("b".into()),
        ),
    ] {
        assert_eq!(
            needs_watch(l.as_ref(), &opts).map(|(h, _)| h),
            l.as_ref().and_then(|l| l.found.holder.clone())
        );
        let plan = plan_recover(
            &parent_and_child("a"),
            l.as_ref(),
            &HolderEvidence::None,
            &opts,
        );
        assert_eq!(names(&plan), ["child", "parent"]);
        assert_eq!(plan.release[0].why, why);
        assert!(plan.take_lease.is_none(), "{plan:?}");
    }
    assert_eq!(
        needs_watch(Some(&lease(Some("a"), true, true)), &opts),
        None,
        "a parked pause left out needs no evidence"
    );
}

#[test]
fn a_parent_stays_while_a_child_of_its_holder_stays_and_moved_marks_are_kept() {
    let l = lease(None, false, false);
    let rows = [
        row(
            "b",
            "moved",
            true,
            Action::Withheld(Withhold::MarkMoved(MarkAt::Field("/spec/suspend".into()))),
        ),
        row("b", "parent", false, release()),
        row("c", "other", true, release()),
    ];
    let plan = plan_recover(
        &rows,
        Some(&l),
        &HolderEvidence::None,
        &PlanOptions::default(),
    );
    assert_eq!(names(&plan), ["other"]);
    assert_eq!(
        plan.keep,
        [
            (
                Subject::Fence(ks("moved")),
                KeepReason::Withheld(Withhold::MarkMoved(MarkAt::Field("/spec/suspend".into())))
            ),
            (
                Subject::Fence(ks("parent")),
                KeepReason::ChildKept { holder: "b".into() }
            ),
        ]
    );
}

#[test]
fn a_kept_live_holder_says_why_and_its_lease_is_kept_too() {
    let l = lease(Some("a"), false, false);
    let evidence = HolderEvidence::Changed {
        holder: "a".into(),
        after: Duration::from_secs(4),
    };
    let plan = plan_recover(
        &[row("a", "live", true, release())],
        Some(&l),
        &evidence,
        &PlanOptions::default(),
    );
    let live = KeepReason::Live {
        holder: "a".into(),
        liveness: Liveness::Live {
            renewed: Some(Timestamp::UNIX_EPOCH),
            renewed_while_watched: Some(Duration::from_secs(4)),
        },
    };
    assert_eq!(
        plan.keep,
        [
            (Subject::Fence(ks("live")), live.clone()),
            (Subject::Lease, live)
        ]
    );
    let parked = lease(Some("a"), true, true);
    let plan = plan_recover(
        &[row("a", "apps", true, release())],
        Some(&parked),
        &HolderEvidence::None,
        &PlanOptions::default(),
    );
    assert_eq!(plan.keep[0].1, KeepReason::Paused { holder: "a".into() });
}

fn found(
    name: &str,
    holder: &str,
    child: bool,
    lease: Option<&str>,
) -> crate::discover::FoundFence {
    use crate::discover::{FoundFence, FoundState, ReleasePlan};
    let marks = if child {
        vec![crate::mark::RecordedMark {
            at: MarkAt::Annotation("r".into()),
            value: serde_json::json!("disabled"),
            prior: None,
            restore: crate::mark::Restore::Exact,
        }]
    } else {
        Vec::new()
    };
    FoundFence {
        object: ks(name),
        state: FoundState::Fence {
            owner: format!("{holder};3").parse().unwrap(),
            since: Timestamp::UNIX_EPOCH,
            age: Duration::from_secs(5),
            marks,
            release: ReleasePlan::Patch("[]".into()),
            lease: lease.map(str::to_string),
            max_hold: None,
            reason: None,
        },
    }
}

#[test]
fn chain_record_a_fence_of_another_lease_is_judged_only_by_it() {
    use crate::recovery::ChildMark;
    use crate::recovery::assess::assess;
    let other = Some("flux-system/other");
    let ours = Some("flux-system/flux-handoff");
    let report = crate::discover::FenceReport {
        lease: None,
        fences: vec![
            found("p", "h", false, other),
            found("c", "h", true, other),
            found("mine", "g", true, ours),
            found("old", "g", false, None),
        ],
    };
    let child = ChildMark::annotation("r", "disabled");
    let rows = assess(&report, "flux-system/flux-handoff", None, &child);
    assert_eq!(
        rows[0].liveness,
        Some(Liveness::OtherLease("flux-system/other".into()))
    );
    // No Lease of ours at all: before, every fence here counted as orphaned.
    let plan = plan_recover(&rows, None, &HolderEvidence::None, &PlanOptions::default());
    assert_eq!(names(&plan), vec!["mine", "old"], "children first");
    for name in ["p", "c"] {
        assert!(
            plan.keep.iter().any(|(s, why)| *s == Subject::Fence(ks(name))
                && matches!(why, KeepReason::Withheld(Withhold::OtherLease(l)) if l == "flux-system/other")),
            "{name}: {:?}",
            plan.keep
        );
    }
}

#[test]
fn chain_record_settles_only_once_every_recorded_fence_of_its_holder_is_released() {
    let report = crate::discover::FenceReport {
        lease: None,
        fences: vec![
            found("p", "h", false, None),
            found("c", "h", true, None),
            found("theirs", "x", true, None),
        ],
    };
    let record = crate::lease::ChainRecord {
        owner: "h;3".into(),
        members: ["p", "c", "gone", "theirs"]
            .map(|n| crate::lease::RecordedMember::of(&ks(n)))
            .to_vec(),
    };
    let hold = recorded_hold(&record, &report, &[]);
    assert_eq!(hold.fenced, vec![ks("p"), ks("c")]);
    assert_eq!(hold.unsettled(&[ks("c")]), Some("ks/ns/p".into()));
    assert_eq!(hold.unsettled(&[ks("c"), ks("p")]), None);
    let unknown = [crate::lease::RecordedMember {
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: "ns".into(),
        name: "s".into(),
    }];
    let hold = recorded_hold(&record, &report, &unknown);
    assert_eq!(
        hold.unsettled(&[ks("c"), ks("p")]),
        Some("Secret ns/s".into()),
        "a member of a kind never read may still be fenced"
    );
}

#[test]
fn replicas_gate_a_recorded_member_of_an_unknown_kind_keeps_its_holders_parents() {
    let planned = |name: &str, holder: &str, child: bool| PlannedRelease {
        object: ks(name),
        holder: holder.into(),
        epoch: Some(1),
        child,
        why: Orphan::NoLease,
    };
    let plan = || RecoverPlan {
        release: vec![
            planned("child", "h1", true),
            planned("parent", "h1", false),
            planned("other-parent", "h2", false),
        ],
        ..RecoverPlan::default()
    };
    let record = |unknown: Vec<String>| RecordHold {
        owner: "h1;1".into(),
        fenced: vec![ks("child"), ks("parent")],
        unknown,
    };
    let names = |p: &RecoverPlan| -> Vec<String> {
        p.release.iter().map(|r| r.object.name.clone()).collect()
    };
    // Every member known: the plan as it was.
    let known = plan().with_record(Some(record(vec![])));
    assert_eq!(names(&known), ["child", "parent", "other-parent"]);
    assert!(known.keep.is_empty());
    // A member of a kind this reader cannot read may be a child still fenced: the holder's
    // parent is kept; its child and another holder's parent go as planned.
    let unknown = plan().with_record(Some(record(vec!["Widget ns/w".into()])));
    assert_eq!(names(&unknown), ["child", "other-parent"]);
    assert_eq!(
        unknown.keep,
        vec![(
            Subject::Fence(ks("parent")),
            KeepReason::ChildKept {
                holder: "h1".into()
            }
        )]
    );
    assert!(unknown.record.is_some());
    // No record: nothing changes.
    assert_eq!(
        names(&plan().with_record(None)),
        ["child", "parent", "other-parent"]
    );
}
