//! SIGINT/SIGTERM: the first stops new work and lets the command release what it holds, in
//! order; a second exits at once and leaves the fence report to tell what is held.
//!
//! Reads before anything is held (the preflight and the targets) run under
//! [`Interrupt::cancel`]: a signal stops them at once, and the run exits 130 with nothing
//! changed. Work that must not be dropped half-way (the Lease create may land after the request
//! was abandoned) runs under [`Interrupt::grace`]: a signal gives it [`GRACE`] to finish, so a
//! hung API server cannot keep a signalled run alive for the client's read timeout (minutes),
//! and a run that gives up says it may hold the Lease.

use std::future::Future;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::exit;
use crate::failure::Failure;

/// How long work under [`Interrupt::grace`] may still take after a signal.
pub const GRACE: Duration = Duration::from_secs(5);

/// Resolves once the first signal arrived.
#[derive(Debug, Clone)]
pub struct Interrupt(watch::Receiver<bool>);

impl Interrupt {
    /// Installs the handlers. Must be called inside the runtime.
    pub fn install() -> std::io::Result<Self> {
        let (tx, rx) = watch::channel(false);
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        tokio::spawn(async move {
            tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
            eprintln!("interrupted: releasing what this run holds (a second signal exits at once)");
            let _ = tx.send(true);
            tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
            eprintln!("second signal: exiting now; `flux-handoff fences` lists what is still held");
            std::process::exit(i32::from(exit::INTERRUPTED));
        });
        Ok(Self(rx))
    }

    /// Waits for the first signal.
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|fired| *fired).await;
    }

    /// Runs `work` to its end, unless a signal comes and `work` then takes longer than
    /// [`GRACE`]: `None` (it was dropped; what it may have written is unknown).
    ///
    /// # Caveats
    /// `work` finishing within the grace is returned as if no signal came; the caller's next
    /// interruptible step sees the signal (it stays fired).
    pub async fn grace<T>(&mut self, work: impl Future<Output = T>) -> Option<T> {
        self.grace_for(GRACE, work).await
    }

    /// Runs `work` unless a signal comes first: `None` when it did (`work` is dropped). Only
    /// for work that writes nothing.
    pub async fn cancel<T>(&mut self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = work => Some(r),
            () = self.wait() => None,
        }
    }

    async fn grace_for<T>(&mut self, grace: Duration, work: impl Future<Output = T>) -> Option<T> {
        let mut work = std::pin::pin!(work);
        tokio::select! {
            r = &mut work => return Some(r),
            () = self.wait() => {}
        }
        tokio::time::timeout(grace, work).await.ok()
    }
}

/// The failure of a session start stopped by a signal before anything was written.
#[must_use]
pub fn stopped_before_start() -> Failure {
    Failure::new(
        exit::INTERRUPTED,
        "interrupted before anything was taken: nothing was changed",
    )
}

/// The failure of a session start cut short by a signal: the Lease create may have landed, so
/// it is reported as possibly held (exit 7), naming the holder to look for.
#[must_use]
pub fn start_cut_short(holder: &flux_fence::Holder) -> Failure {
    Failure::new(
        exit::CLEANUP,
        format!(
            "interrupted while starting, and the API server did not answer within {}s: the \
             Lease may be held by {holder} until it expires; `flux-handoff fences` shows it",
            GRACE.as_secs()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired() -> Interrupt {
        let (tx, rx) = watch::channel(false);
        tx.send_replace(true);
        // The receiver keeps the last value after the sender is gone.
        Interrupt(rx)
    }

    /// Work that takes `d`, then answers 7.
    async fn slow(d: Duration) -> u8 {
        tokio::time::sleep(d).await;
        7
    }

    #[tokio::test]
    async fn work_that_ends_within_the_grace_after_a_signal_is_returned() {
        let r = fired()
            .grace_for(Duration::from_secs(30), slow(Duration::from_millis(10)))
            .await;
        assert_eq!(r, Some(7));
    }

    #[tokio::test]
    async fn work_that_outlasts_the_grace_after_a_signal_is_dropped() {
        let r = fired()
            .grace_for(Duration::from_millis(10), slow(Duration::from_mins(5)))
            .await;
        assert_eq!(r, None);
    }

    #[tokio::test]
    async fn a_signal_stops_cancellable_work_at_once_and_without_one_it_runs_to_its_end() {
        let r = fired().cancel(slow(Duration::from_mins(5))).await;
        assert_eq!(r, None);
        let (_tx, rx) = watch::channel(false);
        let r = Interrupt(rx).cancel(slow(Duration::from_millis(20))).await;
        assert_eq!(r, Some(7));
    }

    #[tokio::test]
    async fn without_a_signal_work_runs_past_the_grace_to_its_end() {
        let (_tx, rx) = watch::channel(false);
        let r = Interrupt(rx)
            .grace_for(Duration::from_millis(1), slow(Duration::from_millis(200)))
            .await;
        assert_eq!(r, Some(7));
    }
}
