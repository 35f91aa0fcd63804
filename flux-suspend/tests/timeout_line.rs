//! Tier 1: the timeout line carries fixed names and counts only.

use flux_suspend::judge::{Judge, Member, Read, Role, Seen};
use proptest::prelude::*;

fn line_is_fixed_format(line: &str) -> bool {
    let names = [
        "observations",
        "unreadable",
        "child_not_owned",
        "parent_not_owned",
        "parent_changed",
        "version_changes",
    ];
    let parts: Vec<&str> = line.split(' ').collect();
    parts.len() == names.len()
        && parts.iter().zip(names).all(|(part, name)| {
            part.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('='))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

#[test]
fn timeout_line_of_a_fresh_judge_is_all_zero() {
    let j = Judge::new(vec![]);
    assert_eq!(
        j.counters().to_string(),
        "observations=0 unreadable=0 child_not_owned=0 parent_not_owned=0 parent_changed=0 version_changes=0"
    );
}

fn arb_seen() -> impl Strategy<Value = Read> {
    // Every string the cluster could hand us is tagged with a marker that must never surface.
    let s = "QX[A-Za-z0-9 ;:/=_-]{0,24}";
    (
        s,
        s,
        proptest::option::of(s),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(uid, rv, owner, suspended, rd, unreadable)| {
            if unreadable {
                Read::Unreadable
            } else {
                Read::Seen(
                    Seen::new(uid, rv)
                        .with_owner(owner)
                        .with_suspended(suspended)
                        .with_reconcile_disabled(rd),
                )
            }
        })
}

proptest! {
    #[test]
    fn timeout_line_never_carries_input_strings(
        owner in "QX[A-Za-z0-9;.-]{0,20}",
        passes in proptest::collection::vec(proptest::collection::vec(arb_seen(), 0..4), 0..40),
    ) {
        let members = vec![
            Member::new(Role::Parent, "QXp", owner.clone(), false),
            Member::new(Role::Target, "QXc", owner, true),
        ];
        let mut j = Judge::new(members);
        for p in &passes {
            j.observe(p);
        }
        let line = j.counters().to_string();
        prop_assert!(line_is_fixed_format(&line), "{}", line);
        prop_assert!(!line.contains("QX"), "{}", line);
        prop_assert_eq!(j.counters().get(flux_suspend::report::Counter::Observations), passes.len() as u64);
    }
}
