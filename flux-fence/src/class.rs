//! What kind of failure an error is: what a caller needs to decide its exit code or whether to
//! try again, the same for every error type of the workspace.

use crate::error::FenceError;
use crate::lease::config::LossReason;

/// The kind of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// Bad input (an option, a mark, a reason, a credential): fix it; nothing was touched.
    BadInput,
    /// The registry refused the credential or could not be reached.
    Registry,
    /// Someone else holds, moved or suspended what was needed; nothing was overwritten.
    Refused,
    /// A bounded wait did not settle.
    Timeout,
    /// A Kubernetes API call failed or was forbidden, an object is missing, or the Lease was
    /// lost while working.
    KubeApi,
    /// Something held could not be given back (or may still be held): list the fences.
    Cleanup,
    /// Someone broke the pause while the work ran (a fence removed or changed, a paused
    /// object deleted or recreated, `spec.suspend` set back to false): the work was stopped,
    /// nothing more was written, what is not ours any more was left as it is.
    PauseBroken,
    /// Stopped by the caller's cancellation, after releasing what was held.
    Cancelled,
    /// Everything held was handed back (fences, Lease, chain record), but a released object
    /// did not become Ready in time: a report about Flux, not something still held.
    NotReady,
    /// Something that should not fail did.
    Internal,
}

impl FenceError {
    /// The kind of this failure. A Lease that was not renewed in time (the API server could
    /// not be reached, nobody else took it), or whose holder fenced itself at its own
    /// deadline, is [`ErrorClass::KubeApi`]: what was taken before may still be held, so it
    /// is never the "nothing was changed" of a refusal. One taken over or deleted is
    /// [`ErrorClass::Refused`].
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::LeaseLost {
                reason: LossReason::Stale | LossReason::SelfFenced,
            } => ErrorClass::KubeApi,
            Self::LeaseLost { .. } | Self::ChainRecorded { .. } => ErrorClass::Refused,
            Self::InvalidMark { .. } | Self::InvalidReason { .. } => ErrorClass::BadInput,
            _ => ErrorClass::KubeApi,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_not_renewed_in_time_is_an_api_failure_and_one_taken_over_is_a_refusal() {
        let lost = |reason| FenceError::LeaseLost { reason };
        assert_eq!(lost(LossReason::Stale).class(), ErrorClass::KubeApi);
        // The soak: a self-fence while fencing exited 3, and the post step then did nothing.
        assert_eq!(lost(LossReason::SelfFenced).class(), ErrorClass::KubeApi);
        for r in [
            LossReason::Deleted,
            LossReason::EpochChanged,
            LossReason::HolderChanged {
                holder: Some("other".into()),
            },
        ] {
            assert_eq!(lost(r).class(), ErrorClass::Refused);
        }
    }
}
