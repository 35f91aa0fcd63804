use std::time::Duration;

use kube::api::{ApiResource, GroupVersionKind};

use super::*;
use crate::command::test_spell;
use crate::lease::GoneHolder;
use crate::recovery::Orphan;

fn obj(kind: &str, name: &str) -> ObjectRef {
    let gvk = GroupVersionKind::gvk("example.io", "v1", kind);
    let plural = format!("{}s", kind.to_lowercase());
    ObjectRef::new(ApiResource::from_gvk_with_plural(&gvk, &plural), "ns", name)
}

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

#[test]
fn ages_read_at_a_glance() {
    let table = [
        (7, "7s"),
        (65, "1m05s"),
        (62 * 60, "1h02m"),
        (25 * 3600, "1d01h"),
    ];
    for (secs, want) in table {
        assert_eq!(age(Duration::from_secs(secs)), want);
    }
}

#[test]
fn short_refs_abbreviate_the_flux_kinds() {
    let table = [
        ("Kustomization", "ks/ns/a"),
        ("HelmRelease", "hr/ns/a"),
        ("ConfigMap", "configmap/ns/a"),
    ];
    for (kind, want) in table {
        assert_eq!(short_ref(&obj(kind, "a")), want);
    }
}

#[test]
fn a_parent_names_the_children_to_release_first() {
    let w = Withhold::ChildrenHeld {
        holder: "h".into(),
        children: vec![obj("Kustomization", "child"), obj("HelmRelease", "app")],
    };
    assert_eq!(
        w.to_string(),
        "a parent whose child is still held by h: release ks/ns/child, hr/ns/app first"
    );
}

#[test]
fn liveness_evidence_reads_as_words() {
    let renewed = "2026-01-01T00:07:55Z".parse().unwrap();
    let table = [
        (
            Liveness::Live {
                renewed: Some(renewed),
                renewed_while_watched: None,
            },
            "holder has the Lease, renewed 2m05s ago",
        ),
        (
            Liveness::Live {
                renewed: Some(renewed),
                renewed_while_watched: Some(Duration::from_secs(3)),
            },
            "holder has the Lease, renewed while watched (3s into the watch)",
        ),
        (
            Liveness::Live {
                renewed: None,
                renewed_while_watched: None,
            },
            "holder has the Lease",
        ),
        (
            Liveness::Orphaned(Orphan::NoLease),
            "the Lease does not exist",
        ),
    ];
    for (l, want) in table {
        assert_eq!(l.describe(now(), &test_spell), want);
    }
}

#[test]
fn keep_reasons_say_why_and_what_to_do() {
    let table = [
        (
            KeepReason::Paused { holder: "h".into() },
            "h paused on purpose by `app pause` (Lease parked, not renewed); only `app resume \
             --holder h` ends it",
        ),
        (
            KeepReason::ChildKept { holder: "h".into() },
            "a parent whose child is still held by h",
        ),
        (
            KeepReason::NotProved {
                holder: "h".into(),
                why: "run in progress".into(),
            },
            "h not proved gone: run in progress",
        ),
        (KeepReason::UnknownHolder, "its holder is unknown"),
    ];
    for (k, want) in table {
        assert_eq!(k.describe(now(), &test_spell), want);
    }
}

#[test]
fn a_plan_lists_releases_the_lease_and_what_is_kept() {
    let plan = RecoverPlan {
        take_lease: Some(GoneHolder {
            holder: "h".into(),
            resource_version: "7".into(),
            evidence: "unchanged".into(),
        }),
        release: vec![PlannedRelease {
            object: obj("Kustomization", "a"),
            holder: "h".into(),
            epoch: Some(3),
            child: true,
            why: Orphan::LeaseFree,
        }],
        keep: vec![(Subject::Lease, KeepReason::UnknownHolder)],
        record: None,
    };
    assert_eq!(
        plan.lines("fs/l", now(), false, &test_spell),
        [
            "would release: ks/ns/a (holder h: the Lease has no holder)",
            "would clear: lease fs/l (holder h: unchanged)",
            "keep: lease fs/l: its holder is unknown",
        ]
    );
    let facts = plan.facts("fs/l", now(), true, &test_spell);
    assert_eq!(facts[0], ("dry_run", json!(false)));
    assert_eq!(facts[2].1[0]["object"], "lease fs/l");
}

#[test]
fn a_report_names_each_problem_on_one_line() {
    let mut report = RecoverReport::default();
    assert_eq!(report.problems_line("fs/l"), None);
    report.released = vec![obj("Kustomization", "a")];
    report.lease_released = true;
    assert_eq!(
        report.lines("fs/l"),
        ["released: ks/ns/a", "lease cleared: fs/l"]
    );
    report.problems = vec![
        (Subject::Fence(obj("HelmRelease", "a")), "kept".into()),
        (Subject::Lease, "not released".into()),
    ];
    assert_eq!(
        report.problems_line("fs/l").as_deref(),
        Some("hr/ns/a: kept; lease fs/l: not released")
    );
}
