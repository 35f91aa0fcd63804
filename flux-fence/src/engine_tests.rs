use super::*;
use crate::{Epoch, Holder};

fn ks(name: &str) -> ObjectRef {
    crate::guard::test_kustomization("flux-system", name)
}

fn member(name: &str, holder: &str, child: bool) -> Member {
    Member::judged(ks(name), holder.to_string(), Some(1), child)
}

#[test]
fn release_engine_children_go_first_each_group_in_the_order_given() {
    let given = vec![
        member("root", "a", false),
        member("apps", "a", true),
        member("infra", "a", false),
        member("db", "b", true),
    ];
    let names: Vec<String> = release_order(given)
        .iter()
        .map(|m| m.source.object().name.clone())
        .collect();
    assert_eq!(names, ["apps", "db", "root", "infra"]);
}

/// What, child, holder, stopped, the holders that kept a member, the decision.
type Case = (&'static str, bool, &'static str, bool, Vec<String>, Next);

#[test]
fn release_engine_decides_each_member_from_what_came_before() {
    let kept = |hs: &[&str]| hs.iter().map(|h| (*h).to_string()).collect::<Vec<_>>();
    let cases: &[Case] = &[
        ("first member", true, "a", false, kept(&[]), Next::Release),
        (
            "parent, nothing kept",
            false,
            "a",
            false,
            kept(&[]),
            Next::Release,
        ),
        (
            "parent of a holder that kept a member",
            false,
            "a",
            false,
            kept(&["a"]),
            Next::Skip(Skip::ChildKept { holder: "a".into() }),
        ),
        (
            "parent of another holder",
            false,
            "b",
            false,
            kept(&["a"]),
            Next::Release,
        ),
        (
            "a child is tried even when its holder kept one",
            true,
            "a",
            false,
            kept(&["a"]),
            Next::Release,
        ),
        (
            "stopped: a child",
            true,
            "b",
            true,
            kept(&[]),
            Next::Skip(Skip::Stopped),
        ),
        (
            "stopped: a parent",
            false,
            "b",
            true,
            kept(&["a"]),
            Next::Skip(Skip::Stopped),
        ),
    ];
    for (what, child, holder, stopped, kept_of, want) in cases {
        assert_eq!(
            &decide_next(*child, holder, *stopped, kept_of),
            want,
            "{what}"
        );
    }
}

#[test]
fn release_engine_adopts_only_the_fence_it_judged() {
    let v = |h: &str, e: u64| OwnerValue::new(h.parse::<Holder>().unwrap(), Epoch(e));
    let cases = [
        ("same holder and epoch", v("a", 1), "a", Some(1), true),
        (
            "a later fence of a holder with the same name",
            v("a", 2),
            "a",
            Some(1),
            false,
        ),
        ("any epoch when none was judged", v("a", 7), "a", None, true),
        ("another holder", v("b", 1), "a", Some(1), false),
    ];
    for (what, found, holder, epoch, want) in cases {
        assert_eq!(same_fence(&found, holder, epoch), want, "{what}");
    }
}

#[test]
fn release_engine_rules_never_extend_the_default_budget() {
    let soon = Instant::now() + Duration::from_secs(1);
    let later = Instant::now() + CONTENTION_BUDGET * 10;
    assert!(Rules::one_holder().until(soon).deadline <= soon);
    assert!(Rules::many_holders().until(later).deadline < later);
    assert!(Rules::one_holder().stop_at_first);
    assert!(!Rules::many_holders().stop_at_first);
}
