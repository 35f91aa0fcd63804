//! The keeper: the command's parent, a small process of its own, so that the work cannot
//! outlive its holder.
//!
//! [`super::run_while_paused`] spawns the caller's `Command` with a `pre_exec` hook that forks
//! once more: the process Tokio spawned becomes the keeper and the fork becomes the command,
//! exec'd with every setting of the caller's `Command`. The keeper
//!
//! - is the command's child subreaper: every orphan of the command's tree (a double fork, a
//!   `setsid`, an `env -i`) is re-parented to it, so all its descendants are the command's and
//!   none escapes the walk that ends them;
//! - puts the command in a cgroup v2 of its own where one can be made (root, or a delegated
//!   subtree), and ends it there with `cgroup.kill`, which no process of the tree escapes;
//! - holds the read end of a pipe whose write end only the holder has: end-of-file (any death
//!   of the holder, SIGKILL included) ends the tree: SIGTERM, SIGKILL after the grace;
//! - keeps the holder's deadline on `CLOCK_BOOTTIME`, moved by the holder after each Lease
//!   renewal: a holder that is stopped, starved or suspended stops moving it, and the keeper
//!   ends the work at the holder's own kill time, before recovery can take the Lease over
//!   (`docs/design/protocol.md`, "The keeper");
//! - answers on an abstract socket named after the holder ([`end_holders_work`]), so that a
//!   release by `--holder-exited` on this machine ends the work first.
//!
//! The keeper's decisions are the pure functions of `decide`; its loop (`child`) makes only
//! async-signal-safe system calls. Linux only.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io::{self, Read as _};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use flux_fence::Holder;

mod cgroup;
mod child;
mod decide;
mod orphans;

pub(crate) use decide::Event;

/// How many keepers of one holder may run at once on one machine (sockets `…/0` to `…/7`).
const SLOTS: usize = 8;

/// How long processes that got SIGKILL may take to vanish before the keeper exits anyway.
pub const KILL_WAIT: Duration = Duration::from_secs(2);

/// The holder's end of a keeper: the life pipe's write end, the report pipe's read end and
/// the command's cgroup.
#[derive(Debug)]
pub(crate) struct Keeper {
    life: OwnedFd,
    report: OwnedFd,
    cgroup: Option<PathBuf>,
}

/// The abstract socket name of the `slot`-th keeper of `holder`.
fn socket_name(holder: &str, slot: usize) -> Vec<u8> {
    format!("flux-handoff/keeper/{holder}/{slot}").into_bytes()
}

/// A `sockaddr_un` for the abstract `name`, and its length.
fn sockaddr(name: &[u8]) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).unwrap_or(1);
    let n = name.len().min(addr.sun_path.len() - 1);
    for (d, s) in addr.sun_path[1..=n].iter_mut().zip(name) {
        *d = libc::c_char::from_ne_bytes([*s]);
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + n;
    (addr, libc::socklen_t::try_from(len).unwrap_or(0))
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: a valid out-array of two.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Keeper {
    /// Makes `cmd` start under a keeper of `holder`'s: see the module docs. `grace` is the time
    /// between SIGTERM and SIGKILL; `deadline` the holder's (SIGTERM, SIGKILL) instants on
    /// `CLOCK_BOOTTIME` ([`boot_ns`]). Spawn `cmd` next, then drop it: the keeper's ends of
    /// the pipes are closed here with it.
    pub(crate) fn prepare(
        cmd: &mut tokio::process::Command,
        holder: &Holder,
        grace: Duration,
        deadline: Option<(u64, u64)>,
    ) -> io::Result<Self> {
        let (life_read, life) = pipe()?;
        let (go_read, go_write) = pipe()?;
        let (report, report_write) = pipe()?;
        let proc_dir = std::fs::File::open("/proc")?;
        let cgroup = cgroup::Cgroup::create(holder.as_str());
        let table_cap = 1 << 15;
        let mut setup = child::Setup {
            life: life_read.as_raw_fd(),
            go_read: go_read.as_raw_fd(),
            go_write: go_write.as_raw_fd(),
            report: report_write.as_raw_fd(),
            proc_dir: proc_dir.as_raw_fd(),
            cgroup: cgroup.as_ref().map(|c| {
                (
                    c.fds(),
                    CString::new(c.dir.as_os_str().as_encoded_bytes())
                        .map(CString::into_bytes_with_nul)
                        .unwrap_or_default(),
                )
            }),
            sockets: (0..SLOTS)
                .map(|i| socket_name(holder.as_str(), i))
                .collect(),
            table: Vec::with_capacity(table_cap),
            dirents: Vec::with_capacity(32 * 1024),
            grace_ns: u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX),
            kill_wait_ns: u64::try_from(KILL_WAIT.as_nanos()).unwrap_or(u64::MAX),
            deadline,
        };
        let path = cgroup.as_ref().map(|c| c.dir.clone());
        // The descriptors the keeper uses live as long as `cmd` (its hook), in this process.
        let owned = (life_read, go_read, go_write, report_write, proc_dir, cgroup);
        // SAFETY: the hook runs in the forked child and only makes async-signal-safe calls on
        // what `setup` prepared (see `child`).
        unsafe {
            cmd.pre_exec(move || {
                let _ = &owned;
                child::enter(&mut setup)
            });
        }
        set_nonblocking(life.as_raw_fd());
        set_nonblocking(report.as_raw_fd());
        Ok(Self {
            life,
            report,
            cgroup: path,
        })
    }

    /// After the keeper exited: whether it ended the tree because the holder's deadline
    /// passed with no renewal moving it (not because the command exited, or the holder asked).
    /// The holder's own clock may not have counted that yet, or a renewal answered after it
    /// may have moved the deadline since: the work was stopped all the same. A keeper that was
    /// killed reports nothing (false).
    pub(crate) fn ended_at_deadline(&self) -> bool {
        let mut byte = [0u8; 1];
        // SAFETY: a valid one-byte buffer; the descriptor is ours and non-blocking.
        let n = unsafe { libc::read(self.report.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        n == 1 && decide::reported(byte[0]) == Some(decide::Why::Deadline)
    }

    /// Tells the keeper one of the holder's events; a keeper that is gone or stuck is no reason
    /// to fail (it then ends the tree on its own, or has ended it).
    pub(crate) fn tell(&self, event: Event) {
        if let Some(msg) = decide::encode(event) {
            // SAFETY: a valid buffer of MSG_LEN bytes; the pipe is ours. A write of fewer than
            // PIPE_BUF bytes is atomic.
            let _ = unsafe { libc::write(self.life.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
        }
    }

    /// After the keeper exited: what is left of the command's cgroup (a keeper that was
    /// killed itself) is killed, and the cgroup removed.
    pub(crate) fn cleanup(self) {
        let Some(dir) = self.cgroup else { return };
        if std::fs::read_to_string(dir.join("cgroup.events"))
            .is_ok_and(|e| e.contains("populated 1"))
        {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            for _ in 0..200 {
                if std::fs::remove_dir(&dir).is_ok() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            tracing::error!(cgroup = %dir.display(), "the command's cgroup did not empty after cgroup.kill");
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}

/// `at` (a Tokio instant) as nanoseconds on `CLOCK_BOOTTIME`.
pub(crate) fn boot_ns(at: tokio::time::Instant) -> u64 {
    let now = tokio::time::Instant::now();
    let boot = child::boottime();
    if at >= now {
        boot.saturating_add(u64::try_from((at - now).as_nanos()).unwrap_or(u64::MAX))
    } else {
        boot.saturating_sub(u64::try_from((now - at).as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A keeper of the holder's that did not end its command's tree in time, or a cgroup of the
/// holder's command that still held processes.
#[derive(Debug, thiserror::Error)]
#[error("the work of {holder} may still run on this machine: {}", still_running(*pid, cgroup.as_deref(), *waited))]
#[non_exhaustive]
pub struct WorkStillRunning {
    /// The holder.
    pub holder: Holder,
    /// The keeper's pid; `None` when it refused to answer (asked by another user, or by more
    /// askers at once than it serves).
    pub pid: Option<u32>,
    /// How long it was waited for.
    pub waited: Duration,
    /// The command's cgroup that still held processes after `waited` (its keeper gone);
    /// `None` when a keeper did not answer.
    pub cgroup: Option<PathBuf>,
}

fn still_running(pid: Option<u32>, cgroup: Option<&std::path::Path>, waited: Duration) -> String {
    match (cgroup, pid) {
        (Some(dir), _) => format!(
            "its command's cgroup {} still held processes {waited:?} after cgroup.kill",
            dir.display()
        ),
        (None, Some(p)) => format!("its keeper (pid {p}) did not say it ended within {waited:?}"),
        (None, None) => {
            format!("its keeper (which refused to answer) did not say it ended within {waited:?}")
        }
    }
}

/// Asks every keeper of `holder` on this machine to end its command's tree, and waits up to
/// `bound` for each: call it before releasing fences on the attestation that the holder's
/// process exited (`resume --holder-exited`, the Action's post step). Returns the keepers'
/// pids that ended their trees (none: no keeper of that holder runs here).
///
/// Then, whether a keeper answered or not, every cgroup of the holder's commands on this
/// machine (named after the holder) is emptied with `cgroup.kill` and removed: the work of a
/// keeper that was killed with its holder (`pkill -9 flux-handoff`) ends there too. Where the
/// holder could make no cgroup, the orphans of a dead keeper are not seen.
///
/// A keeper on another machine cannot be reached: there the ordering of the keeper's deadline
/// before recovery's takeover is what protects (`docs/design/protocol.md`).
///
/// # Errors
/// A keeper answered but its tree was still there after `bound`, or one refused to answer, or
/// a cgroup of the holder's command still held processes after `bound`.
pub fn end_holders_work(holder: &Holder, bound: Duration) -> Result<Vec<u32>, WorkStillRunning> {
    let mut ended = Vec::new();
    for slot in 0..SLOTS {
        let (addr, len) = sockaddr(&socket_name(holder.as_str(), slot));
        // SAFETY: a fresh socket, owned at once; `addr` is valid for `len` bytes.
        let conn = unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                continue;
            }
            let owned = OwnedFd::from_raw_fd(fd);
            if libc::connect(fd, (&raw const addr).cast(), len) != 0 {
                continue;
            }
            std::os::unix::net::UnixStream::from(owned)
        };
        let _ = conn.set_read_timeout(Some(bound.max(Duration::from_millis(1))));
        let mut reader = &conn;
        let mut pid = [0u8; 4];
        if reader.read_exact(&mut pid).is_err() {
            // A keeper is there but refused (another user's) or is full: its work may run.
            return Err(WorkStillRunning {
                holder: holder.clone(),
                pid: None,
                waited: bound,
                cgroup: None,
            });
        }
        let pid = u32::from_le_bytes(pid);
        let mut done = [0u8; 1];
        match reader.read(&mut done) {
            Ok(1) if done[0] == b'd' => ended.push(pid),
            _ => {
                return Err(WorkStillRunning {
                    holder: holder.clone(),
                    pid: Some(pid),
                    waited: bound,
                    cgroup: None,
                });
            }
        }
    }
    match orphans::end_holders(holder.as_str(), bound) {
        Ok(dirs) => {
            for dir in dirs {
                tracing::info!(%holder, cgroup = %dir.display(), "processes of the holder's command outlived its keeper; cgroup.kill ended them");
            }
            Ok(ended)
        }
        Err(dir) => Err(WorkStillRunning {
            holder: holder.clone(),
            pid: None,
            waited: bound,
            cgroup: Some(dir),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeper_socket_names_fit_an_abstract_address() {
        let long = "h".repeat(63);
        let name = socket_name(&long, SLOTS - 1);
        let (addr, len) = sockaddr(&name);
        assert_eq!(
            usize::try_from(len).unwrap(),
            std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len()
        );
        assert_eq!(addr.sun_path[0], 0);
    }
}
