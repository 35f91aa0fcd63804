//! Keeping the credential out of output: GitHub Actions masks and a defensive redactor.

use std::fmt;
use std::io::{self, Write};

use secrecy::{ExposeSecret, SecretString};

use crate::credential::DockerConfig;

/// The environment variable GitHub Actions sets to `true` on its runners.
pub const GITHUB_ACTIONS_ENV: &str = "GITHUB_ACTIONS";

/// The `::add-mask::` workflow commands for one credential. Debug shows only the count.
#[derive(Clone)]
pub struct MaskCommands {
    lines: Vec<SecretString>,
}

impl fmt::Debug for MaskCommands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaskCommands")
            .field("lines", &self.lines.len())
            .finish()
    }
}

impl MaskCommands {
    /// One `::add-mask::` line per line of every [`DockerConfig::secret_forms`] form (the runner
    /// masks multi-line values only line by line), with `%`, CR and LF escaped as the workflow
    /// command syntax requires.
    #[must_use]
    pub fn for_config(config: &DockerConfig) -> Self {
        let mut lines = Vec::new();
        for form in config.secret_forms() {
            for line in form.expose_secret().lines() {
                let line = line.trim_end_matches('\r');
                if line.trim().is_empty() {
                    continue;
                }
                let escaped = line.replace('%', "%25");
                lines.push(SecretString::from(format!("::add-mask::{escaped}")));
            }
        }
        Self { lines }
    }

    /// How many commands there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Writes the commands, one per line, and flushes.
    ///
    /// # Errors
    /// Write errors of `out`.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        for line in &self.lines {
            writeln!(out, "{}", line.expose_secret())?;
        }
        out.flush()
    }
}

/// Whether the process runs in GitHub Actions, given the value of [`GITHUB_ACTIONS_ENV`].
#[must_use]
pub fn is_github_actions(value: Option<&str>) -> bool {
    value == Some("true")
}

/// In GitHub Actions — and only there — writes the mask commands for `config` to `out` before
/// anything else is printed. Returns whether it masked.
///
/// # Caveats
/// Call it right after the credential is loaded and before any other output of the run.
///
/// # Errors
/// Write errors of `out`.
pub fn mask_in_github_actions(config: &DockerConfig, out: &mut impl Write) -> io::Result<bool> {
    let env = std::env::var(GITHUB_ACTIONS_ENV).ok();
    if !is_github_actions(env.as_deref()) {
        return Ok(false);
    }
    MaskCommands::for_config(config).write_to(out)?;
    Ok(true)
}

/// Replaces every known form of a credential in text with `***` (defence in depth for text that
/// came from elsewhere, e.g. a server message). Debug shows only the count.
#[derive(Clone)]
pub struct Redactor {
    forms: Vec<SecretString>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("forms", &self.forms.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor for every form of `config`.
    #[must_use]
    pub fn new(config: &DockerConfig) -> Self {
        let mut forms = config.secret_forms();
        // Longest first, so a form containing a shorter one is replaced whole.
        forms.sort_by_key(|f| std::cmp::Reverse(f.expose_secret().len()));
        Self { forms }
    }

    /// `text` with every form replaced by `***`.
    #[must_use]
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for form in &self.forms {
            out = out.replace(form.expose_secret(), "***");
        }
        out
    }

    /// Whether `text` contains any form.
    #[must_use]
    pub fn leaks_in(&self, text: &str) -> bool {
        self.forms.iter().any(|f| text.contains(f.expose_secret()))
    }
}
