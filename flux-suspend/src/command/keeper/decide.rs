//! The keeper's decisions, pure: when the command's tree must end, how (SIGTERM first, SIGKILL
//! when its time comes), and when the keeper may exit. Times are nanoseconds on
//! `CLOCK_BOOTTIME`, which keeps counting while the machine is suspended. The I/O is in the
//! `child` module; nothing here allocates, as the keeper runs in a forked process.

/// What the keeper was told or saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The holder renewed its Lease: its work must get SIGTERM at `term_at` and be killed at
    /// `kill_at` unless a later renewal moves both.
    Deadline { term_at: u64, kill_at: u64 },
    /// The holder stops the work: SIGTERM now, SIGKILL at `kill_at`.
    Stop { kill_at: u64 },
    /// The holder hurries: SIGKILL now.
    Hurry,
    /// The holder's pipe reached end-of-file or carried garbage: the holder is gone (killed,
    /// crashed, exited) or cannot be trusted.
    HolderGone,
    /// Someone on this machine (`resume --holder-exited`, the Action's post step) asked that
    /// the holder's work end before they release its fences.
    Asked,
    /// The command itself exited: whatever it left running ends too.
    CommandExited,
}

/// Why the tree is being ended, for the keeper's own record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    CommandExited,
    Stopped,
    Hurried,
    HolderGone,
    Deadline,
    Asked,
}

/// What the keeper does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// Nothing to do until an event, or until `Some(t)` (a deadline).
    Wait(Option<u64>),
    /// SIGTERM (and SIGCONT, so a stopped process can act on it) to the whole tree.
    Term,
    /// SIGKILL to the whole tree (`cgroup.kill` where the tree has a cgroup).
    Kill,
    /// The tree is gone and the command reaped: exit with the command's status.
    Exit,
    /// SIGKILL did not empty the tree within [`State::give_up`]: exit all the same (a process
    /// of another user, or stuck in the kernel), saying so in the exit status.
    GiveUp,
}

/// How often the keeper looks at the tree while it ends, in nanoseconds.
pub(crate) const SWEEP_NS: u64 = 10_000_000;

/// The keeper's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    /// Between SIGTERM and SIGKILL, in nanoseconds.
    pub grace: u64,
    /// How long the tree may take to vanish after SIGKILL, in nanoseconds.
    pub kill_wait: u64,
    /// The holder's last deadline, if any.
    pub deadline: Option<(u64, u64)>,
    /// Once the end began: why, when SIGKILL is due, whether SIGTERM and SIGKILL were sent.
    pub ending: Option<Ending>,
    /// The command (the keeper's only direct child at the start) was reaped.
    pub command_done: bool,
}

/// The end of the tree, once begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ending {
    pub why: Why,
    pub kill_at: u64,
    pub termed: bool,
    /// When the first SIGKILL was sent.
    pub killed_at: Option<u64>,
}

impl State {
    pub(crate) const fn new(grace: u64, kill_wait: u64, deadline: Option<(u64, u64)>) -> Self {
        Self {
            grace,
            kill_wait,
            deadline,
            ending: None,
            command_done: false,
        }
    }

    /// SIGKILL is never later than the holder's own kill time.
    fn capped(&self, at: u64) -> u64 {
        self.deadline.map_or(at, |(_, kill)| at.min(kill))
    }

    fn begin(&mut self, why: Why, kill_at: u64) {
        match &mut self.ending {
            // Already ending: only ever sooner (a hurry after a stop).
            Some(e) => e.kill_at = e.kill_at.min(kill_at),
            None => {
                self.ending = Some(Ending {
                    why,
                    kill_at,
                    termed: false,
                    killed_at: None,
                });
            }
        }
    }

    /// Takes in one event at `now`.
    pub(crate) fn on(&mut self, event: Event, now: u64) {
        match event {
            Event::Deadline { term_at, kill_at } => {
                // Once the end began it is not taken back by a late renewal.
                if self.ending.is_none() {
                    self.deadline = Some((term_at, kill_at.max(term_at)));
                }
            }
            Event::Stop { kill_at } => {
                let at = self.capped(kill_at);
                self.begin(Why::Stopped, at);
            }
            Event::Hurry => self.begin(Why::Hurried, now),
            Event::HolderGone => {
                let at = self.capped(now.saturating_add(self.grace));
                self.begin(Why::HolderGone, at);
            }
            Event::Asked => {
                let at = self.capped(now.saturating_add(self.grace));
                self.begin(Why::Asked, at);
            }
            Event::CommandExited => {
                self.command_done = true;
                let at = self.capped(now.saturating_add(self.grace));
                self.begin(Why::CommandExited, at);
            }
        }
    }

    /// What to do at `now`, given whether any process of the tree (the command included)
    /// still runs. Call it after every event and every wake-up; it records what it decides.
    pub(crate) fn next(&mut self, now: u64, tree_alive: bool) -> Act {
        if self.ending.is_none()
            && let Some((term_at, kill_at)) = self.deadline
            && now >= term_at
        {
            self.begin(Why::Deadline, kill_at);
        }
        let Some(e) = &mut self.ending else {
            return Act::Wait(self.deadline.map(|(term_at, _)| term_at));
        };
        if !tree_alive {
            // The command's own status is needed for the exit; it is reaped as it ends.
            return if self.command_done {
                Act::Exit
            } else {
                Act::Wait(Some(now.saturating_add(SWEEP_NS)))
            };
        }
        if now >= e.kill_at {
            let first = *e.killed_at.get_or_insert(now);
            if now >= first.saturating_add(self.kill_wait) {
                return Act::GiveUp;
            }
            return Act::Kill;
        }
        if !e.termed {
            e.termed = true;
            return Act::Term;
        }
        Act::Wait(Some(now.saturating_add(SWEEP_NS).min(e.kill_at)))
    }

    /// Why the tree is ending, once it is.
    pub(crate) fn why(&self) -> Option<Why> {
        self.ending.map(|e| e.why)
    }
}

/// One message from the holder: a tag byte and two little-endian `u64`s.
pub(crate) const MSG_LEN: usize = 17;
const TAG_DEADLINE: u8 = 1;
const TAG_STOP: u8 = 2;
const TAG_HURRY: u8 = 3;

/// Encodes an event for the pipe (only the holder's three kinds travel).
pub(crate) fn encode(event: Event) -> Option<[u8; MSG_LEN]> {
    let (tag, a, b) = match event {
        Event::Deadline { term_at, kill_at } => (TAG_DEADLINE, term_at, kill_at),
        Event::Stop { kill_at } => (TAG_STOP, kill_at, 0),
        Event::Hurry => (TAG_HURRY, 0, 0),
        _ => return None,
    };
    let mut m = [0u8; MSG_LEN];
    m[0] = tag;
    m[1..9].copy_from_slice(&a.to_le_bytes());
    m[9..].copy_from_slice(&b.to_le_bytes());
    Some(m)
}

/// The byte the keeper writes to its report pipe just before it exits: why the tree ended
/// (0 when it never began to end, which [`State::next`] does not let happen).
pub(crate) const fn report(why: Option<Why>) -> u8 {
    match why {
        None => 0,
        Some(Why::CommandExited) => 1,
        Some(Why::Stopped) => 2,
        Some(Why::Hurried) => 3,
        Some(Why::HolderGone) => 4,
        Some(Why::Deadline) => 5,
        Some(Why::Asked) => 6,
    }
}

/// Reads the keeper's report byte back; `None` for no report (a keeper that was killed) or a
/// byte no keeper writes.
pub(crate) const fn reported(byte: u8) -> Option<Why> {
    match byte {
        1 => Some(Why::CommandExited),
        2 => Some(Why::Stopped),
        3 => Some(Why::Hurried),
        4 => Some(Why::HolderGone),
        5 => Some(Why::Deadline),
        6 => Some(Why::Asked),
        _ => None,
    }
}

/// Decodes one message; anything else means the holder cannot be trusted any more.
pub(crate) fn decode(m: &[u8; MSG_LEN]) -> Event {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&m[1..9]);
    b.copy_from_slice(&m[9..]);
    let (a, b) = (u64::from_le_bytes(a), u64::from_le_bytes(b));
    match m[0] {
        TAG_DEADLINE => Event::Deadline {
            term_at: a,
            kill_at: b,
        },
        TAG_STOP => Event::Stop { kill_at: a },
        TAG_HURRY => Event::Hurry,
        _ => Event::HolderGone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn state() -> State {
        // Grace 2 s, kill wait 3 s, the holder's deadline: SIGTERM at 50 s, SIGKILL at 55 s.
        State::new(2 * S, 3 * S, Some((50 * S, 55 * S)))
    }

    #[test]
    fn keeper_waits_for_the_deadline_while_the_holder_renews() {
        let mut s = state();
        assert_eq!(s.next(10 * S, true), Act::Wait(Some(50 * S)));
        s.on(
            Event::Deadline {
                term_at: 80 * S,
                kill_at: 85 * S,
            },
            20 * S,
        );
        assert_eq!(s.next(60 * S, true), Act::Wait(Some(80 * S)));
        // No deadline known (none sent yet): only events end the tree.
        let mut none = State::new(S, S, None);
        assert_eq!(none.next(u64::MAX / 2, true), Act::Wait(None));
    }

    #[test]
    fn keeper_ends_the_tree_when_the_holder_goes_silent_past_its_deadline() {
        // A stopped, starved or suspended holder sends nothing: the deadline ends the tree.
        let mut s = state();
        assert_eq!(s.next(50 * S, true), Act::Term);
        assert_eq!(s.why(), Some(Why::Deadline));
        assert_eq!(s.next(51 * S, true), Act::Wait(Some(51 * S + SWEEP_NS)));
        assert_eq!(s.next(55 * S, true), Act::Kill);
        // Suspended past both: SIGKILL at once, no SIGTERM first.
        let mut late = state();
        assert_eq!(late.next(70 * S, true), Act::Kill);
    }

    #[test]
    fn keeper_a_holder_gone_ends_the_tree_after_the_grace_never_past_its_deadline() {
        let mut s = state();
        s.on(Event::HolderGone, 10 * S);
        assert_eq!(s.next(10 * S, true), Act::Term);
        assert_eq!(s.next(11 * S, true), Act::Wait(Some(11 * S + SWEEP_NS)));
        assert_eq!(s.next(12 * S, true), Act::Kill);
        // Gone one second before the holder's kill time: SIGKILL comes at that time.
        let mut s = state();
        s.on(Event::HolderGone, 54 * S);
        assert_eq!(s.next(54 * S, true), Act::Term);
        assert_eq!(s.next(55 * S, true), Act::Kill);
    }

    #[test]
    fn keeper_a_late_renewal_does_not_take_the_end_back() {
        let mut s = state();
        s.on(Event::Asked, 10 * S);
        s.on(
            Event::Deadline {
                term_at: 90 * S,
                kill_at: 95 * S,
            },
            10 * S,
        );
        assert_eq!(s.next(10 * S, true), Act::Term);
        assert_eq!(s.why(), Some(Why::Asked));
        assert_eq!(s.next(12 * S, true), Act::Kill);
    }

    #[test]
    fn keeper_a_hurry_kills_at_once_a_stop_terms_first() {
        let mut s = state();
        s.on(Event::Stop { kill_at: 30 * S }, 10 * S);
        assert_eq!(s.next(10 * S, true), Act::Term);
        s.on(Event::Hurry, 11 * S);
        assert_eq!(s.next(11 * S, true), Act::Kill);
        // A stop asking for a kill later than the holder's own kill time is capped.
        let mut s = state();
        s.on(Event::Stop { kill_at: 99 * S }, 10 * S);
        assert_eq!(s.next(10 * S, true), Act::Term);
        assert_eq!(s.next(55 * S, true), Act::Kill);
    }

    #[test]
    fn keeper_exits_only_once_the_tree_is_empty_and_the_command_reaped() {
        let mut s = state();
        s.on(Event::CommandExited, 10 * S);
        // Leftovers still run: SIGTERM them.
        assert_eq!(s.next(10 * S, true), Act::Term);
        assert_eq!(s.next(10 * S + 1, false), Act::Exit);
        // The holder stopped it and the tree is empty, but the command is not reaped yet.
        let mut s = state();
        s.on(Event::Hurry, 10 * S);
        assert_eq!(s.next(10 * S, false), Act::Wait(Some(10 * S + SWEEP_NS)));
        s.on(Event::CommandExited, 10 * S);
        assert_eq!(s.next(10 * S, false), Act::Exit);
    }

    #[test]
    fn keeper_gives_up_on_processes_that_survive_sigkill() {
        let mut s = state();
        s.on(Event::Hurry, 10 * S);
        assert_eq!(s.next(10 * S, true), Act::Kill);
        assert_eq!(s.next(12 * S, true), Act::Kill);
        assert_eq!(s.next(13 * S, true), Act::GiveUp);
    }

    #[test]
    fn keeper_messages_round_trip_and_garbage_means_the_holder_is_gone() {
        for e in [
            Event::Deadline {
                term_at: 7,
                kill_at: u64::MAX,
            },
            Event::Stop { kill_at: 42 },
            Event::Hurry,
        ] {
            assert_eq!(decode(&encode(e).unwrap()), e);
        }
        assert_eq!(encode(Event::Asked), None);
        assert_eq!(decode(&[9; MSG_LEN]), Event::HolderGone);
    }

    #[test]
    fn keeper_reports_why_the_tree_ended_in_one_byte() {
        for why in [
            Why::CommandExited,
            Why::Stopped,
            Why::Hurried,
            Why::HolderGone,
            Why::Deadline,
            Why::Asked,
        ] {
            assert_eq!(reported(report(Some(why))), Some(why));
        }
        assert_eq!(reported(report(None)), None);
        assert_eq!(reported(0xff), None);
        // The deadline's report: a holder silent past it (stopped, starved, cut off).
        let mut s = state();
        assert_eq!(s.next(50 * S, true), Act::Term);
        assert_eq!(reported(report(s.why())), Some(Why::Deadline));
    }
}
