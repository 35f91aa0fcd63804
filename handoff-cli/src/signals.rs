//! Signals become [`Cancel`] requests through [`flux_suspend::signals`]: the first
//! SIGINT/SIGTERM *stops* (the current phase ends, the command gets SIGTERM, everything is
//! released in order); a second *hurries* (every remaining wait is skipped, the command's
//! process group gets SIGKILL) but still releases; a third exits at once. SIGHUP — which the
//! kernel sends when the process that started us dies, for the commands that take something —
//! hurries at once: a CI runner that cancelled a step by killing its shell will kill what is
//! left soon. This file only prints the lines and makes the third signal exit.

use flux_suspend::Cancel;
use flux_suspend::signals::{Received, SignalOptions};

use crate::exit;

/// Installs the handlers; they drive `cancel`. With `parent_death`, the death of the process
/// that started us is a cancellation too (Linux `PR_SET_PDEATHSIG`). Must be called inside the
/// runtime.
pub fn install(cancel: &Cancel, parent_death: bool) -> std::io::Result<()> {
    let opts = SignalOptions::default()
        .with_hangup(true)
        .with_parent_death(parent_death);
    // The line is printed before the session is stopped, so it comes before the error or the
    // release lines the stop leads to: the last line a run prints is its outcome.
    flux_suspend::signals::install_with(cancel, opts, |what| {
        let line = match what {
            Received::Stopped => {
                "interrupted: stopping and releasing what this run holds (a second signal skips \
                 every wait but still releases)"
            }
            Received::ParentGone => {
                "the process that started flux-handoff is gone: stopping the command and \
                 releasing what this run holds"
            }
            Received::Hurried => {
                "second signal: killing the command and skipping every wait; still releasing \
                 (a third signal exits at once)"
            }
            _ => {
                say("third signal: exiting now; `flux-handoff fences` lists what is still held");
                std::process::exit(i32::from(exit::INTERRUPTED));
            }
        };
        say(line);
    })
}

/// One line on stderr; a closed stderr (a cancelled CI step's pipe) is no reason to fail.
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}
