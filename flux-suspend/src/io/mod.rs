//! The thin async layer: reads, asks the pure core, writes. No domain decision lives here.

mod ack;
mod prove;
mod quiesce;
mod recheck;
mod refence;
mod restart;
mod scaled;

pub use ack::{WATCH_CHECK, wait_acknowledged, wait_acknowledged_since};
pub use prove::{ProofTarget, prove_stable_pause};
pub use quiesce::wait_quiet;
pub use recheck::{PauseBroken, PauseCheck};
pub use refence::refence;
pub use restart::{
    ControllerRef, RESTARTED_AT, RestartSnapshot, execute_restart, restart_controller,
    snapshot_controller,
};
pub use scaled::wait_scaled;

use std::time::Duration;

/// How often to read and how long to keep trying. The deadline belongs to the caller. Build it
/// with [`Timing::new`]; it may grow fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timing {
    /// Pause between two reads of the same thing.
    pub interval: Duration,
    /// Give up after this long.
    pub timeout: Duration,
}

impl Timing {
    /// Reads every `interval`, gives up after `timeout`.
    #[must_use]
    pub fn new(interval: Duration, timeout: Duration) -> Self {
        Self { interval, timeout }
    }
}

/// Polls `step` every `timing.interval` until it returns `Some`, or returns `None` once the
/// next poll would pass the deadline. A fixed interval: the stable-pause proof uses it, because
/// its passes must be spaced by the interval.
pub async fn poll<T, F, Fut>(timing: Timing, mut step: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timing.timeout;
    loop {
        if let Some(v) = step().await {
            return Some(v);
        }
        if tokio::time::Instant::now() + timing.interval > deadline {
            return None;
        }
        tokio::time::sleep(timing.interval).await;
    }
}

/// First pause of [`poll_soon`].
const SOON_START: Duration = Duration::from_millis(10);

/// Polls `step` like [`poll`], but starts with a short pause that doubles up to
/// `timing.interval`. For waits on something that usually happens within milliseconds (an
/// acknowledgement by a controller that is idle, a rollout step), so a wait does not cost a
/// whole interval when the answer is already there; a slow answer is still polled at the
/// interval.
pub async fn poll_soon<T, F, Fut>(timing: Timing, mut step: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timing.timeout;
    let mut pause = SOON_START.min(timing.interval);
    loop {
        if let Some(v) = step().await {
            return Some(v);
        }
        if tokio::time::Instant::now() + pause > deadline {
            return None;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(timing.interval);
    }
}

/// Locks a mutex that no holder can poison in a way that matters here (the data is a plain
/// value overwritten on each poll).
/// The longest single watch request (`timeoutSeconds`); a longer wait watches again from the
/// last version seen. Give the client a read timeout above it (handoff-app's kubeconfig client
/// reads for 20 s), so a quiet watch is ended by the server and made again, and a stalled one
/// is bounded by the read timeout.
pub const WATCH_SLICE: Duration = Duration::from_secs(10);

pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
