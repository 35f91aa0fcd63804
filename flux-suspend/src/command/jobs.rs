//! Job control as a shell does it, for a command under a keeper: SIGTSTP to this process
//! (Ctrl-Z) stops the command's process group, then this process; SIGCONT continues both.
//! The keeper ignores SIGTSTP, so it keeps the holder's deadline while the job is stopped.

use rustix::process::{Pid, Signal, getpid, kill_process, kill_process_group};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug)]
pub(super) struct JobControl {
    tstp: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

impl JobControl {
    pub(super) fn install() -> std::io::Result<Self> {
        Ok(Self {
            tstp: signal(SignalKind::from_raw(Signal::TSTP.as_raw()))?,
            cont: signal(SignalKind::from_raw(Signal::CONT.as_raw()))?,
        })
    }
}

/// Waits for the next job-control signal and passes it on to `group`; never resolves without
/// job control.
pub(super) async fn next(jobs: Option<&mut JobControl>, group: Option<Pid>) {
    let Some(jobs) = jobs else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = jobs.tstp.recv() => {
            if let Some(g) = group {
                let _ = kill_process_group(g, Signal::TSTP);
            }
            tracing::info!("stopped (SIGTSTP): the command's group is stopped too");
            // Stop as the default action would have; SIGCONT resumes here.
            let _ = kill_process(getpid(), Signal::STOP);
        }
        _ = jobs.cont.recv() => {
            if let Some(g) = group {
                let _ = kill_process_group(g, Signal::CONT);
            }
        }
    }
}
