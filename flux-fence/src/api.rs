//! How the I/O layer reads the API server's answers: a small classification of `kube::Error`
//! and the naming of resources in error messages.

use kube::api::{ApiResource, PatchParams, PostParams};

use crate::FenceError;

/// The Lease's resource, as error messages name it.
pub(crate) const LEASE_RESOURCE: &str = "leases.coordination.k8s.io";

/// How many read-decide-write rounds an acquire or release makes before it reports contention.
pub(crate) const MAX_ATTEMPTS: usize = 4;

/// How long a read that fails transiently is sent again ([`get_retrying`], `Fencer::read`):
/// an API server restart takes seconds.
pub const READ_RETRY_BUDGET: std::time::Duration = std::time::Duration::from_secs(30);

/// The field manager every write of flux-handoff names (fences, releases, the Lease, Events,
/// the controller restart, re-fences, reconcile requests, Secrets), so `managedFields` and
/// Flux's server-side apply tell our writes from everyone else's.
pub const FIELD_MANAGER: &str = "flux-handoff";

/// `PatchParams` naming [`FIELD_MANAGER`]: use it for every patch.
#[must_use]
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// `PostParams` naming [`FIELD_MANAGER`]: use it for every create and update.
#[must_use]
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// What a failed call means for the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallFailure {
    /// 409: a resourceVersion precondition failed or the object already exists.
    Conflict,
    /// 422: a JSON Patch `test` failed (or the patch is invalid for the object).
    Invalid,
    /// 404.
    NotFound,
    /// 403.
    Forbidden,
    /// The request may or may not have been applied (transport error, 5xx, timeout).
    Unknown,
    /// Anything else: the request was answered and not applied.
    Other,
}

pub(crate) fn classify(err: &kube::Error) -> CallFailure {
    match err {
        kube::Error::Api(s) => match s.code {
            409 => CallFailure::Conflict,
            422 => CallFailure::Invalid,
            404 => CallFailure::NotFound,
            403 => CallFailure::Forbidden,
            c if c >= 500 => CallFailure::Unknown,
            _ => CallFailure::Other,
        },
        kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::ReadEvents(_)
        | kube::Error::SerdeError(_)
        | kube::Error::LinesCodecMaxLineLengthExceeded
        | kube::Error::FromUtf8(_) => CallFailure::Unknown,
        _ => CallFailure::Other,
    }
}

/// Whether a failed READ may succeed if sent again: the server could not be reached or the
/// connection broke (an API server restart), or it answered 429 or 5xx. Reads change nothing, so
/// sending one again is safe; writes are never retried on this (they may have been applied).
#[must_use]
pub fn transient_read(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The pause before read attempt `n + 1` (after `n` failed ones): 100 ms doubling, at most 2 s.
#[must_use]
pub fn read_backoff(n: u32) -> std::time::Duration {
    std::time::Duration::from_millis(100u64.saturating_mul(1 << n.min(5)).min(2_000))
}

/// `api.get_opt(name)`, sent again while it fails transiently (connection refused or broken,
/// 429, 5xx: an API server restarting, a gateway in front of it) with a backoff of 100 ms
/// doubling to 2 s, for as long as `budget` lasts ([`READ_RETRY_BUDGET`] is the one every
/// read of this workspace uses); `what` names the object in the warning logged per retry. The
/// last error is returned as is. Bounded by `budget` alone: a caller that must end at a
/// signal races it against its cancel.
///
/// # Errors
/// The last [`kube::Error`], once it is not transient or the budget is spent.
pub async fn get_retrying<K>(
    api: &kube::Api<K>,
    name: &str,
    what: &(dyn std::fmt::Display + Sync),
    budget: std::time::Duration,
) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + budget;
    let mut failed = 0;
    loop {
        match api.get_opt(name).await {
            Err(e)
                if transient_read(&e)
                    && tokio::time::Instant::now() + read_backoff(failed) < deadline =>
            {
                tracing::warn!(object = %what, error = %e, "read failed; reading again");
                tokio::time::sleep(read_backoff(failed)).await;
                failed += 1;
            }
            other => return other,
        }
    }
}

/// `plural.group`, or `plural` for the core group.
pub(crate) fn resource_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// Wraps a call failure into the crate error, naming verb, resource and target.
pub(crate) fn error(
    verb: &'static str,
    resource: String,
    target: String,
    err: kube::Error,
) -> FenceError {
    if classify(&err) == CallFailure::Forbidden {
        FenceError::Forbidden {
            verb,
            resource,
            target,
            source: Box::new(err),
        }
    } else {
        FenceError::Api {
            verb,
            resource,
            target,
            source: Box::new(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "y")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn refused_connections_and_overload_are_transient_for_reads_and_answers_are_not() {
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(transient_read(&refused));
        for code in [429, 500, 502, 503, 504] {
            assert!(transient_read(&status(code)), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 422] {
            assert!(!transient_read(&status(code)), "{code}");
        }
        let garbled = kube::Error::SerdeError(serde_json::from_str::<u8>("x").unwrap_err());
        assert!(
            !transient_read(&garbled),
            "a body that does not parse will not heal"
        );
    }

    #[test]
    fn read_backoff_doubles_from_100ms_and_stops_at_2s() {
        let ms: Vec<u128> = (0..8).map(|n| read_backoff(n).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
    }
}
