//! What the wait has seen of the Lease, and when its holder can next be asked about.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::jiff::Timestamp;

use super::Asked;

/// How long until the holder of a Lease unchanged for `unchanged_for` can be asked about
/// again (`duration`: its own), given when it was last `asked` about; `Duration::MAX` when
/// recovery is off.
pub(super) fn next_ask(duration: Duration, unchanged_for: Duration, asked: Asked) -> Duration {
    let since_asked = match asked {
        Asked::Off => return Duration::MAX,
        Asked::Never => Duration::MAX,
        Asked::Ago(ago) => ago,
    };
    duration
        .saturating_sub(unchanged_for)
        .max(duration.saturating_sub(since_asked))
}

/// The Lease's `acquireTime`, when set.
pub(super) fn acquired(read: Option<&KubeLease>) -> Option<Timestamp> {
    read.and_then(|l| l.spec.as_ref())
        .and_then(|s| s.acquire_time.as_ref())
        .map(|t| t.0)
}

/// What the wait has seen of the Lease: the version last read and when the first read of it
/// returned; with recovery, the holder last asked about, when, and why it was not recovered.
#[derive(Default)]
pub(super) struct Seen {
    version: Option<(String, Instant)>,
    pub(super) asked: Option<(String, Instant, Option<String>)>,
}

impl Seen {
    /// Notes `read` (sent at `sent`): its version, how long it has stood unchanged, and when
    /// its holder was last asked about (`recover`: whether recovery is on).
    pub(super) fn update(
        &mut self,
        read: Option<&KubeLease>,
        sent: Instant,
        recover: bool,
    ) -> (String, Duration, Asked) {
        let version = read
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let unchanged_for = match &self.version {
            Some((v, since)) if *v == version => sent.saturating_duration_since(*since),
            _ => {
                self.version = Some((version.clone(), Instant::now()));
                Duration::ZERO
            }
        };
        let holder = read
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref())
            .unwrap_or_default();
        let asked = match &self.asked {
            _ if !recover => Asked::Off,
            Some((h, at, _)) if h == holder => Asked::Ago(at.elapsed()),
            _ => Asked::Never,
        };
        (version, unchanged_for, asked)
    }

    /// Why `holder` was not recovered when last asked about.
    pub(super) fn not_finished(&self, holder: &str) -> Option<String> {
        self.asked
            .as_ref()
            .filter(|(h, ..)| h == holder)
            .and_then(|(_, _, why)| why.clone())
    }
}
