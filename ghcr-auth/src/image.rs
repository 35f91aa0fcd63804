//! Image references (`ghcr.io/owner/app:1.2`, `127.0.0.1:5000/team/app@sha256:...`).

use std::fmt;
use std::str::FromStr;

use crate::error::GhcrError;

/// A parsed image reference with an explicit registry host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    registry: String,
    repository: String,
    reference: String,
}

impl ImageRef {
    /// The registry host (`ghcr.io`, `127.0.0.1:5000`).
    #[must_use]
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository path (`owner/app`).
    #[must_use]
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag or digest (`1.2`, `sha256:...`).
    #[must_use]
    pub fn reference(&self) -> &str {
        &self.reference
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if self.reference.contains(':') {
            '@'
        } else {
            ':'
        };
        write!(
            f,
            "{}/{}{sep}{}",
            self.registry, self.repository, self.reference
        )
    }
}

impl FromStr for ImageRef {
    type Err = GhcrError;

    /// Parses `[oci://]host[:port]/path[:tag|@digest]`; the tag defaults to `latest`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |problem| GhcrError::InvalidImageRef {
            reference: s.to_string(),
            problem,
        };
        let text = s.strip_prefix("oci://").unwrap_or(s);
        let (registry, rest) = text
            .split_once('/')
            .ok_or_else(|| bad("it has no repository path after the registry"))?;
        let is_host = registry.contains('.') || registry.contains(':') || registry == "localhost";
        if !is_host
            || !registry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        {
            return Err(bad(
                "it must start with a registry host (with a dot or a port)",
            ));
        }
        let (repository, reference) = if let Some((repo, digest)) = rest.split_once('@') {
            if !valid_digest(digest) {
                return Err(bad("the digest is not `algorithm:hex`"));
            }
            (repo, digest.to_string())
        } else {
            match rest.rsplit_once(':') {
                Some((repo, tag)) if !tag.contains('/') => {
                    if !valid_tag(tag) {
                        return Err(bad("the tag is not valid"));
                    }
                    (repo, tag.to_string())
                }
                _ => (rest, "latest".to_string()),
            }
        };
        if !repository.split('/').all(valid_component) {
            return Err(bad("the repository path is not lowercase `name/name`"));
        }
        Ok(Self {
            registry: registry.to_ascii_lowercase(),
            repository: repository.to_string(),
            reference,
        })
    }
}

fn valid_component(c: &str) -> bool {
    let bytes = c.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(b))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

fn valid_tag(t: &str) -> bool {
    let bytes = t.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(b))
}

fn valid_digest(d: &str) -> bool {
    let Some((algo, hex)) = d.split_once(':') else {
        return false;
    };
    !algo.is_empty()
        && algo
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b))
        && hex.len() >= 32
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
}
