use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::ObjectMeta;

use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn lease(holder: Option<&str>, parked_by: Option<&str>) -> KubeLease {
    let keys = AnnotationKeys::default();
    let annotations: BTreeMap<String, String> = parked_by
        .map(|p| (keys.parked.clone(), p.to_string()))
        .into_iter()
        .collect();
    KubeLease {
        metadata: ObjectMeta {
            name: Some("flux-handoff".into()),
            namespace: Some("flux-system".into()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            acquire_time: Some(MicroTime(at("2026-12-07T10:00:00Z"))),
            ..LeaseSpec::default()
        }),
    }
}

#[test]
fn held_a_parked_lease_is_never_expired_and_an_unknown_one_never_recovered() {
    let keys = AnnotationKeys::default();
    let parked = lease(Some("p"), Some("p"));
    let run = lease(Some("r"), None);
    // A mark left by another holder does not make this one parked.
    let stale_mark = lease(Some("r"), Some("p"));
    let free = lease(None, Some("p"));
    let table: Vec<(Option<&KubeLease>, &str, bool, Judged)> = vec![
        (Some(&parked), "p", true, Judged::Parked),
        (Some(&parked), "p", false, Judged::Parked),
        (Some(&run), "r", true, Judged::Held { expired: true }),
        (Some(&run), "r", false, Judged::Held { expired: false }),
        (Some(&stale_mark), "r", true, Judged::Held { expired: true }),
        // Held by another since the acquire, freed, or unread: nothing is called expired.
        (Some(&parked), "r", true, Judged::Held { expired: false }),
        (Some(&free), "p", true, Judged::Held { expired: false }),
        (None, "p", true, Judged::Held { expired: false }),
    ];
    for (read, holder, expired, want) in table {
        assert_eq!(
            judge_held(read, holder, expired, &keys),
            want,
            "{holder} {expired} {read:?}"
        );
    }
}

#[test]
fn held_a_parked_pause_is_named_with_its_reason_and_age() {
    let keys = AnnotationKeys::default();
    let cfg = LeaseConfig::default();
    let now = at("2026-12-07T10:03:05Z");
    let maint = [
        ("other", at("2026-12-07T09:00:00Z"), Some("not this one")),
        ("p", at("2026-12-07T10:00:01Z"), None),
        ("p", at("2026-12-07T10:00:02Z"), Some("maint\nnow")),
    ];
    let got = parked_refusal(&lease(Some("p"), Some("p")), &cfg, &keys, &maint, now);
    assert_eq!(
        got,
        Some(Refusal::LeaseParked {
            holder: "p".into(),
            lease: None,
            pause: Box::new(ParkedPause {
                reason: Some("maint\\nnow".into()),
                since: Some("2026-12-07T10:00:00Z".into()),
                age: Some(Duration::from_secs(185)),
            }),
        })
    );
    // Without an acquireTime, its oldest fence dates it; a named Lease is named.
    let mut bare = lease(Some("p"), Some("p"));
    bare.spec.as_mut().unwrap().acquire_time = None;
    let named = LeaseConfig::new("team", "handoff");
    let got = parked_refusal(&bare, &named, &keys, &maint[1..], now).unwrap();
    let Refusal::LeaseParked {
        lease: l, pause, ..
    } = &got
    else {
        panic!("{got:?}");
    };
    assert_eq!(l.as_deref(), Some("team/handoff"));
    assert_eq!(pause.since.as_deref(), Some("2026-12-07T10:00:01Z"));
    assert_eq!(pause.age, Some(Duration::from_secs(184)));
    // Nothing read of its fences: no reason, still named and dated.
    let got = parked_refusal(&lease(Some("p"), Some("p")), &cfg, &keys, &[], now).unwrap();
    assert!(
        got.to_string().starts_with(
            "it is held by a parked pause of p since 2026-12-07T10:00:00Z (3m05s ago)"
        ),
        "{got}"
    );
    // Not parked by its holder: not a parked pause.
    for l in [lease(Some("r"), None), lease(Some("r"), Some("p"))] {
        assert_eq!(parked_refusal(&l, &cfg, &keys, &maint, now), None);
    }
}
