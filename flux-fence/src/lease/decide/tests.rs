//! Tier 1: decision tables of the pure Lease core, with an injected clock.

use std::time::Duration;

use crate::lease::decide::GoneHolder;
use crate::lease::decide::RecoverRefusal;
use crate::lease::decide::{
    LeaseDecision, LeaseReleaseDecision, RecoverDecision, RenewDecision, decide_lease_acquire,
    decide_lease_release, decide_recover, decide_renew, is_expired, is_stale, release_landed,
};
use crate::{Clock, Epoch, Holder, LeaseConfig, LossReason, ManualClock};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

fn t0() -> Timestamp {
    "2026-11-30T12:00:00Z".parse().unwrap()
}

fn me() -> Holder {
    "gh1.1-aaaaaa".parse().unwrap()
}

fn cfg() -> LeaseConfig {
    LeaseConfig::new("flux-system", "flux-handoff").with_duration(Duration::from_secs(30))
}

fn lease(holder: Option<&str>, transitions: i32, renewed: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("flux-handoff".into()),
            namespace: Some("flux-system".into()),
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(30),
            lease_transitions: Some(transitions),
            acquire_time: Some(MicroTime(renewed)),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }),
    }
}

#[test]
fn absent_lease_is_created_at_epoch_one_with_our_holder() {
    let LeaseDecision::Create(l) = decide_lease_acquire(None, &cfg(), &me(), t0()).unwrap() else {
        panic!("expected create");
    };
    let spec = l.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("gh1.1-aaaaaa"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.lease_duration_seconds, Some(30));
    assert_eq!(l.metadata.name.as_deref(), Some("flux-handoff"));
}

#[test]
fn free_lease_is_taken_with_the_read_version_and_next_epoch() {
    let read = lease(None, 4, t0());
    let LeaseDecision::Take(l) = decide_lease_acquire(Some(&read), &cfg(), &me(), t0()).unwrap()
    else {
        panic!("expected take");
    };
    assert_eq!(l.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(l.spec.unwrap().lease_transitions, Some(5));
    // An empty holder string counts as free too.
    let empty = lease(Some(""), 4, t0());
    assert!(matches!(
        decide_lease_acquire(Some(&empty), &cfg(), &me(), t0()).unwrap(),
        LeaseDecision::Take(_)
    ));
}

#[test]
fn held_lease_is_never_taken_even_long_expired() {
    let clock = ManualClock::new(t0());
    let read = lease(Some("gh9.1-zzzzzz"), 2, t0());
    assert_eq!(
        decide_lease_acquire(Some(&read), &cfg(), &me(), clock.now()).unwrap(),
        LeaseDecision::Held {
            holder: "gh9.1-zzzzzz".into(),
            expired: false
        }
    );
    clock.advance(Duration::from_hours(24));
    assert_eq!(
        decide_lease_acquire(Some(&read), &cfg(), &me(), clock.now()).unwrap(),
        LeaseDecision::Held {
            holder: "gh9.1-zzzzzz".into(),
            expired: true
        }
    );
}

#[test]
fn lease_already_naming_us_is_adopted_at_its_epoch() {
    let read = lease(Some("gh1.1-aaaaaa"), 7, t0());
    assert_eq!(
        decide_lease_acquire(Some(&read), &cfg(), &me(), t0()).unwrap(),
        LeaseDecision::Ours { epoch: Epoch(7) }
    );
}

#[test]
fn negative_transitions_are_malformed_not_a_panic() {
    let read = lease(None, -1, t0());
    assert!(decide_lease_acquire(Some(&read), &cfg(), &me(), t0()).is_err());
}

#[test]
fn renewal_only_while_ours_at_our_epoch() {
    let later = t0().checked_add(jiff_secs(10)).unwrap();
    let RenewDecision::Renew(l) = decide_renew(
        Some(&lease(Some("gh1.1-aaaaaa"), 3, t0())),
        &me(),
        Epoch(3),
        later,
    ) else {
        panic!("expected renew");
    };
    assert_eq!(l.spec.unwrap().renew_time, Some(MicroTime(later)));
    assert_eq!(
        decide_renew(None, &me(), Epoch(3), later),
        RenewDecision::Lost(LossReason::Deleted)
    );
    assert_eq!(
        decide_renew(
            Some(&lease(Some("gh9.1-zzzzzz"), 4, t0())),
            &me(),
            Epoch(3),
            later
        ),
        RenewDecision::Lost(LossReason::HolderChanged {
            holder: Some("gh9.1-zzzzzz".into())
        })
    );
    assert_eq!(
        decide_renew(
            Some(&lease(Some("gh1.1-aaaaaa"), 5, t0())),
            &me(),
            Epoch(3),
            later
        ),
        RenewDecision::Lost(LossReason::EpochChanged)
    );
}

#[test]
fn staleness_and_expiry_follow_the_injected_clock() {
    let clock = ManualClock::new(t0());
    let d = Duration::from_secs(30);
    assert!(!is_stale(t0(), clock.now(), d));
    clock.advance(Duration::from_secs(29));
    assert!(!is_stale(t0(), clock.now(), d));
    assert!(!is_expired(
        lease(Some("x"), 1, t0()).spec.as_ref().unwrap(),
        clock.now()
    ));
    clock.advance(Duration::from_secs(1));
    assert!(is_stale(t0(), clock.now(), d));
    assert!(is_expired(
        lease(Some("x"), 1, t0()).spec.as_ref().unwrap(),
        clock.now()
    ));
    assert!(is_expired(&LeaseSpec::default(), clock.now()));
}

#[test]
fn recovery_needs_the_named_holder_at_the_version_the_evidence_was_judged_on() {
    // The recovering clock runs far ahead: the wall clock never decides a recovery.
    let clock = ManualClock::new(t0());
    clock.advance(Duration::from_hours(24));
    let read = lease(Some("gh9.1-zzzzzz"), 2, t0());
    let gone = GoneHolder::new("gh9.1-zzzzzz", "42", "unchanged for 30s while watched");
    let stale = GoneHolder::new("gh9.1-zzzzzz", "41", "unchanged for 30s while watched");
    let wrong = GoneHolder::new("gh8.1-yyyyyy", "42", "run 8 completed");
    let decide = |g: &GoneHolder, l: Option<&Lease>| {
        decide_recover(l, &cfg(), &me(), g, clock.now()).unwrap()
    };
    assert_eq!(
        decide(&stale, Some(&read)),
        RecoverDecision::Refuse(RecoverRefusal::Moved {
            holder: "gh9.1-zzzzzz".into()
        }),
        "renewed since the evidence: refused however old renewTime looks"
    );
    assert_eq!(
        decide(&wrong, Some(&read)),
        RecoverDecision::Refuse(RecoverRefusal::OtherHolder {
            holder: "gh9.1-zzzzzz".into()
        })
    );
    assert_eq!(
        decide(&gone, None),
        RecoverDecision::Refuse(RecoverRefusal::Missing)
    );
    assert_eq!(
        decide(&gone, Some(&lease(None, 2, t0()))),
        RecoverDecision::Refuse(RecoverRefusal::Free)
    );
    // A fresh renewTime by our clock does not matter either: the version decides.
    let fresh = lease(Some("gh9.1-zzzzzz"), 2, clock.now());
    assert!(matches!(
        decide(&gone, Some(&fresh)),
        RecoverDecision::Take(_)
    ));
    let RecoverDecision::Take(l) = decide(&gone, Some(&read)) else {
        panic!("expected take")
    };
    assert_eq!(l.metadata.resource_version.as_deref(), Some("42"));
    let spec = l.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("gh1.1-aaaaaa"));
    assert_eq!(spec.lease_transitions, Some(3));
}

#[test]
fn a_release_whose_answer_was_lost_has_landed_only_with_no_holder_at_our_epoch() {
    assert!(release_landed(Some(&lease(None, 3, t0())), Epoch(3)));
    assert!(release_landed(Some(&lease(Some(""), 3, t0())), Epoch(3)));
    // Still ours: the release did not land.
    assert!(!release_landed(
        Some(&lease(Some("gh1.1-aaaaaa"), 3, t0())),
        Epoch(3)
    ));
    // Free at a later epoch: someone acquired (and released) it since; not our write.
    assert!(!release_landed(Some(&lease(None, 4, t0())), Epoch(3)));
    assert!(!release_landed(
        Some(&lease(Some("gh9.1-zzzzzz"), 4, t0())),
        Epoch(3)
    ));
    assert!(!release_landed(None, Epoch(3)));
}

#[test]
fn release_clears_the_holder_only_while_ours() {
    let LeaseReleaseDecision::Update(l) = decide_lease_release(
        Some(&lease(Some("gh1.1-aaaaaa"), 3, t0())),
        &me(),
        Epoch(3),
        PARKED,
    ) else {
        panic!("expected update");
    };
    let spec = l.spec.unwrap();
    assert_eq!(spec.holder_identity, None);
    assert_eq!(spec.lease_transitions, Some(3));
    assert_eq!(l.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(
        decide_lease_release(None, &me(), Epoch(3), PARKED),
        LeaseReleaseDecision::Gone
    );
    assert_eq!(
        decide_lease_release(
            Some(&lease(Some("gh9.1-zzzzzz"), 4, t0())),
            &me(),
            Epoch(3),
            PARKED
        ),
        LeaseReleaseDecision::NotOurs {
            holder: Some("gh9.1-zzzzzz".into())
        }
    );
    assert!(matches!(
        decide_lease_release(
            Some(&lease(Some("gh1.1-aaaaaa"), 4, t0())),
            &me(),
            Epoch(3),
            PARKED
        ),
        LeaseReleaseDecision::NotOurs { .. }
    ));
}

/// The default parked key, as `LeaseConfig::default().parked_key`.
const PARKED: &str = "flux-handoff.io/parked";

/// `l` carrying the parked mark `parked` (and an unrelated annotation that must stay).
fn parked_by(mut l: Lease, parked: &str) -> Lease {
    l.metadata.annotations = Some(
        [
            (PARKED.to_string(), parked.to_string()),
            ("example.com/note".to_string(), "kept".to_string()),
        ]
        .into(),
    );
    l
}

fn parked_mark(l: &Lease) -> Option<&str> {
    l.metadata
        .annotations
        .as_ref()?
        .get(PARKED)
        .map(String::as_str)
}

#[test]
fn a_parked_mark_never_outlives_the_pause_it_marks() {
    assert_eq!(cfg().parked_key, PARKED);
    // (what is read, what the decision writes): release, take of a free Lease, recovery.
    let held = parked_by(lease(Some("gh1.1-aaaaaa"), 3, t0()), "gh1.1-aaaaaa");
    let LeaseReleaseDecision::Update(released) =
        decide_lease_release(Some(&held), &me(), Epoch(3), PARKED)
    else {
        panic!("expected update");
    };
    assert_eq!(parked_mark(&released), None, "a release unparks");
    assert_eq!(
        released.metadata.annotations.as_ref().unwrap()["example.com/note"],
        "kept",
        "other annotations stay"
    );
    // A free Lease still carrying a mark (left by an older release): taking it, even as the
    // holder the mark names, does not carry it over.
    let stale = parked_by(lease(None, 3, t0()), "gh1.1-aaaaaa");
    let LeaseDecision::Take(taken) =
        decide_lease_acquire(Some(&stale), &cfg(), &me(), t0()).unwrap()
    else {
        panic!("expected take");
    };
    assert_eq!(parked_mark(&taken), None, "a free Lease is never parked");
    assert_eq!(
        taken.metadata.annotations.as_ref().unwrap()["example.com/note"],
        "kept"
    );
    // Adopting one's own parked pause writes nothing: the mark stays until its release.
    let own = parked_by(lease(Some("gh1.1-aaaaaa"), 3, t0()), "gh1.1-aaaaaa");
    assert_eq!(
        decide_lease_acquire(Some(&own), &cfg(), &me(), t0()).unwrap(),
        LeaseDecision::Ours { epoch: Epoch(3) }
    );
    // A recovery of a parked pause takes it unparked: the recovering holder did not park it.
    let other = parked_by(lease(Some("gh9.1-zzzzzz"), 4, t0()), "gh9.1-zzzzzz");
    let gone = GoneHolder::new("gh9.1-zzzzzz", "42", "test");
    let RecoverDecision::Take(recovered) =
        decide_recover(Some(&other), &cfg(), &me(), &gone, t0()).unwrap()
    else {
        panic!("expected take");
    };
    assert_eq!(parked_mark(&recovered), None);
    // A Lease whose only annotation was the mark ends with none.
    let mut only = lease(Some("gh1.1-aaaaaa"), 3, t0());
    only.metadata.annotations = Some([(PARKED.to_string(), "gh1.1-aaaaaa".to_string())].into());
    let LeaseReleaseDecision::Update(l) =
        decide_lease_release(Some(&only), &me(), Epoch(3), PARKED)
    else {
        panic!("expected update");
    };
    assert_eq!(l.metadata.annotations, None);
}

fn jiff_secs(s: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_secs(s)
}

#[test]
fn a_release_outcome_reads_as_words_not_as_a_debug_dump() {
    use crate::lease::LeaseRelease;
    assert_eq!(
        LeaseRelease::NotOurs {
            holder: Some("gh9.1-zzzzzz".into())
        }
        .to_string(),
        "not ours: held by gh9.1-zzzzzz"
    );
    assert_eq!(
        LeaseRelease::Contended.to_string(),
        "another party changed it on every attempt"
    );
}
