//! Where a credential is read from (never argv) and how its text is understood.

use std::path::PathBuf;

use secrecy::{ExposeSecret, SecretString};

use crate::error::GhcrError;

/// Where the credential comes from. There is deliberately no argv variant: command lines are
/// visible to every process on the machine and end up in shell history and CI logs.
#[derive(Debug, Clone, PartialEq, Eq)]
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

impl CredentialSource {
    /// Reads the raw credential text.
    ///
    /// # Errors
    /// [`GhcrError::CredentialMissing`] when the variable is unset or the text is blank,
    /// [`GhcrError::ReadCredential`] when the file or stdin cannot be read.
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
                std::fs::read_to_string(path).map_err(|source| GhcrError::ReadCredential {
                    from: self.describe(),
                    source,
                })?
            }
            Self::Stdin => std::io::read_to_string(std::io::stdin()).map_err(|source| {
                GhcrError::ReadCredential {
                    from: self.describe(),
                    source,
                }
            })?,
        };
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
