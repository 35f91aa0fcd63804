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
