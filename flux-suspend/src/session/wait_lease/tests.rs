//! Table tests of the wait's decision and its line.
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::ObjectMeta;

use super::*;
use crate::session::Refusal;

fn lease(holder: Option<&str>, parked: Option<&str>, renewed_ago: i64) -> KubeLease {
    let now = Timestamp::now();
    let renewed = now - k8s_openapi::jiff::SignedDuration::from_secs(renewed_ago);
    KubeLease {
        metadata: ObjectMeta {
            annotations: parked.map(|p| [(AnnotationKeys::default().parked, p.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(60),
            acquire_time: Some(MicroTime(renewed)),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }),
    }
}

#[test]
fn queue_each_read_of_the_lease_decides_the_wait() {
    let me: Holder = "gh1.1-aaaaaa".parse().unwrap();
    let other = "gh2.1-bbbbbb";
    let since = |l: &KubeLease| l.spec.as_ref().unwrap().acquire_time.as_ref().map(|t| t.0);
    let live = lease(Some(other), None, 5);
    let wait = WaitDecision::Wait {
        holder: other.into(),
        since: since(&live),
    };
    let gone = WaitDecision::Gone {
        holder: other.into(),
    };
    let parked = WaitDecision::Parked {
        holder: other.into(),
    };
    // (the Lease as read, seconds seen unchanged, budget spent, decision)
    let table: Vec<(Option<KubeLease>, u64, bool, WaitDecision)> = vec![
        (None, 0, false, WaitDecision::Start),
        (Some(lease(None, None, 5)), 0, false, WaitDecision::Start),
        (Some(lease(Some(""), None, 5)), 0, true, WaitDecision::Start),
        (
            Some(lease(Some(me.as_str()), None, 5)),
            0,
            false,
            WaitDecision::Start,
        ),
        (Some(live.clone()), 0, false, wait.clone()),
        (Some(live.clone()), 59, false, wait.clone()),
        (
            Some(live.clone()),
            0,
            true,
            WaitDecision::GiveUp {
                holder: other.into(),
                since: since(&live),
            },
        ),
        // Renewed ten minutes ago by this machine's clock (one running ahead, or a holder
        // that is gone): no wall clock is compared, so it is waited for...
        (Some(lease(Some(other), None, 600)), 0, false, wait.clone()),
        // ...and still while it stays unwritten for the holder's whole duration, as long as
        // the budget lasts: a holder whose requests hang comes back, a gone one's post step
        // or a janitor frees the Lease (the soak ejected queued jobs here).
        (Some(lease(Some(other), None, 600)), 60, false, wait.clone()),
        (Some(live.clone()), 600, false, wait.clone()),
        // Budget spent: a holder silent for its duration is named gone (`fences recover`).
        (Some(live.clone()), 60, true, gone),
        // Parked by its holder: never waited for, even with budget left.
        (
            Some(lease(Some(other), Some(other), 5)),
            0,
            false,
            parked.clone(),
        ),
        (
            Some(lease(Some(other), Some(other), 600)),
            600,
            false,
            parked,
        ),
        // A stale parked mark of someone else is not a parked pause of this holder.
        (
            Some(lease(Some(other), Some("gh3.1-cccccc"), 5)),
            0,
            false,
            wait,
        ),
    ];
    for (i, (read, unchanged, spent, want)) in table.into_iter().enumerate() {
        let got = decide_wait(
            read.as_ref(),
            &me,
            &AnnotationKeys::default(),
            Duration::from_secs(unchanged),
            Asked::Off,
            spent,
        );
        // acquireTime differs per built lease: compare holder and kind.
        match (&got, &want) {
            (WaitDecision::Wait { holder: a, .. }, WaitDecision::Wait { holder: b, .. })
            | (WaitDecision::GiveUp { holder: a, .. }, WaitDecision::GiveUp { holder: b, .. }) => {
                assert_eq!(a, b, "row {i}");
            }
            _ => assert_eq!(got, want, "row {i}"),
        }
    }
}

#[test]
fn queue_heal_a_silent_holder_is_asked_about_once_per_duration_with_recovery() {
    let me: Holder = "gh1.1-aaaaaa".parse().unwrap();
    let other = "gh2.1-bbbbbb";
    let live = lease(Some(other), None, 5);
    let recover = WaitDecision::Recover {
        holder: other.into(),
    };
    let secs = Duration::from_secs;
    // (seconds seen unchanged, when last asked, budget spent, decision kind)
    let table: Vec<(u64, Asked, bool, &str)> = vec![
        // Recovery off: never asked, as before.
        (60, Asked::Off, false, "wait"),
        (60, Asked::Off, true, "gone"),
        // Renewed within its duration: a live holder is not asked about.
        (59, Asked::Never, false, "wait"),
        (0, Asked::Never, true, "give-up"),
        // Unwritten for its whole duration: asked, with budget left or not.
        (60, Asked::Never, false, "recover"),
        (600, Asked::Never, true, "recover"),
        // Asked less than a duration ago: waited for again, not asked.
        (120, Asked::Ago(secs(30)), false, "wait"),
        (120, Asked::Ago(secs(30)), true, "gone"),
        // Asked a duration ago or more: asked again.
        (120, Asked::Ago(secs(60)), false, "recover"),
    ];
    for (i, (unchanged, asked, spent, want)) in table.into_iter().enumerate() {
        let got = decide_wait(
            Some(&live),
            &me,
            &AnnotationKeys::default(),
            secs(unchanged),
            asked,
            spent,
        );
        let kind = match &got {
            WaitDecision::Wait { .. } => "wait",
            WaitDecision::Gone { .. } => "gone",
            WaitDecision::GiveUp { .. } => "give-up",
            WaitDecision::Recover { .. } => {
                assert_eq!(got, recover, "row {i}");
                "recover"
            }
            other => panic!("row {i}: {other:?}"),
        };
        assert_eq!(kind, want, "row {i}");
    }
    // A parked pause is never asked about: it is deliberate, and refused at once.
    let parked = lease(Some(other), Some(other), 600);
    let got = decide_wait(
        Some(&parked),
        &me,
        &AnnotationKeys::default(),
        secs(600),
        Asked::Never,
        false,
    );
    assert_eq!(
        got,
        WaitDecision::Parked {
            holder: other.into()
        }
    );
}

#[test]
fn the_waiting_line_names_holder_since_and_budget() {
    let w = LeaseWaiting {
        lease: "flux-system/flux-handoff".into(),
        holder: "gh2.1-bbbbbb".into(),
        since: Some("2026-12-01T20:00:00Z".parse().unwrap()),
        waited: Duration::from_millis(10_400),
        budget: Duration::from_mins(2),
        not_finished: None,
    };
    assert_eq!(
        w.line(),
        "waiting for lease flux-system/flux-handoff: held by gh2.1-bbbbbb since \
         2026-12-01T20:00:00Z (waited 10s of 2m)"
    );
    let asked = LeaseWaiting {
        not_finished: Some("run 4711 attempt 1 is in_progress".into()),
        ..w
    };
    assert_eq!(
        asked.line(),
        "waiting for lease flux-system/flux-handoff: held by gh2.1-bbbbbb since \
         2026-12-01T20:00:00Z (waited 10s of 2m; not recovered: run 4711 attempt 1 is \
         in_progress)"
    );
}

#[test]
fn wait_fault_a_start_that_waiting_can_mend_waits_again_and_any_other_failure_stands() {
    let app = crate::object::kustomization("ns", "app");
    let lease_subject = || crate::session::Subject::lease("ns/l");
    let fenced = |by: &str| SessionError::Refused {
        object: (&app).into(),
        why: Refusal::FencedBy { holder: by.into() },
    };
    let api = |code: u16| {
        kube::Error::Api(
            kube::core::Status::failure("x", "Reason")
                .with_code(code)
                .boxed(),
        )
    };
    let read = |code: u16| SessionError::Read {
        object: Box::new(app.clone()),
        source: api(code),
    };
    let lease_write = |code: u16| {
        SessionError::Lease(flux_fence::FenceError::Api {
            verb: "update",
            resource: "leases.coordination.k8s.io".into(),
            target: "ns/l".into(),
            source: Box::new(api(code)),
        })
    };
    let suspended = SessionError::Refused {
        object: (&app).into(),
        why: Refusal::MarkTaken {
            at: flux_fence::mark::MarkAt::Field("/spec/suspend".into()),
            field_manager: Some("kubectl".into()),
        },
    };
    // (failure, waits again)
    let table: Vec<(SessionError, bool)> = vec![
        (
            SessionError::LeaseHeld {
                lease: "ns/l".into(),
                holder: "gh2.1-b".into(),
                expired: true,
            },
            true,
        ),
        // A fence of any other holder: its run ends, whoever it is (a start after a broken
        // read met the fence of the holder it had waited for, and left the queue).
        (fenced("gh2.1-b;1"), true),
        (fenced("gh4.1-d;1"), true),
        (
            SessionError::Refused {
                object: lease_subject(),
                why: Refusal::LeaseContended,
            },
            true,
        ),
        (
            SessionError::Refused {
                object: lease_subject(),
                why: Refusal::NotProvedFinished {
                    holder: "gh2.1-b".into(),
                    why: "run 2 attempt 1 is in_progress".into(),
                },
            },
            true,
        ),
        (
            SessionError::Refused {
                object: lease_subject(),
                why: Refusal::TakeoverLost {
                    gone: "gh2.1-b".into(),
                    why: "the lease moved".into(),
                },
            },
            true,
        ),
        // Reads and a Lease write that failed transiently: nothing changed, try again.
        (read(503), true),
        (read(429), true),
        (lease_write(500), true),
        // What waiting cannot mend stands.
        (read(403), false),
        (lease_write(403), false),
        (suspended, false),
        (SessionError::NotFound(Box::new(app.clone())), false),
        (SessionError::Invalid("bad".into()), false),
        (
            SessionError::Refused {
                object: lease_subject(),
                why: Refusal::LeaseParked {
                    holder: "gh2.1-b".into(),
                    lease: None,
                    pause: Box::default(),
                },
            },
            false,
        ),
    ];
    for (i, (e, want)) in table.into_iter().enumerate() {
        assert_eq!(waits_again(&e), want, "row {i}: {e}");
    }
}

#[test]
fn queue_heal_the_wait_reads_again_when_the_holder_can_next_be_asked_about() {
    let s = Duration::from_secs;
    // (holder's duration, seen unchanged, last asked, read again within)
    let table = [
        (s(60), s(0), Asked::Off, Duration::MAX),
        (s(60), s(0), Asked::Never, s(60)),
        (s(60), s(45), Asked::Never, s(15)),
        (s(60), s(90), Asked::Never, s(0)),
        // Asked 20 s ago: not before a duration has passed since.
        (s(60), s(90), Asked::Ago(s(20)), s(40)),
        (s(60), s(10), Asked::Ago(s(70)), s(50)),
    ];
    for (i, (duration, unchanged, asked, want)) in table.into_iter().enumerate() {
        assert_eq!(next_ask(duration, unchanged, asked), want, "row {i}");
    }
}

#[test]
fn wait_fault_a_lease_read_is_bounded_by_the_budget_left_and_the_read_interval() {
    let s = Duration::from_secs;
    let ms = Duration::from_millis;
    // (budget left, read interval, the read's limit)
    let table = [
        (s(120), s(10), s(10)),
        (s(4), s(10), s(4)),
        (ms(2500), s(10), ms(2500)),
        // The read that decides the wait's end still gets a moment to answer.
        (ms(300), s(10), s(1)),
        (Duration::ZERO, s(10), s(1)),
        (s(120), ms(500), s(1)),
    ];
    for (i, (left, every, want)) in table.into_iter().enumerate() {
        assert_eq!(read_limit(left, every), want, "row {i}");
    }
}

#[test]
fn wait_fault_a_failed_lease_read_is_read_again_while_the_budget_lasts() {
    let s = Duration::from_secs;
    // (failure, budget left when sent, the read's limit, read again / hung / the session's)
    let table = [
        (Failure::NoAnswer, s(60), s(10), "again"),
        (Failure::NoAnswer, s(10), s(10), "hung"),
        (Failure::NoAnswer, s(3), s(3), "hung"),
        (Failure::NoAnswer, Duration::ZERO, s(1), "hung"),
        (Failure::Transient, s(60), s(10), "again"),
        (Failure::Transient, Duration::from_millis(1), s(1), "again"),
        (Failure::Transient, Duration::ZERO, s(1), "session"),
        (Failure::Other, s(60), s(10), "session"),
    ];
    for (i, (failure, left, limit, want)) in table.into_iter().enumerate() {
        let got = match after_failure(failure, left, limit) {
            None => "again",
            Some(LeaseRead::Hung) => "hung",
            Some(LeaseRead::Failed) => "session",
            Some(LeaseRead::Got(..)) => "read",
        };
        assert_eq!(got, want, "row {i}");
    }
}
