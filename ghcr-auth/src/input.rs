//! Where a credential is read from (never argv) and how its text is understood.

use std::io::Read;
use std::path::PathBuf;

use secrecy::{ExposeSecret, SecretString};

use crate::error::GhcrError;

/// Where the credential comes from. There is deliberately no argv variant: command lines are
/// visible to every process on the machine and end up in shell history and CI logs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialSource {
    /// An environment variable, by name.
    Env(String),
    /// A file, by path.
    File(PathBuf),
    /// Standard input, read to the end.
    Stdin,
}

/// How the credential text is to be understood.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialFormat {
    /// A whole Docker config (`{"auths": {...}}`).
    DockerConfig,
    /// A bare token (e.g. a GitHub token) for one registry and username.
    Token {
        /// Registry host, e.g. `ghcr.io`.
        registry: String,
        /// The username to pair with the token.
        username: String,
    },
}

/// The most a credential source may hold. A Docker config for a handful of registries is a
/// few KiB; the bound keeps a wrong path (`/dev/zero`, a log file) from being read forever.
pub const MAX_CREDENTIAL_BYTES: u64 = 1024 * 1024;

impl CredentialSource {
    /// Reads the raw credential text.
    ///
    /// # Errors
    /// [`GhcrError::CredentialMissing`] when the variable is unset or the text is blank,
    /// [`GhcrError::ReadCredential`] when the file or stdin cannot be read, is not UTF-8, or
    /// holds more than [`MAX_CREDENTIAL_BYTES`].
    pub fn read(&self) -> Result<SecretString, GhcrError> {
        let text = match self {
            Self::Env(name) => match std::env::var(name) {
                Ok(v) => v,
                Err(std::env::VarError::NotPresent) => {
                    return Err(GhcrError::CredentialMissing {
                        from: self.describe(),
                    });
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(GhcrError::ReadCredential {
                        from: self.describe(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "the value is not UTF-8",
                        ),
                    });
                }
            },
            Self::File(path) => {
                std::fs::File::open(path)
                    .and_then(read_bounded)
                    .map_err(|source| GhcrError::ReadCredential {
                        from: self.describe(),
                        source,
                    })?
            }
            Self::Stdin => {
                read_bounded(std::io::stdin()).map_err(|source| GhcrError::ReadCredential {
                    from: self.describe(),
                    source,
                })?
            }
        };
        if text.len() as u64 > MAX_CREDENTIAL_BYTES {
            return Err(GhcrError::ReadCredential {
                from: self.describe(),
                source: too_large(),
            });
        }
        let text = SecretString::from(text);
        if text.expose_secret().trim().is_empty() {
            return Err(GhcrError::CredentialMissing {
                from: self.describe(),
            });
        }
        Ok(text)
    }

    /// Where this source reads from, for messages (never the content).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Env(name) => format!("environment variable {name}"),
            Self::File(path) => format!("file {}", path.display()),
            Self::Stdin => "standard input".to_string(),
        }
    }
}

/// Reads `r` to its end as UTF-8, failing once it passed [`MAX_CREDENTIAL_BYTES`].
fn read_bounded(r: impl Read) -> std::io::Result<String> {
    let mut text = String::new();
    r.take(MAX_CREDENTIAL_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CREDENTIAL_BYTES {
        return Err(too_large());
    }
    Ok(text)
}

fn too_large() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("more than {MAX_CREDENTIAL_BYTES} bytes: not a credential"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_credential_file_fails_at_the_bound_instead_of_reading_forever() {
        let e = CredentialSource::File("/dev/zero".into())
            .read()
            .unwrap_err();
        let line = crate::error::GhcrError::to_string(&e);
        assert!(line.contains("file /dev/zero"), "{line}");
        let source = std::error::Error::source(&e).unwrap().to_string();
        assert!(source.contains("more than 1048576 bytes"), "{source}");
    }

    #[test]
    fn a_credential_at_the_bound_is_read_and_one_byte_more_is_not() {
        let at = "a".repeat(usize::try_from(MAX_CREDENTIAL_BYTES).unwrap());
        assert_eq!(read_bounded(at.as_bytes()).unwrap().len(), at.len());
        let over = format!("{at}b");
        assert!(read_bounded(over.as_bytes()).is_err());
    }
}
