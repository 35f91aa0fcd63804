//! A cgroup v2 of the command's own, made by the holder before the keeper is forked: a
//! directory below the holder's own cgroup, where the holder may write (root in CI, a
//! delegated systemd scope elsewhere). None where it cannot be made: the keeper then ends the
//! tree by walking the process table alone (complete while the keeper lives, as it is the
//! tree's subreaper; without the cgroup a process that forks faster than the walk signals
//! needs more rounds, and a pid may be reused between the walk and the signal).
//!
//! The directory is named after the holder (`flux-handoff_HOLDER_PID_N`; a holder has no `_`),
//! so that the work of a holder whose keeper died with it (`pkill -9 flux-handoff` kills both)
//! is still found and ended on this machine by `resume --holder-exited` ([`end_holders`]).
//!
//! `FLUX_HANDOFF_CGROUP=off` turns it off (the tests of the fallback use it).

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub(super) struct Cgroup {
    pub dir: PathBuf,
    procs: File,
    kill: Option<File>,
    events: File,
}

impl Cgroup {
    pub(super) fn create(holder: &str) -> Option<Self> {
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        if std::env::var_os("FLUX_HANDOFF_CGROUP").is_some_and(|v| v == "off") {
            return None;
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let parent = parent_dir(&mounts, &own)?;
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(dir_name(holder, std::process::id(), n));
        match Self::open(&dir) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::debug!(cgroup = %dir.display(), error = %e, "no cgroup of the command's own: the keeper walks the process table alone");
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir(dir)?;
        let write = |f: &str| OpenOptions::new().write(true).open(dir.join(f));
        Ok(Self {
            procs: write("cgroup.procs")?,
            kill: write("cgroup.kill").ok(),
            events: File::open(dir.join("cgroup.events"))?,
            dir: dir.to_path_buf(),
        })
    }

    /// `cgroup.procs`, `cgroup.kill` (-1 without it), `cgroup.events`.
    pub(super) fn fds(&self) -> [RawFd; 3] {
        [
            self.procs.as_raw_fd(),
            self.kill.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            self.events.as_raw_fd(),
        ]
    }
}

/// The name of the `n`-th command cgroup of `holder` made by process `pid`. Pure.
pub(super) fn dir_name(holder: &str, pid: u32, n: u64) -> String {
    format!("{PREFIX}{holder}_{pid}_{n}")
}

const PREFIX: &str = "flux-handoff_";

/// Whether a cgroup directory called `name` is one of `holder`'s command cgroups. Pure.
pub(super) fn is_holders(name: &str, holder: &str) -> bool {
    name.strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('_'))
        .is_some_and(|(h, _)| h == holder)
}

/// The mount point of the whole cgroup v2 hierarchy, from `mountinfo`. Pure.
pub(super) fn v2_mount(mountinfo: &str) -> Option<&str> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2").then_some(())?;
        // Field 4 is the root within the filesystem, field 5 the mount point.
        let mut f = left.split_whitespace();
        let root = f.nth(3)?;
        (root == "/").then_some(())?;
        f.next()
    })
}

/// The directory of this process's cgroup v2: the `cgroup2` mount (from `mountinfo`) joined
/// with the `0::PATH` line of `/proc/self/cgroup`. Pure.
pub(super) fn parent_dir(mountinfo: &str, own: &str) -> Option<PathBuf> {
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mount = v2_mount(mountinfo)?;
    let rel = path.trim_start_matches('/');
    // A path of a deleted or foreign cgroup ("/../x", "(deleted)") is not ours to use.
    if rel.split('/').any(|p| p == "..") || rel.contains(' ') {
        return None;
    }
    Some(Path::new(mount).join(rel))
}

#[cfg(test)]
mod tests {
    use super::{dir_name, is_holders, parent_dir, v2_mount};

    #[test]
    fn keeper_orphan_a_command_cgroup_is_found_by_its_holder_alone() {
        let name = dir_name("gh1.2-abc", 42, 0);
        assert!(is_holders(&name, "gh1.2-abc"));
        // A holder that is another's prefix, or has it as prefix, is not that holder.
        assert!(!is_holders(&name, "gh1.2"));
        assert!(!is_holders(&dir_name("gh1.2-abc-d", 42, 0), "gh1.2-abc"));
        assert!(!is_holders("flux-handoff-42-0", "42"));
        assert!(!is_holders("user.slice", "user.slice"));
        let hybrid = "35 25 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(v2_mount(hybrid), Some("/sys/fs/cgroup/unified"));
        assert_eq!(v2_mount("30 25 0:26 / /x rw - cgroup cgroup rw\n"), None);
    }

    #[test]
    fn keeper_the_cgroup_is_made_below_our_own_on_the_v2_mount() {
        let hybrid = "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                      35 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parent_dir(hybrid, "4:memory:/x\n0::/\n").unwrap(),
            std::path::Path::new("/sys/fs/cgroup/unified/")
        );
        let unified = "22 1 0:20 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parent_dir(unified, "0::/user.slice/run-1.scope\n").unwrap(),
            std::path::Path::new("/sys/fs/cgroup/user.slice/run-1.scope")
        );
        // No v2 hierarchy, or none of ours: no cgroup.
        assert_eq!(
            parent_dir("30 25 0:26 / /x rw - cgroup cgroup rw\n", "0::/\n"),
            None
        );
        assert_eq!(parent_dir(unified, "1:name=systemd:/\n"), None);
        assert_eq!(parent_dir(unified, "0::/../other\n"), None);
    }
}
