//! Signals as [`Cancel`] requests, for a program that embeds a session: the first SIGINT or
//! SIGTERM *stops* (the current phase ends, the work is told to finish, everything is released
//! in order); a second one of either kind *hurries* (every remaining wait is skipped, the work
//! is dropped after [`crate::session::STOP_GRACE`]) but still releases. With
//! [`SignalOptions::parent_death`], the death of the process that started this one (SIGHUP,
//! asked of the kernel on Linux) hurries at once: a CI runner that cancelled a step by killing
//! its shell will kill what is left soon.
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! let cancel = flux_suspend::Cancel::new();
//! let mut seen = flux_suspend::signals::install(&cancel, Default::default())?;
//! // hand `cancel` to `Session::start`; print what arrived, if you like:
//! tokio::spawn(async move { while let Some(s) = seen.recv().await { eprintln!("{s}") } });
//! # Ok(()) }
//! ```
//!
//! Unix only (POSIX signals); elsewhere drive [`Cancel`] from the platform's own events.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::Cancel;

/// What to listen for besides SIGINT and SIGTERM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SignalOptions {
    /// Ask the kernel for SIGHUP when the parent process exits (Linux `PR_SET_PDEATHSIG`; a
    /// no-op elsewhere), and hurry on SIGHUP.
    pub parent_death: bool,
    /// Hurry on SIGHUP (a closed terminal, a killed parent) without asking the kernel for it.
    pub hangup: bool,
}

impl SignalOptions {
    /// With `on`, also the death of the parent process hurries (see the field).
    #[must_use]
    pub fn with_parent_death(mut self, on: bool) -> Self {
        self.parent_death = on;
        self
    }

    /// With `on`, SIGHUP hurries (see the field).
    #[must_use]
    pub fn with_hangup(mut self, on: bool) -> Self {
        self.hangup = on;
        self
    }
}

/// What a signal did, in the order they arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Received {
    /// The first SIGINT/SIGTERM: the session was stopped.
    Stopped,
    /// A second SIGINT/SIGTERM: the session was hurried.
    Hurried,
    /// SIGHUP (the parent is gone): the session was hurried.
    ParentGone,
    /// A later signal (the count so far, from 3): nothing more to ask of the session; a
    /// program may exit at once (what is still held is then listed by `flux-handoff fences`).
    Again(u32),
}

impl std::fmt::Display for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Stopped => {
                "interrupted: stopping and releasing what this run holds (a second signal \
                 skips every wait but still releases)"
            }
            Self::Hurried => "second signal: skipping every wait; still releasing",
            Self::ParentGone => {
                "the process that started this one is gone: stopping and releasing what this \
                 run holds"
            }
            Self::Again(_) => "another signal: releasing is already under way",
        })
    }
}

/// The pure rule: what the `n`-th signal (from 1) does; `hangup` for SIGHUP.
#[must_use]
pub fn decide(n: u32, hangup: bool) -> Received {
    match (n, hangup) {
        (1, true) => Received::ParentGone,
        (1, false) => Received::Stopped,
        (2, _) => Received::Hurried,
        (n, _) => Received::Again(n),
    }
}

/// Installs the handlers; they drive `cancel` for the rest of the process. Returns what each
/// signal did, for the program's own lines. Must be called inside a Tokio runtime.
///
/// A line printed from the receiver may come after the lines the stopped session makes its
/// program print; to print the signal's line first, use [`install_with`].
///
/// # Errors
/// A handler could not be registered.
pub fn install(
    cancel: &Cancel,
    opts: SignalOptions,
) -> std::io::Result<mpsc::UnboundedReceiver<Received>> {
    let (tx, rx) = mpsc::unbounded_channel();
    install_with(cancel, opts, move |what| {
        let _ = tx.send(what);
    })?;
    Ok(rx)
}

/// [`install`] with `notice` called for each signal *before* `cancel` is driven: whatever
/// `notice` prints comes before anything the stopped session leads to (its error, its
/// release lines). `notice` runs on the handlers' task; keep it short (a line, or an exit on
/// [`Received::Again`]). A `notice` that panics (say, `eprintln!` on a closed pipe) still
/// lets its signal, and every later one, drive `cancel`, unless the program is built with
/// `panic = "abort"` (then the process ends there). Must be called inside a Tokio runtime.
///
/// # Errors
/// A handler could not be registered.
pub fn install_with(
    cancel: &Cancel,
    opts: SignalOptions,
    mut notice: impl FnMut(Received) + Send + 'static,
) -> std::io::Result<()> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = if opts.parent_death || opts.hangup {
        Some(signal(SignalKind::hangup())?)
    } else {
        None
    };
    if opts.parent_death {
        die_with_parent();
    }
    let cancel = cancel.clone();
    tokio::spawn(async move {
        let mut n = 0u32;
        loop {
            let hangup = tokio::select! {
                _ = int.recv() => false,
                _ = term.recv() => false,
                Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => None } } => true,
            };
            n += 1;
            let what = decide(n, hangup);
            tracing::info!(signal = n, "{what}");
            // The signal must reach the session whatever the notice does.
            let noticed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| notice(what)));
            if noticed.is_err() {
                tracing::warn!(signal = n, "the signal's notice panicked");
            }
            match what {
                Received::Stopped => cancel.stop(),
                Received::Hurried | Received::ParentGone => cancel.hurry(),
                Received::Again(_) => {}
            }
        }
    });
    Ok(())
}

/// A new [`Cancel`] driven by SIGINT and SIGTERM ([`install`] with the default options), for a
/// program that has nothing else to cancel it with.
///
/// # Errors
/// A handler could not be registered.
pub fn cancel_on_signals() -> std::io::Result<Cancel> {
    let cancel = Cancel::new();
    install(&cancel, SignalOptions::default())?;
    Ok(cancel)
}

/// Asks the kernel for SIGHUP when the process that started us exits (Linux
/// `PR_SET_PDEATHSIG`), so a run orphaned by a killed shell is treated as cancelled instead of
/// holding its fences until something kills it. A no-op elsewhere.
fn die_with_parent() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Signal, set_parent_process_death_signal};
        if let Err(e) = set_parent_process_death_signal(Some(Signal::HUP)) {
            tracing::debug!(error = %e, "parent-death signal not available");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_the_first_stops_the_second_hurries_a_hangup_hurries_at_once() {
        let table = [
            (1, false, Received::Stopped),
            (1, true, Received::ParentGone),
            (2, false, Received::Hurried),
            (2, true, Received::Hurried),
            (3, false, Received::Again(3)),
            (4, true, Received::Again(4)),
        ];
        for (n, hangup, want) in table {
            assert_eq!(decide(n, hangup), want, "signal {n}, hangup={hangup}");
        }
    }
}
