use super::*;

fn clean(main: Option<i32>) -> Facts {
    Facts {
        main,
        command: None,
        cancel: None,
        faults: BTreeSet::new(),
        group_faulted: false,
        lease_busy: false,
        post: Some(0),
        post_faults: BTreeSet::new(),
        preempted: false,
    }
}

fn with(main: i32, change: impl FnOnce(&mut Facts)) -> Facts {
    let mut f = clean(Some(main));
    change(&mut f);
    f
}

#[test]
fn soak_jobs_the_tool_did_not_lose_table() {
    let kept: Vec<(&str, Facts)> = vec![
        ("success", clean(Some(0))),
        ("the command failed", with(42, |f| f.command = Some(42))),
        (
            "cancelled, released",
            with(130, |f| f.cancel = Some(Cancel::Int)),
        ),
        (
            "cancelled, command ended by SIGTERM",
            with(143, |f| f.cancel = Some(Cancel::Term)),
        ),
        (
            "cancel that came after the end",
            with(0, |f| f.cancel = Some(Cancel::Int)),
        ),
        ("killed by the runner", {
            let mut f = clean(None);
            f.cancel = Some(Cancel::Kill);
            f
        }),
        (
            "restart: api error",
            with(6, |f| {
                f.faults.insert("restart");
            }),
        ),
        (
            "hang: timeout",
            with(4, |f| {
                f.faults.insert("hang");
            }),
        ),
        (
            "restart: cleanup failed, post released",
            with(7, |f| {
                f.faults.insert("restart");
            }),
        ),
        (
            "flux resume: pause broken",
            with(8, |f| {
                f.faults.insert("flux_resume");
            }),
        ),
        (
            "refused after a fault left a fence",
            with(3, |f| f.group_faulted = true),
        ),
        (
            "post failed during a restart",
            with(0, |f| {
                f.post = Some(6);
                f.post_faults.insert("restart");
            }),
        ),
    ];
    for (what, f) in &kept {
        assert!(classify(f).is_ok(), "{what}: {:?}", classify(f));
    }
}

#[test]
fn soak_ejections_table() {
    let ejected: Vec<(&str, Facts, &str)> = vec![
        ("busy Lease", with(3, |f| f.lease_busy = true), "only busy"),
        (
            "busy Lease even under a fault",
            with(3, |f| {
                f.lease_busy = true;
                f.faults.insert("restart");
            }),
            "only busy",
        ),
        ("refused with no fault", with(3, |_| {}), "exit 3"),
        (
            "api error with no fault",
            with(6, |_| {}),
            "no fault injected",
        ),
        (
            "pause broken under a restart only",
            with(8, |f| {
                f.faults.insert("restart");
            }),
            "restart",
        ),
        ("130 with no cancel", with(130, |_| {}), "exit 130"),
        (
            "internal error",
            with(1, |f| {
                f.faults.insert("restart");
            }),
            "exit 1",
        ),
        ("usage error", with(2, |_| {}), "exit 2"),
        ("killed with no cancel", clean(None), "nobody sent"),
        (
            "killed after SIGTERM only",
            {
                let mut f = clean(None);
                f.cancel = Some(Cancel::Term);
                f
            },
            "nobody sent",
        ),
        (
            "post failed with no fault",
            with(0, |f| f.post = Some(6)),
            "post step exited 6",
        ),
        (
            "post never finished",
            with(0, |f| f.post = None),
            "did not finish",
        ),
    ];
    for (what, f, says) in &ejected {
        let e = classify(f).expect_err(what);
        assert!(e.contains(says), "{what}: {e}");
    }
}

#[test]
fn soak_percentiles_are_nearest_rank() {
    assert_eq!(percentile(&[], 50), 0);
    assert_eq!(percentile(&[7], 99), 7);
    let v: Vec<u64> = (1..=100).rev().collect();
    assert_eq!(percentile(&v, 50), 50);
    assert_eq!(percentile(&v, 99), 99);
    assert_eq!(percentile(&v, 100), 100);
    assert_eq!(percentile(&[10, 20, 30], 50), 20);
    assert_eq!(percentile(&[10, 20, 30], 99), 30);
    assert_eq!(percentile(&[5, 1], 0), 1);
}

#[test]
fn soak_overhead_leaves_out_the_command_and_the_queue() {
    assert_eq!(overhead_ms(5_000, 1_000, 2_500), 1_500);
    assert_eq!(overhead_ms(900, 1_000, 0), 0);
}

#[test]
fn soak_the_report_line() {
    let f = Figures {
        jobs: 200,
        overhead_p50_ms: 812,
        overhead_p99_ms: 2_301,
        ..Figures::default()
    };
    assert_eq!(
        f.line(),
        "soak: jobs=200 ejections=0 unwarranted=0 leaked_fences=0 work_outside_pause=0 overhead_p50_ms=812 overhead_p99_ms=2301"
    );
    assert!(f.passed());
    for bad in [
        Figures { ejections: 1, ..f },
        Figures {
            unwarranted: 1,
            ..f
        },
        Figures {
            leaked_fences: 1,
            ..f
        },
        Figures {
            work_outside_pause: 1,
            ..f
        },
    ] {
        assert!(!bad.passed(), "{}", bad.line());
    }
}

#[test]
fn soak_a_preempted_job_is_lost_to_the_runner_not_the_tool() {
    let mut f = clean(None);
    f.post = None;
    assert!(
        classify(&f).is_err(),
        "killed, no post step, nobody said why"
    );
    f.preempted = true;
    assert_eq!(classify(&f), Ok("preempted: the runner died, no post step"));
}

#[test]
fn soak_the_history_overrules_an_exit_code_ejection() {
    let busy = || Err::<&'static str, String>("exit 3 while the Lease was only busy".into());
    // Refused by a person's pause held on purpose: exit 3 reads like a busy Lease.
    let parked = Ok(Warranted::Parked);
    assert_eq!(
        by_history(busy(), Some(&parked), false, true),
        Ok("parked_pause")
    );
    // ... but its post step must still have passed.
    assert!(by_history(busy(), Some(&parked), false, false).is_err());
    // A person scaled its gate: exit 7 (withheld) or 8 (stopped) alike.
    let withheld = Err::<&'static str, String>("exit 7 (no fault injected meanwhile)".into());
    assert!(by_history(withheld, None, true, false).is_ok());
    // Unwarranted in the history, or warranted by something the exit code already judges.
    let unwarranted = Err("left after 3.4s while the Lease was free".to_string());
    assert!(by_history(busy(), Some(&unwarranted), false, true).is_err());
    let cancelled = Ok(Warranted::Cancelled);
    assert!(by_history(busy(), Some(&cancelled), false, true).is_err());
    assert_eq!(
        by_history(Ok("succeeded"), None, false, true),
        Ok("succeeded")
    );
}
