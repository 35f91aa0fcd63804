//! The checker on the smallest bound: two runs and the controller. Every property holds and
//! the reachability property is met; the mutants are left to `cargo xtask verify`.

#[test]
fn tiny_bound_has_no_violation_and_reaches_the_work_phase() {
    let out = verify::check(verify::Bounds::tiny(), None, 2);
    assert!(out.states > 10_000, "explored only {} states", out.states);
    assert!(out.violations.is_empty(), "{:#?}", out.violations);
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
