//! Cancellation as an input: *stop* ends the current phase and releases in order; *hurry* (a
//! second request, e.g. a second signal) also skips every remaining wait — but what is held is
//! still released.

use tokio_util::sync::CancellationToken;

/// Two levels of cancellation a caller hands to a [`crate::Session`] (and to
/// [`crate::handoff::Handoff::with_cancel`]).
///
/// - [`Cancel::stop`]: stop the current phase at its next safe point (a wait is abandoned, a
///   write in flight is let finish, so its outcome is known), then release in order.
/// - [`Cancel::hurry`]: as `stop`, and skip every remaining wait: a write in flight is
///   abandoned (cleanup re-reads the object to settle it), the work is told to stop at once.
///   Releases are still sent.
///
/// Clones share state. `hurry` implies `stop`.
///
/// ```
/// let cancel = flux_suspend::Cancel::new();
/// let for_signals = cancel.clone();
/// for_signals.stop();
/// assert!(cancel.is_stopped() && !cancel.is_hurried());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    stop: CancellationToken,
    hurry: CancellationToken,
}

impl Cancel {
    /// Not cancelled.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A cancel that stops when `token` is cancelled (e.g. an application's own shutdown
    /// token); hurry stays separate.
    #[must_use]
    pub fn from_token(token: CancellationToken) -> Self {
        Self {
            stop: token,
            hurry: CancellationToken::new(),
        }
    }

    /// Asks the session to stop and release.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Asks the session to stop, skip every wait, and release now.
    pub fn hurry(&self) {
        self.stop.cancel();
        self.hurry.cancel();
    }

    /// Whether [`Cancel::stop`] (or `hurry`) was called.
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Whether [`Cancel::hurry`] was called.
    #[must_use]
    pub fn is_hurried(&self) -> bool {
        self.hurry.is_cancelled()
    }

    /// Resolves once stopped.
    pub async fn stopped(&self) {
        self.stop.cancelled().await;
    }

    /// Resolves once hurried.
    pub async fn hurried(&self) {
        self.hurry.cancelled().await;
    }

    /// A cancel that is stopped and hurried with this one, and can also be stopped on its own
    /// (the session stops the work with it when the Lease is lost).
    #[must_use]
    pub fn child(&self) -> Self {
        Self {
            stop: self.stop.child_token(),
            hurry: self.hurry.child_token(),
        }
    }

    /// The stop token, for code that takes a plain `CancellationToken`.
    #[must_use]
    pub fn token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Runs a read-only wait unless stopped first: `None` when stopped (the wait is dropped).
    pub async fn unless_stopped<T>(&self, wait: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = wait => Some(r),
            () = self.stop.cancelled() => None,
        }
    }

    /// Runs work that should finish (a write, a short batch of writes): once stopped it gets
    /// `grace` more, and a hurry ends it at once. `None` when it was abandoned (what it did is
    /// unknown: re-read before trusting anything it wrote).
    pub async fn settle<T>(
        &self,
        grace: std::time::Duration,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        let mut work = std::pin::pin!(work);
        tokio::select! {
            r = &mut work => return Some(r),
            () = self.stop.cancelled() => {}
        }
        tokio::select! {
            r = tokio::time::timeout(grace, &mut work) => r.ok(),
            () = self.hurry.cancelled() => None,
        }
    }

    /// Runs work that should finish (a write) unless hurried first: `None` when hurried.
    pub async fn unless_hurried<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = work => Some(r),
            () = self.hurry.cancelled() => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cancel;
    use std::time::Duration;

    #[tokio::test]
    async fn a_stop_drops_a_wait_but_lets_a_write_finish_and_hurry_drops_both() {
        let c = Cancel::new();
        c.stop();
        let slow = || tokio::time::sleep(Duration::from_mins(10));
        assert_eq!(c.unless_stopped(slow()).await, None);
        let write = async { 7 };
        assert_eq!(c.unless_hurried(write).await, Some(7));
        c.hurry();
        assert_eq!(c.unless_hurried(slow()).await, None);
    }

    #[test]
    fn a_child_follows_its_parent_but_not_the_other_way() {
        let parent = Cancel::new();
        let child = parent.child();
        child.stop();
        assert!(!parent.is_stopped());
        parent.hurry();
        let other = parent.child();
        assert!(other.is_stopped() && other.is_hurried());
    }
}
