//! The holder's own deadline: when, by its monotonic clock, a holder must count its Lease as
//! ended and have its work stopped — whatever requests are still pending.
//!
//! A holder's Lease ends at *(the instant its last successful renewal was sent) + duration −
//! margin*. Recovery ([`crate::recovery::Recovery::watch`]) takes a Lease over only after a read
//! sent a full duration after its first read returned still shows the same resourceVersion;
//! that first read was served after the renewal it shows was applied, which is after the
//! renewal was sent. So recovery's takeover comes at least one duration (by recovery's clock)
//! after the send instant the holder's deadline counts from; the margin absorbs the two
//! clocks running at different rates and the wake-up latency of the holder's timer. The
//! inequality and its assumptions are in `docs/design/protocol.md` ("The holder's deadline").
//!
//! Everything here is pure: offsets from the renewal's send instant.

use std::time::Duration;

/// The fraction of the duration kept as margin: `duration / MARGIN_DIVISOR`. It covers the
/// holder's and recovery's monotonic clocks running at different rates (NTP slews a clock by
/// at most 500 ppm; a throttled VM can drift far more, so the margin allows a combined 10 %).
pub const MARGIN_DIVISOR: u32 = 10;

/// The fixed part of the margin: the holder's timer waking late (a loaded machine), the
/// SIGKILL reaching the command's processes after it is sent.
pub const MARGIN_FIXED: Duration = Duration::from_millis(500);

/// The most the command is killed before the holder's deadline (at most a tenth of the
/// holder's window): the time SIGKILL and reaping take.
pub const KILL_SLACK: Duration = Duration::from_secs(1);

/// The margin a holder keeps below the Lease duration:
/// `duration / MARGIN_DIVISOR + MARGIN_FIXED`, never more than the duration itself.
#[must_use]
pub fn margin(duration: Duration) -> Duration {
    (duration / MARGIN_DIVISOR + MARGIN_FIXED).min(duration)
}

/// When, after the send instant of its last successful renewal, the work of a holder is
/// stopped and when its Lease ends, by the holder's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SelfFence {
    /// The work's `Cancel` is stopped (the command gets SIGTERM).
    pub stop_work: Duration,
    /// The work is hurried (the command gets SIGKILL), before [`SelfFence::ends`].
    pub kill_work: Duration,
    /// The holder's Lease ends: no request of the holder is waited for past it, and every
    /// later assert fails.
    pub ends: Duration,
}

/// Decides the holder's stop times for a Lease of `duration` whose work wants `kill_grace`
/// between SIGTERM and SIGKILL.
///
/// # Guarantees
/// `stop_work <= kill_work < ends <= duration - margin(duration)` (`kill_work == ends` only
/// for a zero window). The SIGTERM lead is the grace, shortened to a quarter of the time
/// before the kill so a healthy heartbeat (renewing every quarter duration) never stops the
/// work; the SIGKILL lands [`KILL_SLACK`] (at most a tenth of the window) before the end.
#[must_use]
pub fn self_fence(duration: Duration, kill_grace: Duration) -> SelfFence {
    let ends = duration.saturating_sub(margin(duration));
    let slack = (ends / 10).min(KILL_SLACK);
    let kill_work = ends.saturating_sub(slack);
    let stop_work = kill_work.saturating_sub(kill_grace.min(kill_work / 4));
    SelfFence {
        stop_work,
        kill_work,
        ends,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_deadline_stop_times_fall_inside_the_holder_window() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        // (duration, grace) -> (stop, kill, ends)
        let table = [
            // The default: 60 s, grace 5 s: margin 6.5 s, kill 1 s before, SIGTERM 5 s earlier.
            ((s(60), s(5)), (ms(47_500), ms(52_500), ms(53_500))),
            // 10 s (the config): margin 1.5 s; the grace is cut to a quarter.
            ((s(10), s(5)), (ms(5_737), ms(7_650), ms(8_500))),
            ((s(10), ms(500)), (ms(7_150), ms(7_650), ms(8_500))),
            // The shortest duration the CLI accepts.
            ((s(2), s(5)), (ms(878), ms(1_170), ms(1_300))),
            ((s(2), Duration::ZERO), (ms(1_170), ms(1_170), ms(1_300))),
            // A duration below the margin leaves no window at all.
            (
                (ms(400), s(1)),
                (Duration::ZERO, Duration::ZERO, Duration::ZERO),
            ),
        ];
        for ((duration, grace), (stop, kill, ends)) in table {
            let got = self_fence(duration, grace);
            let near = |a: Duration, b: Duration| a.abs_diff(b) <= ms(1);
            assert!(
                near(got.stop_work, stop) && near(got.kill_work, kill) && near(got.ends, ends),
                "{duration:?} {grace:?}: {got:?}"
            );
        }
    }

    #[test]
    fn lease_deadline_order_holds_for_every_duration_and_grace() {
        for d_ms in (0..=120_000).step_by(250) {
            for g_ms in [0, 100, 1_000, 5_000, 30_000, 600_000] {
                let d = Duration::from_millis(d_ms);
                let f = self_fence(d, Duration::from_millis(g_ms));
                assert!(f.stop_work <= f.kill_work, "{d:?}: {f:?}");
                assert!(f.kill_work <= f.ends, "{d:?}: {f:?}");
                assert!(f.ends + margin(d) <= d, "{d:?}: {f:?}");
                if !f.ends.is_zero() {
                    assert!(f.kill_work < f.ends, "{d:?}: {f:?}");
                }
                // A healthy heartbeat renews every quarter duration: the work is never
                // stopped before the next renewal is due.
                if d >= Duration::from_secs(2) {
                    assert!(f.stop_work > d / 4, "{d:?}: {f:?}");
                }
            }
        }
    }

    #[test]
    fn lease_deadline_margin_is_a_tenth_plus_half_a_second() {
        assert_eq!(margin(Duration::from_mins(1)), Duration::from_millis(6_500));
        assert_eq!(
            margin(Duration::from_secs(10)),
            Duration::from_millis(1_500)
        );
        assert_eq!(
            margin(Duration::from_millis(300)),
            Duration::from_millis(300)
        );
    }
}
