//! Injectable time, so expiry logic is tested without waiting.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A source of the current time. One method, so a closure-backed impl is a few lines.
///
/// Meant to be implemented (tests inject a [`ManualClock`]-like clock). The contract: `now`
/// is cheap, never blocks and never fails; it need not be monotonic, but every expiry decision
/// reads it, so a clock far from the API server's makes a live Lease look expired or an
/// expired one live (the decisions never take a Lease on expiry alone, see
/// [`crate::lease`]). New methods, if any, come with default bodies.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to (tests, simulations). Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<Timestamp>>);

impl ManualClock {
    /// A clock standing at `at`.
    #[must_use]
    pub fn new(at: Timestamp) -> Self {
        Self(Arc::new(Mutex::new(at)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut t = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let by = SignedDuration::try_from(by).unwrap_or(SignedDuration::MAX);
        *t = t.saturating_add(by).unwrap_or(Timestamp::MAX);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
