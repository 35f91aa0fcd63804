//! The annotation (and label) keys a fence writes.

pub(crate) mod at_root;

pub(crate) use at_root::AnnotationKeys;

/// Default annotation prefix.
pub(crate) const DEFAULT_PREFIX: &str = "flux-handoff.io";

/// The value of the fenced label.
pub(crate) const FENCED_LABEL_VALUE: &str = "true";

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
    pub(crate) fn is_own(&self, key: &str) -> bool {
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
