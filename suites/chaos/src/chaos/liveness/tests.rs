use super::*;

const D: u64 = 4_000;

fn v(rv: u64, at_ms: u64, holder: Option<&str>, renew: &str) -> LeaseSeen {
    LeaseSeen {
        rv,
        at_ms,
        holder: holder.map(str::to_string),
        renew: holder.map(|_| renew.to_string()),
        parked: false,
        duration_ms: D,
    }
}

/// A holder `a` that acquired at 0 and renewed every second until `until_ms`.
fn renewing(a: &str, until_ms: u64) -> Vec<LeaseSeen> {
    (0..=until_ms / 1_000)
        .map(|i| v(10 + i, i * 1_000, Some(a), &format!("r{i}")))
        .collect()
}

fn waiter(left_ms: u64) -> Job {
    Job {
        holder: "B".into(),
        started_ms: 0,
        left_ms,
        budget_ms: 30_000,
        end: End::Left,
        faulted: false,
        recovers: false,
    }
}

fn with(left_ms: u64, change: impl FnOnce(&mut Job)) -> Job {
    let mut j = waiter(left_ms);
    change(&mut j);
    j
}

#[test]
fn liveness_the_lease_at_a_moment_follows_renewals_in_server_order() {
    let mut h = renewing("A", 5_000);
    // Received out of order: sorted by resourceVersion.
    h.reverse();
    assert!(matches!(
        lease_at(&h, 5_500),
        LeaseAt::Held { ref holder, silent_ms: 500, duration_ms: D } if holder == "A"
    ));
    // A version that changes nothing of the renewal (a person's edit) is no renewal.
    let mut edited = renewing("A", 2_000);
    edited.push(v(99, 9_000, Some("A"), "r2"));
    assert!(matches!(
        lease_at(&edited, 9_000),
        LeaseAt::Held {
            silent_ms: 7_000,
            ..
        }
    ));
    assert_eq!(lease_at(&[], 1), LeaseAt::Free);
    let mut released = renewing("A", 2_000);
    released.push(v(50, 2_500, None, ""));
    assert_eq!(lease_at(&released, 3_000), LeaseAt::Free);
    // Before its first version was received, nothing held it.
    assert_eq!(lease_at(&renewing("A", 2_000)[1..], 500), LeaseAt::Free);
    let mut parked = v(7, 100, Some("P"), "r");
    parked.parked = true;
    assert_eq!(lease_at(&[parked], 200), LeaseAt::Parked("P".into()));
}

#[test]
fn liveness_warranted_departures_table() {
    let live = renewing("A", 40_000);
    let silent = renewing("A", 3_000);
    let mut parked = vec![v(5, 0, Some("P"), "r")];
    parked[0].parked = true;
    let mut took_and_faulted = renewing("A", 2_000);
    took_and_faulted.push(v(60, 2_500, Some("B"), "b0"));
    let cases: Vec<(&str, Job, &[LeaseSeen], bool, Warranted)> = vec![
        (
            "cancel",
            with(500, |j| j.end = End::Cancelled),
            &live,
            false,
            Warranted::Cancelled,
        ),
        (
            "killed",
            with(500, |j| j.end = End::Killed),
            &live,
            false,
            Warranted::Killed,
        ),
        (
            "script failed",
            with(5_000, |j| j.end = End::ScriptFailed),
            &live,
            false,
            Warranted::ScriptFailed,
        ),
        (
            "a person broke its pause",
            waiter(5_000),
            &live,
            true,
            Warranted::PauseBroken,
        ),
        (
            "held the Lease, then a fault",
            with(3_000, |j| j.faulted = true),
            &took_and_faulted,
            false,
            Warranted::FaultWhileHolding,
        ),
        (
            "a parked pause, at once",
            waiter(200),
            &parked,
            false,
            Warranted::Parked,
        ),
        (
            "the whole budget behind a live holder",
            waiter(30_100),
            &live,
            false,
            Warranted::LiveHolder,
        ),
        (
            "the whole budget behind a silent holder it could not prove finished",
            waiter(30_100),
            &silent,
            false,
            Warranted::SilentUnprovable,
        ),
    ];
    for (what, j, lease, broken, want) in cases {
        assert_eq!(classify(&j, lease, broken), Ok(want), "{what}");
    }
}

#[test]
fn liveness_unwarranted_departures_table() {
    let live = renewing("A", 40_000);
    let silent = renewing("A", 3_000);
    let mut freed = renewing("A", 3_000);
    freed.push(v(90, 3_200, None, ""));
    let mut own_parked = vec![v(5, 0, Some("B"), "r")];
    own_parked[0].parked = true;
    let cases: Vec<(&str, Job, &[LeaseSeen], &str)> = vec![
        (
            "a broken connection ejected it behind a live holder",
            waiter(3_400),
            &live,
            "left after 3.4s of its 30.0s budget while the Lease was held by A (live",
        ),
        (
            "a fault while it only waited",
            with(3_400, |j| j.faulted = true),
            &live,
            "held by A (live",
        ),
        (
            "it left while the Lease was free",
            waiter(30_100),
            &freed,
            "while the Lease was free",
        ),
        (
            "behind a silent holder it could have recovered",
            with(30_100, |j| j.recovers = true),
            &silent,
            "held by A (silent for 27.1s of a 4.0s duration, its run completed 27.1s before)",
        ),
        (
            "behind a silent holder, before its budget",
            waiter(10_000),
            &silent,
            "silent for 7.0s",
        ),
        (
            "its own parked Lease",
            waiter(100),
            &own_parked,
            "held the Lease parked",
        ),
        (
            "no history at all",
            waiter(100),
            &[],
            "while the Lease was free",
        ),
    ];
    // A's run completed when it fell silent.
    let done = BTreeMap::from([("A".to_string(), 3_000)]);
    for (what, j, lease, says) in cases {
        let e = classify_finished(&j, lease, false, &done).expect_err(what);
        assert!(e.contains(says), "{what}: {e}");
    }
}

#[test]
fn liveness_a_silent_holder_is_recoverable_only_once_its_run_completed() {
    let silent = renewing("A", 3_000);
    let recovers = with(30_100, |j| j.recovers = true);
    let at = |f: u64| BTreeMap::from([("A".to_string(), f)]);
    // Its run still in progress (a hung renewal): nothing could prove it finished.
    assert_eq!(
        classify_finished(&recovers, &silent, false, &BTreeMap::new()),
        Ok(Warranted::SilentUnprovable)
    );
    // Completed too late for a waiter that asks once per duration to have seen it.
    let due = recovery_due_ms(D);
    assert_eq!(
        classify_finished(&recovers, &silent, false, &at(30_100 - due + 1)),
        Ok(Warranted::SilentUnprovable)
    );
    assert!(classify_finished(&recovers, &silent, false, &at(30_100 - due)).is_err());
    // Without a liveness source a completed run proves nothing to the waiter.
    assert_eq!(
        classify_finished(&waiter(30_100), &silent, false, &at(3_000)),
        Ok(Warranted::SilentUnprovable)
    );
    // Another holder's completed run says nothing about A.
    let other = BTreeMap::from([("C".to_string(), 0)]);
    assert_eq!(
        classify_finished(&recovers, &silent, false, &other),
        Ok(Warranted::SilentUnprovable)
    );
}

#[test]
fn liveness_a_broken_pause_names_the_fence_holder() {
    let members = [
        (1, None, false),
        (2, Some("A;1".to_string()), true),
        (3, Some("B;2".to_string()), false),
        (4, Some("B;2".to_string()), false),
    ];
    assert_eq!(broken_by(&members), ["B"]);
    assert!(broken_by(&members[..2]).is_empty());
}

#[test]
fn liveness_the_tally_counts_each_reason() {
    let mut t = Tally::default();
    assert_eq!(t.line(), "warranted: none");
    t.add(&Ok(Warranted::LiveHolder));
    t.add(&Ok(Warranted::LiveHolder));
    t.add(&Ok(Warranted::Cancelled));
    t.add(&Err("x".into()));
    assert_eq!(t.unwarranted, 1);
    assert_eq!(t.line(), "warranted: cancelled=1 live_holder=2");
}

#[test]
fn liveness_wait_budgets_of_the_suites() {
    assert_eq!(budget_ms("30s"), 30_000);
    assert_eq!(budget_ms("4m"), 240_000);
    assert_eq!(budget_ms("x"), 0);
    assert_eq!(budget_ms(""), 0);
}

#[test]
fn liveness_a_pause_is_a_warrant_until_its_resume_ended() {
    // A person's pause P parked the Lease at 0 and its resume ended at 5 s, but the Lease was
    // never released (a resume whose failed Ready wait kept it).
    let mut parked = vec![v(5, 0, Some("P"), "r")];
    parked[0].parked = true;
    let resumed = BTreeMap::from([("P".to_string(), 5_000)]);
    let none = BTreeMap::new();
    let refused_at = |left: u64| classify_among(&waiter(left), &parked, false, &none, &resumed);
    // Refused while the pause was held on purpose, or by a read in flight as it ended.
    assert_eq!(refused_at(1_000), Ok(Warranted::Parked));
    assert_eq!(refused_at(5_000 + RESUMED_MARGIN_MS), Ok(Warranted::Parked));
    // Refused by what the resume left behind: no one holds it on purpose any more.
    let e = refused_at(9_000).expect_err("parked after its resume ended");
    assert!(
        e.contains("still parked by P, whose resume ended 4.0s before"),
        "{e}"
    );
    // A pause nobody resumed stays a warrant.
    assert_eq!(
        classify_among(&waiter(9_000), &parked, false, &none, &none),
        Ok(Warranted::Parked)
    );
}

#[test]
fn liveness_a_refusal_in_flight_as_a_pause_ends_is_warranted() {
    // P parked the Lease at 0 and released it at 5 s; B was refused by a read made before.
    let mut h = vec![v(5, 0, Some("P"), "r"), v(6, 5_000, None, "")];
    h[0].parked = true;
    assert_eq!(classify(&waiter(5_500), &h, false), Ok(Warranted::Parked));
    // Long after the release, a departure while the Lease is free has no warrant.
    assert!(classify(&waiter(5_000 + RESUMED_MARGIN_MS + 1), &h, false).is_err());
}
