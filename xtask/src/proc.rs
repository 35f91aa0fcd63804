//! Running commands, loudly; signalling processes we started.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rustix::process::Signal;

pub fn run(program: &str, args: &[&str], dir: &Path) -> anyhow::Result<()> {
    run_env(program, args, dir, &[])
}

pub fn run_env(
    program: &str,
    args: &[&str],
    dir: &Path,
    env: &[(&str, &OsStr)],
) -> anyhow::Result<()> {
    eprintln!("xtask: $ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .status()
        .with_context(|| format!("cannot start {program}"))?;
    if !status.success() {
        bail!("`{program} {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

pub fn succeeds(program: &str, args: &[&str], dir: &Path) -> bool {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether a process with this pid exists (signal 0) and is not a zombie.
pub fn alive(pid: u32) -> bool {
    let exists = pid_of(pid).is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
    exists && !zombie(pid)
}

/// A zombie has exited and waits to be reaped: it holds no resources and ignores signals.
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_state(&stat))
        .is_some_and(|state| state == 'Z')
}

/// The state letter of a `/proc/<pid>/stat` line (the field after the parenthesised name,
/// which may itself contain spaces and parentheses).
pub fn stat_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether process `pid` runs a program whose file name is `name` (guards against signalling
/// an unrelated process that reused a recorded pid).
pub fn runs(pid: u32, name: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .is_some_and(|cmdline| argv0_is(&cmdline, name))
}

/// Whether the first NUL-separated word of a `/proc/<pid>/cmdline` names `name`.
pub fn argv0_is(cmdline: &[u8], name: &str) -> bool {
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    Path::new(OsStr::new(std::str::from_utf8(argv0).unwrap_or_default()))
        .file_name()
        .is_some_and(|n| n == name)
}

/// Sends `sig` to `pid` (rustix, no `kill` binary); a process already gone is not an error.
pub fn signal(pid: u32, sig: Signal) {
    if let Some(p) = pid_of(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

fn pid_of(raw: u32) -> Option<rustix::process::Pid> {
    i32::try_from(raw)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
}

/// How [`stop`] ended a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It exited after SIGTERM within the grace period.
    Terminated,
    /// It ignored SIGTERM for the grace period and was killed.
    Killed,
}

/// SIGTERM, wait up to `grace`, then SIGKILL and wait (bounded) until it is gone.
///
/// # Errors
/// The process survived SIGKILL for five seconds.
pub fn stop(pid: u32, grace: Duration) -> anyhow::Result<Stopped> {
    signal(pid, Signal::TERM);
    if wait_gone(pid, grace) {
        return Ok(Stopped::Terminated);
    }
    signal(pid, Signal::KILL);
    if wait_gone(pid, Duration::from_secs(5)) {
        return Ok(Stopped::Killed);
    }
    bail!("pid {pid} survived SIGKILL")
}

fn wait_gone(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while alive(pid) {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_state_reads_past_a_name_with_spaces_and_parentheses() {
        assert_eq!(stat_state("42 (flux model) S 1 42"), Some('S'));
        assert_eq!(stat_state("42 (a) b)) Z 1 42"), Some('Z'));
        assert_eq!(stat_state("garbage"), None);
    }

    #[test]
    fn argv0_is_compares_the_file_name_of_the_first_word_only() {
        assert!(argv0_is(
            b"/work/target/debug/flux-model\0--seed\0",
            "flux-model"
        ));
        assert!(argv0_is(b"flux-model", "flux-model"));
        assert!(!argv0_is(b"/bin/sh\0flux-model\0", "flux-model"));
        assert!(!argv0_is(b"", "flux-model"));
    }
}
