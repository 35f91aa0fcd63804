//! The one error type of the crate. Expected outcomes (refused, moved, gone) are values of the
//! outcome enums, not errors: an `Err` means something broke.

use crate::lease::config::LossReason;

/// Something broke while fencing. `Display` names the failed step; the cause is in `source()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A text that should be a holder, owner value or epoch is not one.
    #[error("malformed {what}: {value:?}")]
    Malformed {
        /// What was parsed (`holder`, `owner value`, `epoch`, `prior annotation`).
        what: &'static str,
        /// The offending text, truncated; never a secret (these come from annotations).
        value: String,
    },
    /// A caller-supplied mark cannot be fenced.
    #[error("invalid mark at {at}: {why}")]
    InvalidMark {
        /// The annotation key or JSON Pointer of the mark.
        at: String,
        /// Why it is refused.
        why: &'static str,
    },
    /// The caller-supplied reason text is not acceptable.
    #[error("invalid reason text: {why}")]
    InvalidReason {
        /// Why it is refused.
        why: &'static str,
    },
    /// The API server refused the request with 403.
    #[error("forbidden to {verb} {resource} {target}")]
    Forbidden {
        /// The verb (`get`, `patch`, `update`, `create`, `list`).
        verb: &'static str,
        /// The resource, as `plural.group` (or `plural` for the core group).
        resource: String,
        /// `namespace/name`, or the scope of a list.
        target: String,
        /// The server's answer.
        #[source]
        source: Box<kube::Error>,
    },
    /// The server rejected a write as invalid (422) while the object had not moved: the
    /// request itself is wrong (e.g. an annotation key the server does not accept).
    #[error("server rejected {verb} of {resource} {target}")]
    Rejected {
        /// The verb.
        verb: &'static str,
        /// The resource, as `plural.group`.
        resource: String,
        /// `namespace/name`.
        target: String,
        /// The server's answer.
        #[source]
        source: Box<kube::Error>,
    },
    /// An API call failed for another reason (transport, server error, unexpected status).
    #[error("{verb} {resource} {target}")]
    Api {
        /// The verb.
        verb: &'static str,
        /// The resource, as `plural.group`.
        resource: String,
        /// `namespace/name`, or the scope of a list.
        target: String,
        /// The underlying error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The Lease is no longer ours. Sticky: every later `assert` returns it too.
    #[error("lease lost: {reason}")]
    LeaseLost {
        /// Why the Lease counts as lost.
        reason: LossReason,
    },
    /// Another party moved the object on every attempt.
    #[error("{what}: contended on every attempt")]
    Contended {
        /// The step.
        what: &'static str,
    },
    /// The Lease carries a record of another holder's chain that this holder may not replace
    /// (`crate::lease::ChainRecord`): those fences may still be held, so no fence is written.
    #[error(
        "lease {lease} records the chain of {owner}, whose fences may still be held; no fence was written"
    )]
    ChainRecorded {
        /// The Lease, `namespace/name`.
        lease: String,
        /// The record's owner (`holder;epoch`), or the text found.
        owner: String,
    },
    /// A value could not be encoded or decoded as JSON.
    #[error("encoding {what}")]
    Json {
        /// What was being encoded.
        what: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

impl FenceError {
    pub(crate) fn malformed(what: &'static str, value: &str) -> Self {
        const MAX: usize = 80;
        let value = if value.len() > MAX {
            let mut end = MAX;
            while !value.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}...", &value[..end])
        } else {
            value.to_string()
        };
        Self::Malformed { what, value }
    }
}

/// An error and its causes, `outer: inner: ...`.
pub(crate) fn words(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}
