//! A failed command: the exit code and one line for people. Expected refusals and timeouts
//! arrive here as values turned into codes; the message never carries a credential.

use flux_fence::FenceError;
use flux_suspend::SuspendError;

use crate::exit;

/// Why a command ends with a non-zero exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(exit::USAGE, message)
    }
}

/// `error: cause: cause` on one line ([`flux_fence::one_line`]).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    flux_fence::one_line(e)
}

impl Failure {
    /// The exit code and line of a failed pause.
    pub fn from_suspend(e: &SuspendError) -> Self {
        let code = match e {
            // The timeout line is the whole message: fixed names and counts only.
            SuspendError::ProofTimeout { .. } => return Self::new(exit::TIMEOUT, e.to_string()),
            SuspendError::AckTimeout { .. }
            | SuspendError::RestartTimeout { .. }
            | SuspendError::QuiesceTimeout { .. } => exit::TIMEOUT,
            SuspendError::Fence { source, .. } => fence_code(source),
            SuspendError::Cancelled { .. } => exit::INTERRUPTED,
            _ => exit::KUBE_API,
        };
        Self::new(code, chain(e))
    }

    /// The exit code and line of a failed fence or Lease operation.
    pub fn from_fence(e: &FenceError) -> Self {
        Self::new(fence_code(e), chain(e))
    }
}

impl From<SuspendError> for Failure {
    fn from(e: SuspendError) -> Self {
        Self::from_suspend(&e)
    }
}

impl From<FenceError> for Failure {
    fn from(e: FenceError) -> Self {
        Self::from_fence(&e)
    }
}

fn fence_code(e: &FenceError) -> u8 {
    match e {
        // Not renewed in time: the API server could not be reached (nobody else took it).
        FenceError::LeaseLost {
            reason: flux_fence::LossReason::Stale,
        } => exit::KUBE_API,
        FenceError::LeaseLost { .. } => exit::REFUSED,
        FenceError::InvalidMark { .. } | FenceError::InvalidReason { .. } => exit::USAGE,
        _ => exit::KUBE_API,
    }
}

#[cfg(test)]
mod tests {
    use super::{chain, fence_code};
    use crate::exit;
    use flux_fence::{FenceError, LossReason};

    #[test]
    fn a_lease_not_renewed_in_time_is_an_api_failure_and_one_taken_over_is_a_refusal() {
        let lost = |reason| FenceError::LeaseLost { reason };
        assert_eq!(fence_code(&lost(LossReason::Stale)), exit::KUBE_API);
        for r in [
            LossReason::Deleted,
            LossReason::EpochChanged,
            LossReason::HolderChanged {
                holder: Some("other".into()),
            },
        ] {
            assert_eq!(fence_code(&lost(r)), exit::REFUSED);
        }
    }

    #[test]
    fn a_wrapped_api_error_keeps_the_outer_step_and_the_plain_answer() {
        let status = kube::core::Status::failure("boom", "InternalError")
            .with_code(500)
            .boxed();
        let e = flux_suspend::SuspendError::Kube {
            step: "reading the controller Deployment",
            source: kube::Error::Api(status),
        };
        let line = chain(&e);
        assert!(
            line.starts_with("reading the controller Deployment"),
            "{line}"
        );
        assert!(line.ends_with("boom (HTTP 500 InternalError)"), "{line}");
        assert!(!line.contains("Status {"), "{line}");
    }
}
