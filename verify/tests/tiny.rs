//! The checker on the smallest bound: two runs and the controller. Every property holds and
//! the reachability property is met; the mutants are left to `cargo xtask verify`.

#[test]
fn tiny_bound_has_no_violation_and_reaches_the_work_phase() {
    let out = verify::check(verify::Bounds::tiny(), None, 2);
    assert!(out.states > 1_000, "explored only {} states", out.states);
    assert!(out.violations.is_empty(), "{:#?}", out.violations);
}

/// Only a `parked` annotation naming the current holder marks a parked pause (production's
/// reading in `discover` and `recovery::decide_adopt`); a release removes the annotation
/// (property `parked_mark_only_while_its_holder_holds`), so a stale one is not reachable.
#[test]
fn a_parked_annotation_counts_only_for_the_current_holder() {
    use verify::world::{LeaseObj, sym};
    let lease = |holder: Option<&str>, parked: Option<&str>| LeaseObj {
        rv: 1,
        holder: holder.map(sym),
        transitions: 1,
        renewed: 0,
        parked: parked.map(sym),
    };
    let cases = [
        (Some("run0-verify"), Some("run0-verify"), true),
        (Some("run1-verify"), Some("run0-verify"), false),
        (None, Some("run0-verify"), false),
        (Some("run0-verify"), None, false),
    ];
    for (holder, parked, want) in cases {
        assert_eq!(
            lease(holder, parked).is_parked(),
            want,
            "{holder:?} {parked:?}"
        );
    }
}

/// The full bound holds every actor of the issue at once, with a fault budget.
#[test]
fn full_bound_has_every_actor() {
    let b = verify::Bounds::full();
    assert!(b.runs >= 2 && b.faults >= 1);
    assert!(b.crashes > 0 && b.lost > 0 && b.restarts > 0 && b.person > 0 && b.ticks > 0);
    assert!(b.resume && b.recover && b.park);
}

#[test]
fn resume_adopting_a_live_holder_is_caught_on_a_small_bound() {
    let bounds = verify::Bounds {
        resume: true,
        ..verify::Bounds::tiny()
    };
    let out = verify::check(bounds, Some(verify::Mutant::ResumeAdoptsLiveHolder), 2);
    assert!(
        out.violations
            .iter()
            .any(|(p, _)| *p == "no_release_of_a_live_holders_fence"),
        "{:?}",
        out.violations.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
}

/// Property 5 excuses a person's `spec.suspend=false` only after the writer's last re-read of
/// the chain: a writer that skips the re-read is caught.
#[test]
fn a_secret_write_without_its_recheck_is_caught_on_a_small_bound() {
    let m = verify::Mutant::SecretWriteWithoutRecheck;
    let out = verify::check(m.bounds(verify::Bounds::tiny()), Some(m), 2);
    assert!(
        out.violations
            .iter()
            .any(|(p, _)| *p == "secret_written_only_under_own_proven_pause"),
        "{:?}",
        out.violations.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
}

/// Issue 25: the holder's deadline comes before recovery's takeover. A stalled holder that
/// keeps its command running until a request returns (no self-fence) is caught; with the
/// self-fence the same bound has no violation.
#[test]
fn lease_deadline_a_holder_without_its_self_fence_is_caught_on_a_small_bound() {
    let m = verify::Mutant::HolderWaitsForRequests;
    let bounds = m.bounds(verify::Bounds::tiny());
    let out = verify::check(bounds, Some(m), 2);
    assert!(
        out.violations
            .iter()
            .any(|(p, _)| *p == "command_ends_before_takeover"),
        "{:?}",
        out.violations.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    let out = verify::check(bounds, None, 2);
    assert!(out.violations.is_empty(), "{:#?}", out.violations);
}
