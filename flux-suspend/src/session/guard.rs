//! The work's protected writes: [`Paused::write`] asserts the Lease and rechecks the pause
//! before it sends a write, so an embedder cannot forget either.

use std::future::Future;

use flux_fence::FenceError;

use super::Paused;
use crate::io::PauseBroken;

/// Why [`Paused::write`] did not give the write's value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteRefused<E> {
    /// The session is stopping (a signal, a lost Lease, a broken pause): the write was not
    /// sent. Return soon; the session releases what it holds.
    #[error("the session is stopping: the write was not sent")]
    Stopping,
    /// The Lease is not held any more (or could not be confirmed): the write was not sent.
    #[error("the write was not sent: {0}")]
    Lease(#[source] FenceError),
    /// The pause no longer holds (someone resumed, unfenced or deleted a member): the write
    /// was not sent.
    #[error("the write was not sent: {0}")]
    Broken(#[source] PauseBroken),
    /// The write itself failed.
    #[error("the write failed: {0}")]
    Failed(#[source] E),
}

impl Paused {
    /// Sends one write that relies on the pause, and only while the pause is ours: first the
    /// session must not be stopping, then the Lease is asserted (one renewal, shared with
    /// concurrent asserts) and every member read once ([`crate::io::PauseCheck::still_holds`]);
    /// only then is `write` polled. A future does nothing until polled, so
    /// `paused.write(api.patch(..))` sends nothing when a check fails.
    ///
    /// The checks and the write are not atomic: a person who resumes a member right after the
    /// recheck is seen by the session's watch, which stops the work and ends the session with
    /// [`crate::SessionError::PauseBroken`].
    ///
    /// # Errors
    /// [`WriteRefused`]: stopping, the Lease, the pause, or the write's own error.
    pub async fn write<T, E, F>(&self, write: F) -> Result<T, WriteRefused<E>>
    where
        F: Future<Output = Result<T, E>>,
    {
        if self.cancel.is_stopped() {
            return Err(WriteRefused::Stopping);
        }
        self.lease.assert().await.map_err(WriteRefused::Lease)?;
        self.check
            .still_holds()
            .await
            .map_err(WriteRefused::Broken)?;
        if self.cancel.is_stopped() {
            return Err(WriteRefused::Stopping);
        }
        write.await.map_err(WriteRefused::Failed)
    }
}
