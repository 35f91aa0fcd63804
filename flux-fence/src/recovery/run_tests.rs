//! Table tests of the pure decisions of the recovery's I/O layer.

use super::*;
use crate::OwnerValue;
use crate::engine::same_fence;

#[test]
fn release_engine_a_look_is_stable_only_at_the_same_lease_version() {
    type Read = Option<Option<String>>;
    let v = |s: &str| Some(Some(s.to_string()));
    let table: [(Read, Read, bool); 6] = [
        (None, None, true),
        (v("7"), v("7"), true),
        (v("7"), v("8"), false),
        (v("7"), None, false),
        (None, v("8"), false),
        (Some(None), Some(None), false),
    ];
    for (then, now, want) in table {
        assert_eq!(
            decide_stable(then.as_ref(), now.as_ref()),
            want,
            "{then:?} then, {now:?} now"
        );
    }
}

#[test]
fn release_engine_only_the_fence_judged_is_released() {
    let owner = |s: &str| s.parse::<OwnerValue>().unwrap();
    let table = [
        ("h;3", "h", Some(3), true),
        ("h;4", "h", Some(3), false),
        ("x;3", "h", Some(3), false),
        ("h;9", "h", None, true),
    ];
    for (found, holder, epoch, want) in table {
        assert_eq!(
            same_fence(&owner(found), holder, epoch),
            want,
            "{found} against {holder};{epoch:?}"
        );
    }
}

#[test]
fn queue_heal_a_fence_another_party_took_off_its_gone_holder_is_no_problem() {
    let o = || crate::guard::test_kustomization("ns", "app");
    let gone = Some("gh1.1-aaaaaa");
    // (what the engine settled, the member's gone holder, off that holder all the same)
    let table: Vec<(Settled, Option<&str>, bool)> = vec![
        (Settled::Gone { object: o() }, gone, true),
        // A second waiter recovering the same finished run released it first.
        (
            Settled::NotOurs {
                object: o(),
                found: None,
            },
            gone,
            true,
        ),
        // The run that took the Lease after it fenced it anew.
        (
            Settled::NotOurs {
                object: o(),
                found: Some("gh2.1-bbbbbb;4".into()),
            },
            gone,
            true,
        ),
        // The gone holder's fence at another epoch: still its, still a problem.
        (
            Settled::NotOurs {
                object: o(),
                found: Some("gh1.1-aaaaaa;9".into()),
            },
            gone,
            false,
        ),
        // A value that is no owner, or no holder known: not judged off.
        (
            Settled::NotOurs {
                object: o(),
                found: Some("garbage".into()),
            },
            gone,
            false,
        ),
        (
            Settled::NotOurs {
                object: o(),
                found: Some("gh2.1-bbbbbb;4".into()),
            },
            None,
            false,
        ),
    ];
    for (i, (s, holder, want)) in table.into_iter().enumerate() {
        assert_eq!(moved_on(&s, holder), want, "row {i}");
    }
}
