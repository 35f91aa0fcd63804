//! How the I/O layer reads the API server's answers: a small classification of `kube::Error`
//! and the naming of resources in error messages.

use kube::api::ApiResource;

use crate::FenceError;

/// What a failed call means for the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// 409: a resourceVersion precondition failed or the object already exists.
    Conflict,
    /// 422: a JSON Patch `test` failed (or the patch is invalid for the object).
    Invalid,
    /// 404.
    NotFound,
    /// 403.
    Forbidden,
    /// The request may or may not have been applied (transport error, 5xx, timeout).
    Unknown,
    /// Anything else: the request was answered and not applied.
    Other,
}

pub(crate) fn classify(err: &kube::Error) -> Failure {
    match err {
        kube::Error::Api(s) => match s.code {
            409 => Failure::Conflict,
            422 => Failure::Invalid,
            404 => Failure::NotFound,
            403 => Failure::Forbidden,
            c if c >= 500 => Failure::Unknown,
            _ => Failure::Other,
        },
        kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::ReadEvents(_)
        | kube::Error::SerdeError(_)
        | kube::Error::LinesCodecMaxLineLengthExceeded
        | kube::Error::FromUtf8(_) => Failure::Unknown,
        _ => Failure::Other,
    }
}

/// `plural.group`, or `plural` for the core group.
pub(crate) fn resource_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// Wraps a call failure into the crate error, naming verb, resource and target.
pub(crate) fn error(
    verb: &'static str,
    resource: String,
    target: String,
    err: kube::Error,
) -> FenceError {
    if classify(&err) == Failure::Forbidden {
        FenceError::Forbidden {
            verb,
            resource,
            target,
            source: Box::new(err),
        }
    } else {
        FenceError::Api {
            verb,
            resource,
            target,
            source: Box::new(err),
        }
    }
}
