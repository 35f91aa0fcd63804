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
fn only_a_fence_of_another_holder_names_one() {
    let owner = "gh2.1-bbbbbb;3";
    assert_eq!(
        fence_holder(&Refusal::FencedBy {
            holder: owner.into()
        })
        .as_deref(),
        Some("gh2.1-bbbbbb")
    );
    assert_eq!(
        fence_holder(&Refusal::FencedBy {
            holder: "not-an-owner".into()
        })
        .as_deref(),
        Some("not-an-owner")
    );
    assert_eq!(fence_holder(&Refusal::OursDiffers), None);
}

#[test]
fn the_waiting_line_names_holder_since_and_budget() {
    let w = LeaseWaiting {
        lease: "flux-system/flux-handoff".into(),
        holder: "gh2.1-bbbbbb".into(),
        since: Some("2026-12-01T20:00:00Z".parse().unwrap()),
        waited: Duration::from_millis(10_400),
        budget: Duration::from_mins(2),
    };
    assert_eq!(
        w.line(),
        "waiting for lease flux-system/flux-handoff: held by gh2.1-bbbbbb since \
         2026-12-01T20:00:00Z (waited 10s of 2m)"
    );
}

#[test]
fn a_start_that_lost_a_race_waits_again_and_any_other_failure_stands() {
    let app = crate::object::kustomization("ns", "app");
    let fenced = |by: &str| SessionError::Refused {
        object: (&app).into(),
        why: Refusal::FencedBy { holder: by.into() },
    };
    let held = SessionError::LeaseHeld {
        lease: "ns/l".into(),
        holder: "gh2.1-b".into(),
        expired: true,
    };
    let waited = ["gh2.1-b".to_string()];
    // (failure, holders waited for, the Lease's holder now, waits again)
    let table: Vec<(SessionError, &[String], Option<&str>, bool)> = vec![
        (held, &[], None, true),
        // The holder waited for: its fence met by a start that judged too early.
        (fenced("gh2.1-b;1"), &waited, None, true),
        // The run that just took the Lease fenced the target first.
        (fenced("gh3.1-c;2"), &waited, Some("gh3.1-c"), true),
        // A fence of nobody waited for and not the Lease's holder: a refusal.
        (fenced("gh4.1-d;1"), &waited, Some("gh3.1-c"), false),
        (fenced("gh4.1-d;1"), &[], None, false),
        (
            SessionError::Refused {
                object: crate::session::Subject::lease("ns/l"),
                why: Refusal::LeaseContended,
            },
            &waited,
            Some("gh2.1-b"),
            true,
        ),
        (
            SessionError::NotFound(Box::new(app.clone())),
            &waited,
            None,
            false,
        ),
    ];
    for (i, (e, waited_for, now, want)) in table.into_iter().enumerate() {
        assert_eq!(waits_again(&e, waited_for, now), want, "row {i}: {e}");
    }
}
