//! The refusal of a Lease another holder has, judged on one read of it. A parked pause (a
//! person's `pause`) is named — its holder, the reason recorded on its fences (`--reason`),
//! since when — and only its resume ends it: it is never called expired, and never handed to
//! `fences recover`, which keeps it. Any other holder is [`SessionError::LeaseHeld`],
//! `expired` only when that read shows it unparked (what `fences recover` acts on,
//! [`flux_fence::recovery::what_ends`]).
//!
//! The decisions are pure ([`judge_held`], [`parked_refusal`]); the I/O reads the Lease and
//! the members its chain record names, nothing else, and never writes.

use std::time::Duration;

use flux_fence::discover::FoundState;
use flux_fence::lease::{ChainRecord, read_members};
use flux_fence::{AnnotationKeys, LeaseConfig};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use super::{ParkedPause, Refusal, SessionError, SessionOptions, Subject};

/// What a read of the Lease says of a holder that refused us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Judged {
    /// The read shows `holder` parked it: a deliberate pause.
    Parked,
    /// Anything else; `expired` only when the read shows `holder` holding it unparked and the
    /// acquire found it expired.
    Held { expired: bool },
}

/// Judges a refusal by `holder` (`expired`: as the acquire found it) on `read`, the Lease as
/// read after it (`None`: absent, or the read failed: nothing is known, so nothing is called
/// expired).
#[must_use]
pub(crate) fn judge_held(
    read: Option<&KubeLease>,
    holder: &str,
    expired: bool,
    keys: &AnnotationKeys,
) -> Judged {
    let Some(lease) = read else {
        return Judged::Held { expired: false };
    };
    let held_by = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref());
    if held_by != Some(holder) {
        return Judged::Held { expired: false };
    }
    if parked_by(lease, keys) == Some(holder) {
        Judged::Parked
    } else {
        Judged::Held { expired }
    }
}

/// The holder that parked `lease`, when it is its current holder.
fn parked_by<'a>(lease: &'a KubeLease, keys: &AnnotationKeys) -> Option<&'a str> {
    let holder = lease.spec.as_ref()?.holder_identity.as_deref()?;
    let mark = lease.metadata.annotations.as_ref()?.get(&keys.parked)?;
    (!holder.is_empty() && mark == holder).then_some(holder)
}

/// A fence as read, for [`parked_refusal`]: its holder, since when, and its reason.
pub(crate) type FenceFacts<'a> = (&'a str, Timestamp, Option<&'a str>);

/// The refusal naming the parked pause on `lease` (read under `cfg`): its holder, the reason
/// recorded on its fences among `fences` (as read), since when it holds the Lease (its
/// `acquireTime`, else its oldest fence) and how long that is at `now`. `None` when the Lease
/// is not parked by its holder.
#[must_use]
pub(crate) fn parked_refusal(
    lease: &KubeLease,
    cfg: &LeaseConfig,
    keys: &AnnotationKeys,
    fences: &[FenceFacts<'_>],
    now: Timestamp,
) -> Option<Refusal> {
    let holder = parked_by(lease, keys)?;
    let ours = fences.iter().filter(|(h, ..)| *h == holder);
    let reason = ours.clone().find_map(|(_, _, r)| *r);
    let oldest = ours.map(|(_, since, _)| *since).min();
    let acquired = lease
        .spec
        .as_ref()
        .and_then(|s| s.acquire_time.as_ref())
        .map(|t| t.0);
    let since = acquired.or(oldest);
    Some(Refusal::LeaseParked {
        holder: holder.to_string(),
        lease: named(cfg),
        pause: Box::new(ParkedPause {
            reason: reason.map(one_line),
            since: since.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            age: since.map(|t| Duration::try_from(now.duration_since(t)).unwrap_or_default()),
        }),
    })
}

/// `cfg` as `namespace/name` when it is not the default Lease.
fn named(cfg: &LeaseConfig) -> Option<String> {
    let default = LeaseConfig::default();
    (cfg.namespace != default.namespace || cfg.name != default.name).then(|| cfg.to_string())
}

/// The refusal of a parked pause of `holder` when nothing more could be read of it.
pub(crate) fn parked_unread(opts: &SessionOptions, holder: String) -> SessionError {
    SessionError::Refused {
        object: Subject::lease(&opts.lease),
        why: Refusal::LeaseParked {
            holder,
            lease: named(&opts.lease),
            pause: Box::default(),
        },
    }
}

/// `s` on one line: each control character (a newline) as its escape.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The refusal of the Lease `lease` as read, when a holder other than `ours` parked it: the
/// members its chain record names are read for the pause's reason (a failed read leaves it
/// out).
pub(crate) async fn parked(
    client: &Client,
    opts: &SessionOptions,
    lease: &KubeLease,
    ours: Option<&str>,
) -> Option<SessionError> {
    let by = parked_by(lease, &opts.keys)?;
    if Some(by) == ours {
        return None;
    }
    let now = Timestamp::now();
    let record = ChainRecord::on_lease(lease, &opts.keys).ok().flatten();
    let members = match record {
        Some(r) => read_members(
            client,
            &opts.keys,
            &crate::object::recorded_kinds(),
            &r,
            now,
        )
        .await
        .map(|m| m.found)
        .unwrap_or_default(),
        None => Vec::new(),
    };
    let facts: Vec<FenceFacts<'_>> = members
        .iter()
        .filter_map(|f| match &f.state {
            FoundState::Fence {
                owner,
                since,
                reason,
                ..
            } => Some((owner.holder.as_str(), *since, reason.as_deref())),
            _ => None,
        })
        .collect();
    let why = parked_refusal(lease, &opts.lease, &opts.keys, &facts, now)?;
    Some(SessionError::Refused {
        object: Subject::lease(&opts.lease),
        why,
    })
}

/// The refusal of an acquire that found the Lease held by `holder` (`expired`: as it judged
/// it): the Lease is read once more, and a parked pause is named ([`parked`]).
pub(crate) async fn refusal(
    client: &Client,
    opts: &SessionOptions,
    holder: String,
    expired: bool,
) -> SessionError {
    let api: kube::Api<KubeLease> = kube::Api::namespaced(client.clone(), &opts.lease.namespace);
    let read = api.get_opt(&opts.lease.name).await.ok().flatten();
    let judged = judge_held(read.as_ref(), &holder, expired, &opts.keys);
    if let (Judged::Parked, Some(lease)) = (&judged, read.as_ref())
        && let Some(e) = parked(client, opts, lease, None).await
    {
        return e;
    }
    held(opts, holder, judged == Judged::Held { expired: true })
}

fn held(opts: &SessionOptions, holder: String, expired: bool) -> SessionError {
    SessionError::LeaseHeld {
        lease: opts.lease.to_string(),
        holder,
        expired,
    }
}

#[cfg(test)]
#[path = "held_tests.rs"]
mod tests;
