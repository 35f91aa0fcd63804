//! SIGINT/SIGTERM: the first stops new work and lets the command release what it holds, in
//! order; a second exits at once and leaves the fence report to tell what is held.

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::exit;

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
}
