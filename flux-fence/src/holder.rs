//! Who holds a fence: the transaction identity ([`Holder`]), the fencing token ([`Epoch`]) and
//! the owner annotation value that carries both ([`OwnerValue`]).

use std::fmt;
use std::str::FromStr;

use crate::FenceError;

/// Longest holder accepted. It goes into annotation values and a Lease `holderIdentity`.
pub(crate) const HOLDER_MAX_LEN: usize = 63;

/// Length of the random suffix of a generated holder.
const SUFFIX_LEN: usize = 6;

/// The identity of one transaction, e.g. `gh38510782818.1-7f3a9c` or
/// `local-build01-4242-k2m9xq`.
///
/// Restricted to `[a-z0-9.-]`, starting and ending with `[a-z0-9]`, at most
/// `HOLDER_MAX_LEN` characters; so it never contains the `;` of an [`OwnerValue`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Holder(String);

impl Holder {
    /// A fresh holder for this process: from `GITHUB_RUN_ID` and `GITHUB_RUN_ATTEMPT` when both
    /// are set and numeric, else from the host name and process id.
    #[must_use]
    pub fn generate() -> Self {
        let run = std::env::var("GITHUB_RUN_ID").ok();
        let attempt = std::env::var("GITHUB_RUN_ATTEMPT").ok();
        if let (Some(run), Some(attempt)) = (run, attempt)
            && let Ok(holder) = Self::for_ci_run(&run, &attempt)
        {
            return holder;
        }
        Self::local(&host_name(), std::process::id())
    }

    /// `gh<run>.<attempt>-<6 random [a-z0-9]>`.
    ///
    /// # Errors
    /// [`FenceError::Malformed`] when `run` or `attempt` is not a decimal number.
    pub fn for_ci_run(run: &str, attempt: &str) -> Result<Self, FenceError> {
        let numeric =
            |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
        if !numeric(run) {
            return Err(FenceError::malformed("GitHub run id", run));
        }
        if !numeric(attempt) {
            return Err(FenceError::malformed("GitHub run attempt", attempt));
        }
        format!("gh{run}.{attempt}-{}", random_suffix()).parse()
    }

    /// `local-<host>-<pid>-<6 random [a-z0-9]>`; the host name is lowercased, other characters
    /// become `-`, and it is shortened so the whole fits `HOLDER_MAX_LEN`.
    #[must_use]
    pub fn local(host: &str, pid: u32) -> Self {
        let mut host: String = host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let fixed = "local-".len() + 1 + pid.to_string().len() + 1 + SUFFIX_LEN;
        host.truncate(HOLDER_MAX_LEN.saturating_sub(fixed));
        let host = host.trim_matches('-');
        let host = if host.is_empty() { "host" } else { host };
        Self(format!("local-{host}-{pid}-{}", random_suffix()))
    }

    /// The holder as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Holder {
    type Err = FenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let edge_ok =
            |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let ok = !s.is_empty()
            && s.len() <= HOLDER_MAX_LEN
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && edge_ok(s.bytes().next())
            && edge_ok(s.bytes().last());
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(FenceError::malformed("holder", s))
        }
    }
}

/// The fencing token: grows each time the Lease changes hands. Never 0 for a real holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Epoch {
    type Err = FenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(FenceError::malformed("epoch", s));
        }
        s.parse()
            .map(Epoch)
            .map_err(|_| FenceError::malformed("epoch", s))
    }
}

/// The value of the owner annotation: `holder;epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerValue {
    /// The transaction.
    pub holder: Holder,
    /// The Lease epoch the transaction held when it fenced.
    pub epoch: Epoch,
}

impl OwnerValue {
    /// Pairs a holder with an epoch.
    #[must_use]
    pub fn new(holder: Holder, epoch: Epoch) -> Self {
        Self { holder, epoch }
    }
}

impl fmt::Display for OwnerValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{};{}", self.holder, self.epoch)
    }
}

impl FromStr for OwnerValue {
    type Err = FenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (holder, epoch) = s
            .split_once(';')
            .ok_or_else(|| FenceError::malformed("owner value", s))?;
        let holder = holder
            .parse()
            .map_err(|_| FenceError::malformed("owner value", s))?;
        let epoch = epoch
            .parse()
            .map_err(|_| FenceError::malformed("owner value", s))?;
        Ok(Self { holder, epoch })
    }
}

fn random_suffix() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..SUFFIX_LEN)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect()
}

fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_holder_has_run_attempt_and_random_suffix_and_round_trips() {
        let h = Holder::for_ci_run("38510782818", "1").unwrap();
        let s = h.to_string();
        assert!(s.starts_with("gh38510782818.1-"), "{s}");
        assert_eq!(s.len(), "gh38510782818.1-".len() + 6);
        assert_eq!(s.parse::<Holder>().unwrap(), h);
    }

    #[test]
    fn ci_holder_rejects_non_numeric_run() {
        assert!(Holder::for_ci_run("12;3", "1").is_err());
        assert!(Holder::for_ci_run("123", "").is_err());
    }

    #[test]
    fn local_holder_sanitises_and_bounds_host() {
        let h = Holder::local("My_Host.Example.COM", 4242);
        assert!(
            h.as_str().starts_with("local-my-host-example-com-4242-"),
            "{h}"
        );
        let long = Holder::local(&"x".repeat(200), u32::MAX);
        assert!(long.as_str().len() <= HOLDER_MAX_LEN);
        assert_eq!(long.to_string().parse::<Holder>().unwrap(), long);
        let odd = Holder::local("---", 1);
        assert!(odd.as_str().starts_with("local-host-1-"), "{odd}");
    }

    #[test]
    fn holder_parse_rejects_bad_charset_and_length() {
        for bad in [
            "",
            "A",
            "a;b",
            "a b",
            "-a",
            "a-",
            "a/b",
            &"a".repeat(HOLDER_MAX_LEN + 1),
        ] {
            assert!(bad.parse::<Holder>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn owner_value_round_trips_and_malformed_values_are_errors() {
        let v = OwnerValue::new("gh1.2-abcdef".parse().unwrap(), Epoch(7));
        assert_eq!(v.to_string(), "gh1.2-abcdef;7");
        assert_eq!(v.to_string().parse::<OwnerValue>().unwrap(), v);
        for bad in [
            "",
            ";",
            "h;",
            ";1",
            "h;x",
            "h;1;2",
            "H;1",
            "h;-1",
            "h;99999999999999999999999",
        ] {
            assert!(bad.parse::<OwnerValue>().is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn owner_value_parse_never_panics(s in ".{0,100}") {
            let _ = s.parse::<OwnerValue>();
        }

        #[test]
        fn valid_owner_values_round_trip(h in "[a-z0-9]([a-z0-9.-]{0,40}[a-z0-9])?", e in proptest::num::u64::ANY) {
            let v = OwnerValue::new(h.parse().unwrap(), Epoch(e));
            proptest::prop_assert_eq!(v.to_string().parse::<OwnerValue>().unwrap(), v);
        }
    }
}
