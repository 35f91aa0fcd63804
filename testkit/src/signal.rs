//! Signals to a process or a process group through rustix, never the external `kill` binary.

use std::io;

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// The signal named `name`, without the `SIG` prefix: `INT`, `TERM`, `KILL`, `HUP`, `QUIT`,
/// `USR1`, `USR2`, `STOP` or `CONT`.
///
/// # Errors
/// Any other name (`InvalidInput`).
pub fn named(name: &str) -> io::Result<Signal> {
    Ok(match name {
        "INT" => Signal::INT,
        "TERM" => Signal::TERM,
        "KILL" => Signal::KILL,
        "HUP" => Signal::HUP,
        "QUIT" => Signal::QUIT,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        "STOP" => Signal::STOP,
        "CONT" => Signal::CONT,
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("unknown signal {other}"),
            ));
        }
    })
}

/// Sends signal `sig` (a name as [`named`] takes) to process `pid`.
///
/// # Errors
/// An unknown name, pid 0 or above `i32::MAX`, or the call failed (no such process: `ESRCH`).
pub fn to_process(pid: u32, sig: &str) -> io::Result<()> {
    Ok(kill_process(pid_of(pid)?, named(sig)?)?)
}

/// Sends signal `sig` (a name as [`named`] takes) to every process of process group `pgid`.
///
/// # Errors
/// As [`to_process`].
pub fn to_group(pgid: u32, sig: &str) -> io::Result<()> {
    Ok(kill_process_group(pid_of(pgid)?, named(sig)?)?)
}

fn pid_of(raw: u32) -> io::Result<Pid> {
    i32::try_from(raw)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no pid {raw}")))
}

#[cfg(test)]
mod tests {
    use super::{named, to_group, to_process};

    #[test]
    fn names_map_to_signals_and_the_rest_is_refused() {
        assert_eq!(named("TERM").unwrap(), rustix::process::Signal::TERM);
        assert_eq!(named("KILL").unwrap(), rustix::process::Signal::KILL);
        assert!(named("SIGTERM").is_err());
        assert!(named("-9").is_err());
        assert!(to_process(0, "TERM").is_err());
        assert!(to_group(u32::MAX, "TERM").is_err());
    }

    #[test]
    fn a_signal_reaches_a_child_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        to_process(child.id(), "KILL").unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }
}
