//! A failed command: the exit code and one line for people. Expected refusals and timeouts
//! arrive here as values turned into codes; the message never carries a credential.

use flux_fence::FenceError;
use flux_suspend::handoff::SuspendError;

use crate::exit;

/// Why a command ends with a non-zero exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// The command to run next, printed as a `next: COMMAND` line of its own, for a message
    /// that must stay exactly as it is: a proof timeout's line is fixed counter names and
    /// counts only. Every other failure carries its next step in the message
    /// (`; next: COMMAND`, [`handoff_app::next::with_next`]) and leaves this `None`.
    pub next: Option<String>,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            next: None,
        }
    }

    /// Exit 2 with one line: an error's or a message's text.
    pub fn usage(message: impl std::fmt::Display) -> Self {
        Self::new(exit::USAGE, message.to_string())
    }
}

/// `error: cause: cause` on one line ([`flux_fence::one_line`]).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    flux_fence::one_line(e)
}

impl Failure {
    /// The exit code and line of a failed pause.
    pub fn from_suspend(e: &SuspendError) -> Self {
        if let SuspendError::ProofTimeout { .. } = e {
            // The timeout line is the whole message: fixed names and counts only.
            return Self::new(exit::TIMEOUT, e.to_string());
        }
        Self::new(exit::code(e.class()), chain(e))
    }

    /// The exit code and line of a failed fence or Lease operation.
    pub fn from_fence(e: &FenceError) -> Self {
        Self::new(exit::code(e.class()), chain(e))
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
