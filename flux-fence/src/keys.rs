//! The annotation (and label) keys a fence writes.

pub use crate::holder::HOLDER_MAX_LEN;

/// Default annotation prefix.
pub const DEFAULT_PREFIX: &str = "flux-handoff.io";

/// The keys of the owner, prior and reason annotations under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnnotationKeys {
    /// `<prefix>/owner`: `holder;epoch`.
    pub owner: String,
    /// `<prefix>/prior`: compact JSON recording the fence time and each mark's prior value.
    pub prior: String,
    /// `<prefix>/reason`: free text from the caller.
    pub reason: String,
    /// `<prefix>/parked` on the Lease: the holder that deliberately left it held (a pause
    /// meant to outlive its process), so recovery does not mistake it for a crashed run.
    pub parked: String,
    /// `<prefix>/duration` on the Lease: the holder's own lease duration in whole seconds,
    /// written by the holder with its `leaseDurationSeconds` on every acquire, take-over,
    /// recovery and renewal. Readers that judge the holder's liveness wait for the longer of
    /// the two ([`crate::lease_decide::holder_duration`]), so an edited
    /// `leaseDurationSeconds` can only lengthen a wait, never shorten it.
    pub duration: String,
    /// `<prefix>/fenced`: a label (value [`FENCED_LABEL_VALUE`]) written and removed in the
    /// same CAS patch as the owner annotation, so fences are listed with a server-side label
    /// selector instead of reading every object.
    pub fenced_label: String,
    /// `<prefix>/lease` on a fenced object: the Lease (`namespace/name`) the fence was taken
    /// under, written as a mark of the fence, so recovery judges a fence by its own Lease.
    pub lease: String,
    /// `<prefix>/chain` on the Lease: the record of every object its holder has fenced or is
    /// about to fence (`crate::lease_record::ChainRecord`), written with the Lease's CAS before each fence.
    pub chain: String,
    /// `<prefix>/max-hold` on the Lease and on each fence: how long the holder means to hold
    /// its pause (a human duration such as `2h`), written with the holder's duration on every
    /// write of the Lease and as a mark of each fence (removed on release). Listings name a
    /// pause held longer as overdue ([`crate::recovery::overdue`]); nothing is ever released
    /// because of it.
    pub max_hold: String,
}

/// The value of the fenced label.
pub const FENCED_LABEL_VALUE: &str = "true";

impl AnnotationKeys {
    /// Keys under `prefix` (a DNS subdomain such as `flux-handoff.io`).
    #[must_use]
    pub fn with_prefix(prefix: &str) -> Self {
        Self {
            owner: format!("{prefix}/owner"),
            prior: format!("{prefix}/prior"),
            reason: format!("{prefix}/reason"),
            parked: format!("{prefix}/parked"),
            duration: format!("{prefix}/duration"),
            fenced_label: format!("{prefix}/fenced"),
            lease: format!("{prefix}/lease"),
            chain: format!("{prefix}/chain"),
            max_hold: format!("{prefix}/max-hold"),
        }
    }

    /// Keys under `prefix`, only if it is a valid annotation prefix: a DNS subdomain (lowercase
    /// letters, digits, `-` and `.`; dot-separated labels of 1–63 characters that start and
    /// end with a letter or digit; at most 253 characters), as the API server requires.
    ///
    /// # Errors
    /// One line naming the prefix and the rule it breaks.
    pub fn checked(prefix: &str) -> Result<Self, String> {
        if is_dns_subdomain(prefix) {
            Ok(Self::with_prefix(prefix))
        } else {
            Err(format!(
                "annotation prefix {prefix:?} is not a DNS subdomain (e.g. flux-handoff.io)"
            ))
        }
    }

    /// The label selector matching every object carrying the fenced label.
    #[must_use]
    pub fn fenced_selector(&self) -> String {
        format!("{}={FENCED_LABEL_VALUE}", self.fenced_label)
    }

    /// Whether `key` is one of the three keys the fence itself manages.
    #[must_use]
    pub fn is_own(&self, key: &str) -> bool {
        key == self.owner || key == self.prior || key == self.reason
    }
}

impl Default for AnnotationKeys {
    fn default() -> Self {
        Self::with_prefix(DEFAULT_PREFIX)
    }
}

/// Whether `s` is a DNS label (RFC 1123): 1 to 63 of `a-z0-9-`, not starting or ending in `-`.
/// Namespaces are labels.
#[must_use]
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS subdomain: at most 253 characters of dot-separated labels. Object
/// names and annotation prefixes are subdomains.
#[must_use]
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_prefix_accepts_dns_subdomains_only() {
        for good in ["flux-handoff.io", "a", "ops.example.com", "x1-y2.z"] {
            assert!(AnnotationKeys::checked(good).is_ok(), "{good}");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "a/b",
            "Flux.io",
            "-a.io",
            "a-.io",
            "a..io",
            ".a",
            "a.",
            "a b",
            "a_b",
            "é.io",
            long.as_str(),
            "a\nb",
        ] {
            let err = AnnotationKeys::checked(bad).unwrap_err();
            assert_eq!(err.lines().count(), 1, "{bad}");
        }
        assert!(
            AnnotationKeys::checked(&"a.".repeat(127)).is_err(),
            "over 253"
        );
    }
}
