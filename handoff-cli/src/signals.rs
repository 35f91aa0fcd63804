//! Signals become [`Cancel`] requests: the first SIGINT/SIGTERM *stops* (the current phase
//! ends, the command gets SIGTERM, everything is released in order); a second *hurries*
//! (every remaining wait is skipped, the command's process group gets SIGKILL) but still
//! releases; a third exits at once. SIGHUP — which the kernel sends when the process that
//! started us dies (see [`die_with_parent`]) — hurries at once: a CI runner that cancelled a
//! step by killing its shell will kill what is left soon.

use tokio::signal::unix::{SignalKind, signal};

use flux_suspend::Cancel;

use crate::exit;

/// Installs the handlers; they drive `cancel`. Must be called inside the runtime.
pub fn install(cancel: Cancel) -> std::io::Result<()> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        let mut seen = 0u8;
        loop {
            let parent_gone = tokio::select! {
                _ = int.recv() => false,
                _ = term.recv() => false,
                _ = hup.recv() => true,
            };
            seen += 1;
            if parent_gone && seen == 1 {
                eprintln!(
                    "the process that started flux-handoff is gone: stopping the command and \
                     releasing what this run holds"
                );
                cancel.hurry();
                continue;
            }
            match seen {
                1 => {
                    eprintln!(
                        "interrupted: stopping and releasing what this run holds (a second \
                         signal skips every wait but still releases)"
                    );
                    cancel.stop();
                }
                2 => {
                    eprintln!(
                        "second signal: killing the command and skipping every wait; still \
                         releasing (a third signal exits at once)"
                    );
                    cancel.hurry();
                }
                _ => {
                    eprintln!(
                        "third signal: exiting now; `flux-handoff fences` lists what is still held"
                    );
                    std::process::exit(i32::from(exit::INTERRUPTED));
                }
            }
        }
    });
    Ok(())
}

/// Asks the kernel for SIGHUP when the process that started us exits (Linux
/// `PR_SET_PDEATHSIG`), so a run orphaned by a killed shell is treated as cancelled instead of
/// holding its fences until something kills it. A no-op elsewhere.
pub fn die_with_parent() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Signal, set_parent_process_death_signal};
        if let Err(e) = set_parent_process_death_signal(Some(Signal::HUP)) {
            tracing::debug!(error = %e, "parent-death signal not available");
        }
    }
}
