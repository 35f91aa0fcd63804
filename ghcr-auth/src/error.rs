//! The one error type of this crate: something broke (expected outcomes are values elsewhere).
//!
//! No variant carries credential material: problems with a credential are described by
//! [`CredentialProblem`], whose messages are fixed words plus registry names.

use std::error::Error as StdError;

/// A boxed error from a caller-supplied hook (for example a Lease assertion).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What went wrong, named by the step that failed; the cause is in `source()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GhcrError {
    /// The credential source could not be read.
    #[error("reading the credential from {from}")]
    ReadCredential {
        /// Where it was read from (never its content).
        from: String,
        #[source]
        source: std::io::Error,
    },
    /// The credential source holds nothing.
    #[error("reading the credential from {from}: it is missing or empty")]
    CredentialMissing {
        /// Where it was looked for.
        from: String,
    },
    /// The credential does not pass validation.
    #[error("validating the credential")]
    InvalidCredential(#[source] CredentialProblem),
    /// An image reference does not parse.
    #[error("parsing image reference `{reference}`: {problem}")]
    InvalidImageRef {
        /// The reference as given (image references carry no secrets).
        reference: String,
        /// Why it was refused.
        problem: &'static str,
    },
    /// The HTTP client for the registry could not be built (feature `registry`).
    #[cfg(feature = "registry")]
    #[error("building the registry HTTP client")]
    HttpClient(#[source] reqwest::Error),
    /// A registry request failed in transport (no HTTP status to judge; feature `registry`).
    #[cfg(feature = "registry")]
    #[error("requesting the {step} from registry {registry}")]
    Registry {
        /// Which request of the proof.
        step: &'static str,
        /// The registry host.
        registry: String,
        #[source]
        source: reqwest::Error,
    },
    /// A caller-supplied gate (e.g. the Lease assertion) refused or failed before a write.
    #[error("asserting the write gate before writing Secret {namespace}/{name}")]
    Gate {
        /// Namespace of the Secret that was about to be written.
        namespace: String,
        /// Name of that Secret.
        name: String,
        #[source]
        source: BoxError,
    },
    /// The caller's recheck of the pause ([`crate::reassert::Reasserter::with_root_check`])
    /// failed right before the root Secret write: the pause no longer holds (e.g. a person set
    /// `spec.suspend=false` on a fenced object after the proof). The root Secret, the one
    /// consumers follow, was not written; the consumers written before it hold the credential.
    #[error("the root Secret {namespace}/{name} was not written")]
    PauseBroken {
        /// Namespace of the root Secret.
        namespace: String,
        /// Its name.
        name: String,
        /// Why the pause no longer holds; names the object.
        #[source]
        source: BoxError,
    },
    /// A caller-supplied gate (e.g. the Lease assertion) refused or failed before a reconcile
    /// request to a Flux source.
    #[error("asserting the write gate before requesting a reconcile of {what}")]
    SourceGate {
        /// The source, e.g. `OCIRepository ns/name`.
        what: String,
        #[source]
        source: BoxError,
    },
    /// A namespace label selector does not parse ([`crate::selector::validate`]); nothing was
    /// requested.
    #[error("{0}")]
    InvalidSelector(String),
    /// A Kubernetes API call failed in a way that is not an expected outcome.
    #[error("{verb} {what}")]
    Kube {
        /// The verb, e.g. `reading`, `patching`.
        verb: &'static str,
        /// The object, e.g. `Secret ns/name`.
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// Why a credential was refused. Messages name the registry and field, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialProblem {
    /// Not valid JSON (position only, never the text).
    #[error("the Docker config is not valid JSON (line {line}, column {column})")]
    NotJson {
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
    },
    /// A JSON object holds the same key twice.
    #[error("the Docker config repeats a key in one object")]
    DuplicateKey,
    /// The document or an entry has the wrong JSON shape.
    #[error("the Docker config has the wrong shape: {0}")]
    Shape(&'static str),
    /// A field this crate does not support (credential helpers, identity tokens, ...).
    #[error("the Docker config uses an unsupported field `{field}`")]
    UnsupportedField {
        /// The field name (shown only when it is a known Docker config field).
        field: String,
    },
    /// Two `auths` keys name the same registry after normalisation.
    #[error("the Docker config has more than one entry for registry {registry}")]
    DuplicateRegistry {
        /// The normalised registry host.
        registry: String,
    },
    /// A registry key is not a host name with an optional port.
    #[error("the Docker config has a key that is not a registry host (host with a dot or port)")]
    InvalidRegistry,
    /// A required field is absent or empty.
    #[error("the entry for {registry} has no {field}")]
    Missing {
        /// The registry.
        registry: String,
        /// `username` or `password`.
        field: &'static str,
    },
    /// `auth` is not base64 of `username:password`.
    #[error("the `auth` of {registry} is not base64 of `username:password`")]
    AuthMalformed {
        /// The registry.
        registry: String,
    },
    /// `auth` decodes to a different username or password than the explicit fields.
    #[error("the `auth` of {registry} disagrees with its username/password")]
    AuthMismatch {
        /// The registry.
        registry: String,
    },
    /// A control character (newline, NUL, ...) inside a value.
    #[error("the {field} of {registry} contains a control character")]
    ControlCharacter {
        /// The registry.
        registry: String,
        /// `username` or `password`.
        field: &'static str,
    },
    /// A username containing `:` cannot be encoded in `auth`.
    #[error("the username of {registry} contains `:`")]
    UsernameColon {
        /// The registry.
        registry: String,
    },
}
