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

/// `error: cause: cause` on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line.replace('\n', " ")
}

impl From<SuspendError> for Failure {
    fn from(e: SuspendError) -> Self {
        let code = match &e {
            // The timeout line is the whole message: fixed names and counts only.
            SuspendError::ProofTimeout { .. } => return Self::new(exit::TIMEOUT, e.to_string()),
            SuspendError::AckTimeout { .. }
            | SuspendError::RestartTimeout { .. }
            | SuspendError::QuiesceTimeout { .. } => exit::TIMEOUT,
            SuspendError::Fence { source, .. } => fence_code(source),
            _ => exit::KUBE_API,
        };
        Self::new(code, chain(&e))
    }
}

impl From<FenceError> for Failure {
    fn from(e: FenceError) -> Self {
        Self::new(fence_code(&e), chain(&e))
    }
}

fn fence_code(e: &FenceError) -> u8 {
    match e {
        FenceError::LeaseLost { .. } => exit::REFUSED,
        FenceError::InvalidMark { .. } | FenceError::InvalidReason { .. } => exit::USAGE,
        _ => exit::KUBE_API,
    }
}
