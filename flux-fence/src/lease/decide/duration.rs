//! The holder's own duration. `leaseDurationSeconds` is a field anyone with `update` on the
//! Lease can edit, and a person who shortens it "to speed up recovery" would make a reader that
//! trusts it judge a live holder gone. So the holder writes its configured duration twice, as
//! `leaseDurationSeconds` and in an annotation of its own (`<prefix>/duration`), on every
//! acquire, take-over, recovery and renewal; a reader waits for the longer of the two. An edit
//! of either can only lengthen a wait, and the holder's next renewal restores both.
//!
//! A released Lease keeps the annotation: it has no holder, so no liveness is judged by it,
//! and the next acquire writes its own.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};

use crate::AnnotationKeys;
use crate::lease::config::LeaseConfig;

/// The duration by which a reader judges the Lease's holder: the longer of
/// `spec.leaseDurationSeconds` and the holder's own record (annotation
/// [`AnnotationKeys::duration`], whole seconds). Either one missing, negative or unreadable
/// counts as zero; both missing is [`Duration::ZERO`] (the caller picks its own default).
///
/// # Guarantees
/// Pure. Lowering either value can never lower the answer below the other one, so an edit of
/// `leaseDurationSeconds` alone cannot shorten the wait for a holder that recorded its own.
#[must_use]
pub fn holder_duration(lease: &KubeLease, keys: &AnnotationKeys) -> Duration {
    let spec = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .unwrap_or(0);
    let recorded = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&keys.duration))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Duration::from_secs(spec.max(recorded))
}

/// `lease` with the holder's own duration (`cfg`) written as `leaseDurationSeconds` and as
/// annotation [`LeaseConfig::duration_key`], and its max-hold ([`LeaseConfig::max_hold`]) as
/// annotation [`LeaseConfig::max_hold_key`] (removed when it has none, so a previous holder's
/// limit is never read as this one's): what every write of the holder that keeps or takes the
/// Lease carries (acquire, take-over, recovery, renewal).
#[must_use]
pub(crate) fn with_holder_duration(mut lease: KubeLease, cfg: &LeaseConfig) -> KubeLease {
    let secs = cfg.duration_seconds();
    lease
        .spec
        .get_or_insert_with(LeaseSpec::default)
        .lease_duration_seconds = Some(secs);
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(cfg.duration_key.clone(), secs.to_string());
    match cfg.max_hold {
        Some(d) => annotations.insert(cfg.max_hold_key.clone(), format_max_hold(d)),
        None => annotations.remove(&cfg.max_hold_key),
    };
    lease
}

/// A max-hold as written in its annotation: a human duration (`2h`, `1h 30m`, `90s`).
#[must_use]
pub(crate) fn format_max_hold(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A max-hold annotation as read: a human duration above zero; `None` for anything else (a
/// value someone edited to nonsense limits nothing).
#[must_use]
pub(crate) fn parse_max_hold(text: &str) -> Option<Duration> {
    humantime::parse_duration(text.trim())
        .ok()
        .filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(spec: Option<i32>, recorded: Option<&str>) -> KubeLease {
        let keys = AnnotationKeys::default();
        let mut l = KubeLease {
            spec: Some(LeaseSpec {
                lease_duration_seconds: spec,
                ..LeaseSpec::default()
            }),
            ..KubeLease::default()
        };
        if let Some(r) = recorded {
            l.metadata.annotations = Some([(keys.duration, r.to_string())].into());
        }
        l
    }

    #[test]
    fn an_edit_of_either_value_only_lengthens_the_wait() {
        let keys = AnnotationKeys::default();
        let s = Duration::from_secs;
        let table = [
            (Some(40), Some("40"), s(40)),
            // leaseDurationSeconds lowered by a person: the holder's own record stands.
            (Some(2), Some("40"), s(40)),
            // Raised by a person: the longer wait.
            (Some(90), Some("40"), s(90)),
            // The record lowered or broken: leaseDurationSeconds stands.
            (Some(40), Some("2"), s(40)),
            (Some(40), Some("soon"), s(40)),
            (Some(40), Some("-5"), s(40)),
            // A holder that recorded nothing (an older version): the field as found.
            (Some(2), None, s(2)),
            (Some(-3), None, s(0)),
            (None, Some("40"), s(40)),
            (None, None, s(0)),
        ];
        for (spec, recorded, want) in table {
            assert_eq!(
                holder_duration(&lease(spec, recorded), &keys),
                want,
                "{spec:?} {recorded:?}"
            );
        }
    }

    #[test]
    fn the_holder_writes_its_own_duration_over_an_edited_one() {
        let cfg = LeaseConfig::default().with_duration(Duration::from_secs(40));
        let keys = AnnotationKeys::default();
        let written = with_holder_duration(lease(Some(2), Some("2")), &cfg);
        let spec = written.spec.as_ref().unwrap();
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(
            written.metadata.annotations.as_ref().unwrap()[&keys.duration],
            "40"
        );
        assert_eq!(holder_duration(&written, &keys), Duration::from_secs(40));
    }

    #[test]
    fn max_hold_the_holder_writes_its_own_limit_and_removes_a_previous_ones() {
        let keys = AnnotationKeys::default();
        let cfg = LeaseConfig::default().with_max_hold(Some(Duration::from_hours(2)));
        let written = with_holder_duration(lease(Some(60), None), &cfg);
        let annotations = written.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[&keys.max_hold], "2h");
        // A holder without a limit does not inherit the previous holder's.
        let unlimited = with_holder_duration(written, &LeaseConfig::default());
        let annotations = unlimited.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(&keys.max_hold), "{annotations:?}");
        assert_eq!(annotations[&keys.duration], "60");
    }

    #[test]
    fn max_hold_values_read_back_as_written_and_nonsense_limits_nothing() {
        for d in [
            Duration::from_hours(2),
            Duration::from_secs(90),
            Duration::from_millis(1500),
        ] {
            assert_eq!(parse_max_hold(&format_max_hold(d)), Some(d), "{d:?}");
        }
        assert_eq!(format_max_hold(Duration::from_hours(2)), "2h");
        for bad in ["", "0", "0s", "abc", "-1h", "2 parsecs"] {
            assert_eq!(parse_max_hold(bad), None, "{bad:?}");
        }
    }
}
