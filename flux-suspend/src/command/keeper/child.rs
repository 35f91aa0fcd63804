//! The keeper process itself. It is forked from the holder inside the command's `pre_exec`
//! hook, so it is the process Tokio spawned; it forks the command (which returns from the hook
//! and is exec'd by the standard library, with every setting of the caller's `Command`) and
//! never returns: it runs [`keep`] and exits with the command's status.
//!
//! Forked from a multi-threaded process, it may only make async-signal-safe calls: raw system
//! calls on file descriptors and buffers prepared before the fork. Nothing here allocates,
//! locks, logs or unwinds.

#![allow(unsafe_code)]

use std::os::fd::RawFd;

use super::decide::{Act, Event, MSG_LEN, State, Why, decode, report};

/// What the keeper needs, prepared by the holder before the fork.
pub(crate) struct Setup {
    /// The read end of the holder's pipe (its write end only the holder has).
    pub life: RawFd,
    /// The command waits on this pipe until it is in its cgroup: the keeper writes one byte.
    pub go_read: RawFd,
    pub go_write: RawFd,
    /// The write end of the report pipe: one byte, why the tree ended, just before the exit.
    pub report: RawFd,
    /// `/proc`, opened as a directory.
    pub proc_dir: RawFd,
    /// The command's cgroup, where one could be made: `cgroup.procs`, `cgroup.kill` (kernel
    /// 5.14+, else -1), `cgroup.events`; and the directory's path, NUL-terminated.
    pub cgroup: Option<([RawFd; 3], Vec<u8>)>,
    /// Abstract socket addresses to try, in order (`sun_path` bytes after the leading NUL).
    pub sockets: Vec<Vec<u8>>,
    /// Scratch space for the process table walk: (pid, parent, state), and the dirents.
    pub table: Vec<(i32, i32, u8)>,
    pub dirents: Vec<u8>,
    pub grace_ns: u64,
    pub kill_wait_ns: u64,
    pub deadline: Option<(u64, u64)>,
}

/// In the process Tokio spawned: forks the command and returns `Ok` in it; in the keeper,
/// never returns.
///
/// # Safety
/// Only in a `pre_exec` hook: the process is a fresh fork of the holder.
pub(crate) unsafe fn enter(s: &mut Setup) -> std::io::Result<()> {
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        let keeper = libc::getpid();
        let command = libc::fork();
        if command < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if command == 0 {
            // The command: it dies with the keeper (one thread, so no early death signal),
            // and starts only once it is in its cgroup.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != keeper {
                libc::_exit(137);
            }
            let mut b = 0u8;
            loop {
                let n = libc::read(s.go_read, (&raw mut b).cast(), 1);
                if n == 1 {
                    return Ok(());
                }
                if n == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    libc::_exit(127);
                }
            }
        }
        keep(s, command)
    }
}

/// The keeper's first steps: deaf to the signals a terminal or a runner sends its group, the
/// command moved into its cgroup and let go, every descriptor but its own closed.
unsafe fn start(s: &Setup, command: i32) {
    unsafe {
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // The holder's own handlers (Tokio's) write to descriptors closed below.
        for sig in [libc::SIGCONT, libc::SIGWINCH, libc::SIGALRM] {
            libc::signal(sig, libc::SIG_DFL);
        }
        if let Some(([procs, _, _], _)) = &s.cgroup {
            let mut digits = [0u8; 12];
            let d = decimal(command, &mut digits);
            libc::write(*procs, d.as_ptr().cast(), d.len());
        }
        libc::write(s.go_write, b"g".as_ptr().cast(), 1);
        let mut keep_fds = [
            s.life,
            s.report,
            s.proc_dir,
            s.cgroup.as_ref().map_or(-1, |c| c.0[1]),
            s.cgroup.as_ref().map_or(-1, |c| c.0[2]),
        ];
        close_others(&mut keep_fds);
    }
}

unsafe fn keep(s: &mut Setup, command: i32) -> ! {
    unsafe {
        start(s, command);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
        let sigfd = libc::signalfd(-1, &raw const set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        let timer =
            libc::timerfd_create(libc::CLOCK_BOOTTIME, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK);
        let listener = listen(&s.sockets);
        let mut askers = [-1i32; 8];

        let mut state = State::new(s.grace_ns, s.kill_wait_ns, s.deadline);
        let mut status: Option<i32> = None;
        let mut life_open = true;
        let mut armed = 0u64;
        let mut carry = [0u8; MSG_LEN];
        let mut carried = 0usize;
        loop {
            loop {
                let mut st = 0;
                let pid = libc::waitpid(-1, &raw mut st, libc::WNOHANG | libc::__WALL);
                if pid <= 0 {
                    break;
                }
                if pid == command {
                    status = Some(st);
                    state.on(Event::CommandExited, boottime());
                }
            }
            let now = boottime();
            let alive = if state.why().is_some() {
                tree_alive(s)
            } else {
                true
            };
            let wait = match state.next(now, alive) {
                Act::Term => {
                    signal_tree(s, libc::SIGTERM);
                    signal_tree(s, libc::SIGCONT);
                    continue;
                }
                Act::Kill => {
                    if let Some(([_, kill, _], _)) = &s.cgroup
                        && *kill >= 0
                    {
                        libc::pwrite(*kill, b"1".as_ptr().cast(), 1, 0);
                    }
                    signal_tree(s, libc::SIGKILL);
                    Some(now + super::decide::SWEEP_NS)
                }
                Act::Exit | Act::GiveUp => finish(s, status, &askers, state.why()),
                Act::Wait(at) => at,
            };
            // The deadline is a timer on CLOCK_BOOTTIME: it fires on time even after the
            // machine slept. While ending, a short poll looks at the tree again.
            let mut timeout = -1;
            if state.why().is_some() {
                let ms = wait.map_or(10, |at| at.saturating_sub(now) / 1_000_000);
                timeout = i32::try_from(ms.clamp(1, 1000)).unwrap_or(1000);
            } else if let Some(at) = wait
                && at != armed
            {
                arm(timer, at.max(1));
                armed = at;
            }
            let mut fds = [
                pollfd(if life_open { s.life } else { -1 }),
                pollfd(sigfd),
                pollfd(timer),
                pollfd(listener),
            ];
            let n = libc::poll(fds.as_mut_ptr(), 4, timeout);
            if n <= 0 {
                continue;
            }
            if fds[0].revents != 0 {
                life_open = read_life(s.life, &mut carry, &mut carried, &mut state);
            }
            if fds[1].revents != 0 {
                let mut info = [0u8; 128];
                while libc::read(sigfd, info.as_mut_ptr().cast(), info.len()) > 0 {}
            }
            if fds[2].revents != 0 {
                let mut ticks = [0u8; 8];
                libc::read(timer, ticks.as_mut_ptr().cast(), 8);
            }
            if fds[3].revents != 0 && accept(listener, &mut askers) {
                state.on(Event::Asked, boottime());
            }
        }
    }
}

/// Reads the holder's messages into `state`; returns whether the pipe is still open.
unsafe fn read_life(
    life: RawFd,
    carry: &mut [u8; MSG_LEN],
    carried: &mut usize,
    state: &mut State,
) -> bool {
    let mut buf = [0u8; MSG_LEN * 16];
    // SAFETY: a valid buffer.
    let got = unsafe { libc::read(life, buf.as_mut_ptr().cast(), buf.len()) };
    if got <= 0 {
        if got == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            state.on(Event::HolderGone, boottime());
            return false;
        }
        return true;
    }
    for &b in &buf[..got.unsigned_abs()] {
        carry[*carried] = b;
        *carried += 1;
        if *carried == MSG_LEN {
            *carried = 0;
            state.on(decode(carry), boottime());
        }
    }
    true
}

fn pollfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

unsafe fn arm(timer: RawFd, at: u64) {
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: i64::try_from(at / 1_000_000_000).unwrap_or(i64::MAX),
            tv_nsec: i64::try_from(at % 1_000_000_000).unwrap_or(0),
        },
    };
    unsafe {
        libc::timerfd_settime(
            timer,
            libc::TFD_TIMER_ABSTIME,
            &raw const spec,
            std::ptr::null_mut(),
        );
    }
}

/// Nanoseconds on `CLOCK_BOOTTIME`.
pub(crate) fn boottime() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Binds the first free abstract address; -1 when none could be bound (then nobody on this
/// machine can ask the keeper to end the tree, and `resume --holder-exited` finds no keeper).
unsafe fn listen(names: &[Vec<u8>]) -> RawFd {
    unsafe {
        let fd = libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        );
        if fd < 0 {
            return -1;
        }
        for name in names {
            let (addr, len) = super::sockaddr(name);
            if libc::bind(fd, (&raw const addr).cast(), len) == 0 && libc::listen(fd, 8) == 0 {
                return fd;
            }
        }
        libc::close(fd);
        -1
    }
}

/// Accepts one asker of this user (or root): it gets the keeper's pid now and a `d` once the
/// tree is gone. Returns whether one was accepted.
unsafe fn accept(listener: RawFd, askers: &mut [i32; 8]) -> bool {
    unsafe {
        let conn = libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        );
        if conn < 0 {
            return false;
        }
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = libc::socklen_t::try_from(size_of::<libc::ucred>()).unwrap_or(0);
        let ok = libc::getsockopt(
            conn,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        ) == 0
            && (cred.uid == 0 || cred.uid == libc::getuid());
        let slot = askers.iter_mut().find(|a| **a < 0);
        if let (true, Some(slot)) = (ok, slot) {
            let pid = libc::getpid().to_le_bytes();
            libc::write(conn, pid.as_ptr().cast(), 4);
            *slot = conn;
            true
        } else {
            libc::close(conn);
            false
        }
    }
}

/// Tells the holder why the tree ended and the askers that it is gone, removes the cgroup,
/// and exits as the command did.
unsafe fn finish(s: &Setup, status: Option<i32>, askers: &[i32; 8], why: Option<Why>) -> ! {
    unsafe {
        let byte = [report(why)];
        libc::write(s.report, byte.as_ptr().cast(), 1);
        for &a in askers.iter().filter(|a| **a >= 0) {
            libc::write(a, b"d".as_ptr().cast(), 1);
        }
        if let Some((_, dir)) = &s.cgroup {
            libc::rmdir(dir.as_ptr().cast());
        }
        let Some(st) = status else { libc::_exit(137) };
        if libc::WIFEXITED(st) {
            libc::_exit(libc::WEXITSTATUS(st));
        }
        let sig = libc::WTERMSIG(st);
        // The same death as the command's, without a core file of the keeper.
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &raw const none);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
}

/// Whether any process of the tree still runs: the cgroup is populated, or a descendant of
/// the keeper (not a zombie) is in the process table. The keeper is their child subreaper, so
/// every orphan of the tree is re-parented to it: the walk misses none.
unsafe fn tree_alive(s: &mut Setup) -> bool {
    unsafe {
        if let Some(([_, _, events], _)) = &s.cgroup {
            let mut buf = [0u8; 256];
            let n = libc::pread(*events, buf.as_mut_ptr().cast(), buf.len(), 0);
            if n > 0 && contains(&buf[..n.unsigned_abs()], b"populated 1") {
                return true;
            }
        }
        walk(s) > 0
    }
}

unsafe fn signal_tree(s: &mut Setup, sig: i32) {
    unsafe {
        let n = walk(s);
        for &(pid, _, state) in &s.table[..n] {
            if state != b'Z' {
                libc::kill(pid, sig);
            }
        }
    }
}

/// Fills `s.table` with the keeper's descendants; returns how many.
unsafe fn walk(s: &mut Setup) -> usize {
    unsafe {
        let me = libc::getpid();
        let cap = s.table.capacity();
        s.table.clear();
        libc::lseek(s.proc_dir, 0, libc::SEEK_SET);
        loop {
            let got = libc::syscall(
                libc::SYS_getdents64,
                s.proc_dir,
                s.dirents.as_mut_ptr(),
                s.dirents.capacity(),
            );
            if got <= 0 {
                break;
            }
            let buf =
                std::slice::from_raw_parts(s.dirents.as_ptr(), usize::try_from(got).unwrap_or(0));
            let mut at = 0;
            while at + 19 < buf.len() {
                let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
                let name = &buf[at + 19..at + reclen];
                let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
                at += reclen.max(1);
                if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
                    continue;
                }
                if s.table.len() == cap {
                    break;
                }
                if let Some(p) = stat(s.proc_dir, name) {
                    s.table.push(p);
                }
            }
        }
        // Keep the descendants of `me` at the front, in as many passes as the tree is deep.
        let mut members = 0;
        let mut changed = true;
        while changed {
            changed = false;
            let mut i = members;
            while i < s.table.len() {
                let parent = s.table[i].1;
                if parent == me || s.table[..members].iter().any(|m| m.0 == parent) {
                    s.table.swap(i, members);
                    members += 1;
                    changed = true;
                }
                i += 1;
            }
        }
        // Zombies count as gone; move the live ones first.
        let mut live = 0;
        for i in 0..members {
            if s.table[i].2 != b'Z' {
                s.table.swap(i, live);
                live += 1;
            }
        }
        live
    }
}

/// `/proc/NAME/stat` as (pid, parent, state).
unsafe fn stat(proc_dir: RawFd, name: &[u8]) -> Option<(i32, i32, u8)> {
    let mut path = [0u8; 32];
    let tail = b"/stat\0";
    if name.len() + tail.len() > path.len() {
        return None;
    }
    path[..name.len()].copy_from_slice(name);
    path[name.len()..name.len() + tail.len()].copy_from_slice(tail);
    unsafe {
        let fd = libc::openat(
            proc_dir,
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let mut buf = [0u8; 1024];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        if n <= 0 {
            return None;
        }
        parse_stat(&buf[..n.unsigned_abs()])
    }
}

/// Parses `PID (COMM) STATE PPID ...`; COMM may hold any byte, so the fields after it are
/// found from its last `)`.
pub(crate) fn parse_stat(line: &[u8]) -> Option<(i32, i32, u8)> {
    let close = line.iter().rposition(|b| *b == b')')?;
    let open = line.iter().position(|b| *b == b' ')?;
    let pid = number(&line[..open])?;
    let mut rest = line[close + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty());
    let state = *rest.next()?.first()?;
    let parent = number(rest.next()?)?;
    Some((pid, parent, state))
}

fn number(digits: &[u8]) -> Option<i32> {
    if digits.is_empty() || digits.len() > 10 {
        return None;
    }
    let mut n: i64 = 0;
    for d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(d - b'0');
    }
    i32::try_from(n).ok()
}

fn decimal(n: i32, buf: &mut [u8; 12]) -> &[u8] {
    let mut v = n.unsigned_abs();
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + u8::try_from(v % 10).unwrap_or(0);
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[at..]
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Closes every descriptor from 3 up except `keep` (its -1 entries are ignored).
unsafe fn close_others(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut from = 3;
    for &k in keep.iter().filter(|k| **k >= 3) {
        if k > from {
            unsafe { close_range(from, k - 1) };
        }
        from = from.max(k + 1);
    }
    unsafe { close_range(from, RawFd::MAX) };
}

unsafe fn close_range(first: RawFd, last: RawFd) {
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, last, 0) != 0 {
            for fd in first..=last.min(4095) {
                libc::close(fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{decimal, parse_stat};

    #[test]
    fn keeper_a_stat_line_parses_whatever_the_command_name_holds() {
        let line = b"4242 (a (we\xffird) name) S 17 4242 4242 0 -1 4194560 100 0 0 0";
        assert_eq!(parse_stat(line), Some((4242, 17, b'S')));
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"12 (x) Z"), None);
    }

    #[test]
    fn keeper_pids_are_written_in_decimal() {
        let mut b = [0u8; 12];
        assert_eq!(decimal(0, &mut b), b"0");
        assert_eq!(decimal(4_194_304, &mut b), b"4194304");
    }
}
