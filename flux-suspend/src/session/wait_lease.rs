//! A bounded wait for the Lease (`--wait-lease`): two runs that overlap (a merge queue
//! building two groups, a manual deploy during a queued one) run one after the other instead
//! of the second being refused at once.
//!
//! [`Session::start_waiting`] reads the Lease; while a live holder has it, it watches the
//! Lease (each watch bounded by the report interval, then a check read), reports who holds it
//! and since when about every [`LeaseWait::every`], and starts the session — which takes the
//! Lease by compare-and-swap as always — the moment it is free. It never takes over a held
//! Lease: it only ever starts a session, whose acquire refuses a held one. A parked pause
//! (`flux-handoff pause`) is not waited for: it lasts until someone resumes it, so the wait is
//! refused at once with the resume command. What to do on each read is [`decide_wait`].

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, WatchEvent, WatchParams};

use super::{Session, SessionError, SessionOptions};
use crate::cancel::Cancel;
use flux_fence::Holder;

/// How long to wait for the Lease and how often to say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseWait {
    /// The whole wait; zero refuses at once (no wait).
    pub budget: Duration,
    /// How often a wait that goes on is reported.
    pub every: Duration,
}

impl LeaseWait {
    /// A wait of `budget`, reported every 10 s.
    #[must_use]
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            every: Duration::from_secs(10),
        }
    }
}

/// A wait that goes on: who holds the Lease, since when, and how long we waited.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseWaiting {
    /// The Lease, `namespace/name`.
    pub lease: String,
    /// Its holder.
    pub holder: String,
    /// Its `acquireTime`, when set.
    pub since: Option<Timestamp>,
    /// How long this run has waited.
    pub waited: Duration,
    /// The budget of the wait.
    pub budget: Duration,
}

impl LeaseWaiting {
    /// One line for people, e.g. `waiting for lease ns/l: held by gh1.1-abc since
    /// 2026-12-01T20:00:00Z (waited 10s of 2m)`.
    #[must_use]
    pub fn line(&self) -> String {
        let since = self
            .since
            .map(|t| format!(" since {}", t.strftime("%Y-%m-%dT%H:%M:%SZ")))
            .unwrap_or_default();
        format!(
            "waiting for lease {}: held by {}{since} (waited {} of {})",
            self.lease,
            self.holder,
            humantime::format_duration(Duration::from_secs(self.waited.as_secs())),
            humantime::format_duration(self.budget),
        )
    }
}

/// What to do with the Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitDecision {
    /// Absent, free, ours, or held by a holder that looks gone (expired): start the session,
    /// which takes it or refuses as without a wait.
    Start,
    /// A live holder has it and the budget is not spent: wait.
    Wait {
        /// The holder.
        holder: String,
        /// Its `acquireTime`.
        since: Option<Timestamp>,
    },
    /// A parked pause holds it: refuse at once (it lasts until resumed).
    Parked {
        /// The holder that parked it.
        holder: String,
    },
    /// A live holder still has it and the budget is spent.
    GiveUp {
        /// The holder.
        holder: String,
        /// Its `acquireTime`.
        since: Option<Timestamp>,
    },
}

/// The decision on one read of the Lease: `me` is this run's holder, `parked_key` the
/// annotation a parked pause carries, `spent` whether the wait's budget is used up.
#[must_use]
pub fn decide_wait(
    read: Option<&KubeLease>,
    me: &Holder,
    parked_key: &str,
    now: Timestamp,
    spent: bool,
) -> WaitDecision {
    let Some(lease) = read else {
        return WaitDecision::Start;
    };
    let Some(spec) = lease.spec.as_ref() else {
        return WaitDecision::Start;
    };
    let holder = match spec.holder_identity.as_deref() {
        Some(h) if !h.is_empty() && h != me.as_str() => h.to_string(),
        _ => return WaitDecision::Start,
    };
    let parked = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(parked_key))
        .is_some_and(|p| *p == holder);
    if parked {
        return WaitDecision::Parked { holder };
    }
    if flux_fence::lease_decide::is_expired(spec, now) {
        // Not a live holder: the session refuses it as before (`fences recover` proves it
        // gone); waiting would only delay that answer.
        return WaitDecision::Start;
    }
    let since = spec.acquire_time.as_ref().map(|t| t.0);
    if spent {
        WaitDecision::GiveUp { holder, since }
    } else {
        WaitDecision::Wait { holder, since }
    }
}

impl Session {
    /// [`Session::start`], waiting up to `wait.budget` while a live holder has the Lease
    /// (see the module). `waiting` gets a report about every `wait.every`. With a zero budget
    /// this is `Session::start`.
    ///
    /// # Errors
    ///
    /// As [`Session::start`]; a parked pause is [`SessionError::Refused`] at once (with the
    /// resume command), a holder that keeps the Lease past the budget is
    /// [`SessionError::Refused`] naming it. Nothing was changed in either case.
    pub async fn start_waiting(
        client: Client,
        mut opts: SessionOptions,
        cancel: Cancel,
        wait: LeaseWait,
        mut waiting: impl FnMut(&LeaseWaiting),
    ) -> Result<Self, SessionError> {
        if wait.budget.is_zero() {
            return Self::start(client, opts, cancel).await;
        }
        opts.validate()?;
        // One holder across attempts: a Lease it already holds is its own.
        let me = opts.holder.clone().unwrap_or_else(Holder::generate);
        opts.holder = Some(me.clone());
        let api: Api<KubeLease> = Api::namespaced(client.clone(), &opts.lease.namespace);
        let lease = opts.lease.to_string();
        let started = Instant::now();
        let mut said: Option<Instant> = None;
        let stopped = || SessionError::Cancelled {
            during: "while waiting for the lease: nothing was changed".into(),
            changed: false,
        };
        loop {
            let read = cancel
                .unless_stopped(api.get_opt(&opts.lease.name))
                .await
                .ok_or_else(stopped)?;
            // A failed read is the session's to report: it reads the Lease again.
            let Ok(read) = read else {
                return Self::start(client, opts, cancel).await;
            };
            let spent = started.elapsed() >= wait.budget;
            let decision = decide_wait(
                read.as_ref(),
                &me,
                &opts.keys.parked,
                Timestamp::now(),
                spent,
            );
            match decision {
                WaitDecision::Start => {
                    match Self::start(client.clone(), opts.clone(), cancel.clone()).await {
                        // Another waiter took it first: nothing was changed, wait again.
                        Err(SessionError::LeaseHeld { expired: false, .. })
                            if started.elapsed() < wait.budget => {}
                        r => return r,
                    }
                }
                WaitDecision::Parked { holder } => {
                    let default = flux_fence::LeaseConfig::default();
                    let flag = if opts.lease.namespace == default.namespace
                        && opts.lease.name == default.name
                    {
                        String::new()
                    } else {
                        format!(" --lease {lease}")
                    };
                    return Err(SessionError::Refused {
                        object: format!("lease {lease}"),
                        why: super::Refusal::LeaseParked {
                            holder,
                            lease_flag: flag,
                        },
                    });
                }
                WaitDecision::GiveUp { holder, since } => {
                    let since = since.map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
                    return Err(SessionError::Refused {
                        object: format!("lease {lease}"),
                        why: super::Refusal::LeaseStillHeld {
                            holder,
                            since,
                            waited: wait.budget,
                        },
                    });
                }
                WaitDecision::Wait { holder, since } => {
                    if said.is_none_or(|t| t.elapsed() >= wait.every) {
                        said = Some(Instant::now());
                        waiting(&LeaseWaiting {
                            lease: lease.clone(),
                            holder,
                            since,
                            waited: started.elapsed(),
                            budget: wait.budget,
                        });
                    }
                    let left = wait.budget.saturating_sub(started.elapsed());
                    let slice = left.min(wait.every).max(Duration::from_secs(1));
                    let version = read
                        .and_then(|l| l.metadata.resource_version)
                        .unwrap_or_default();
                    cancel
                        .unless_stopped(changed(&api, &opts.lease.name, &version, slice))
                        .await
                        .ok_or_else(stopped)?;
                }
            }
        }
    }
}

/// Returns when the Lease changed after `version` (a watch event), or after `slice` at the
/// latest; the caller reads it again either way. A watch that cannot be opened waits out a
/// short slice instead (the caller's read is the check).
async fn changed(api: &Api<KubeLease>, name: &str, version: &str, slice: Duration) {
    let secs = u32::try_from(slice.as_secs()).unwrap_or(u32::MAX).max(1);
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(secs);
    let Ok(stream) = api.watch(&params, version).await else {
        tokio::time::sleep(slice.min(Duration::from_secs(1))).await;
        return;
    };
    let mut stream = std::pin::pin!(stream);
    let _ = tokio::time::timeout(slice + Duration::from_secs(1), async {
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Bookmark(_)) => {}
                _ => return,
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::api::ObjectMeta;

    use super::*;

    const PARKED: &str = "flux-handoff.io/parked";

    fn lease(holder: Option<&str>, parked: Option<&str>, renewed_ago: i64) -> KubeLease {
        let now = Timestamp::now();
        let renewed = now - k8s_openapi::jiff::SignedDuration::from_secs(renewed_ago);
        KubeLease {
            metadata: ObjectMeta {
                annotations: parked.map(|p| [(PARKED.to_string(), p.to_string())].into()),
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
    fn each_read_of_the_lease_decides_the_wait() {
        let me: Holder = "gh1.1-aaaaaa".parse().unwrap();
        let other = "gh2.1-bbbbbb";
        let now = Timestamp::now();
        let since = |l: &KubeLease| l.spec.as_ref().unwrap().acquire_time.as_ref().map(|t| t.0);
        let live = lease(Some(other), None, 5);
        let table: Vec<(Option<KubeLease>, bool, WaitDecision)> = vec![
            (None, false, WaitDecision::Start),
            (Some(lease(None, None, 5)), false, WaitDecision::Start),
            (Some(lease(Some(""), None, 5)), true, WaitDecision::Start),
            (
                Some(lease(Some(me.as_str()), None, 5)),
                false,
                WaitDecision::Start,
            ),
            (
                Some(live.clone()),
                false,
                WaitDecision::Wait {
                    holder: other.into(),
                    since: since(&live),
                },
            ),
            (
                Some(live.clone()),
                true,
                WaitDecision::GiveUp {
                    holder: other.into(),
                    since: since(&live),
                },
            ),
            // Expired: not a live holder; the session refuses it as before.
            (
                Some(lease(Some(other), None, 600)),
                false,
                WaitDecision::Start,
            ),
            // Parked by its holder: never waited for, even with budget left.
            (
                Some(lease(Some(other), Some(other), 5)),
                false,
                WaitDecision::Parked {
                    holder: other.into(),
                },
            ),
            (
                Some(lease(Some(other), Some(other), 600)),
                false,
                WaitDecision::Parked {
                    holder: other.into(),
                },
            ),
            // A stale parked mark of someone else is not a parked pause of this holder.
            (
                Some(lease(Some(other), Some("gh3.1-cccccc"), 5)),
                false,
                WaitDecision::Wait {
                    holder: other.into(),
                    since: since(&live),
                },
            ),
        ];
        for (i, (read, spent, want)) in table.into_iter().enumerate() {
            let got = decide_wait(read.as_ref(), &me, PARKED, now, spent);
            // acquireTime differs per built lease: compare holder and kind.
            match (&got, &want) {
                (WaitDecision::Wait { holder: a, .. }, WaitDecision::Wait { holder: b, .. })
                | (
                    WaitDecision::GiveUp { holder: a, .. },
                    WaitDecision::GiveUp { holder: b, .. },
                ) => assert_eq!(a, b, "row {i}"),
                _ => assert_eq!(got, want, "row {i}"),
            }
        }
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
}
