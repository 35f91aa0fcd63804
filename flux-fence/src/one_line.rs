//! An error and its causes as one line for people: `step: cause: cause`.

/// `error: cause: cause` on one line, each cause once. An answer of the API server reads
/// `<message> (HTTP <code> <reason>)`: kube's own text repeats the whole Status in Rust debug
/// form, and its source is that Status again.
///
/// ```
/// let status = kube::core::Status::failure("etcdserver: request timed out", "Timeout")
///     .with_code(500)
///     .boxed();
/// let line = flux_fence::one_line(&kube::Error::Api(status));
/// assert_eq!(line, "etcdserver: request timed out (HTTP 500 Timeout)");
/// ```
#[must_use]
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = text(e);
    let mut source = next(e);
    while let Some(s) = source {
        let text = text(s);
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = next(s);
    }
    line.replace(['\r', '\n'], " ")
}

/// `e` as kube's error, also when it is boxed (a `#[source] Box<kube::Error>` is seen as the
/// box).
fn as_kube<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a kube::Error> {
    e.downcast_ref::<kube::Error>()
        .or_else(|| e.downcast_ref::<Box<kube::Error>>().map(AsRef::as_ref))
}

/// The cause to print after `e`: none after an API server answer.
fn next<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    match as_kube(e) {
        Some(kube::Error::Api(_)) => None,
        _ => e.source(),
    }
}

/// One error's own text.
fn text(e: &(dyn std::error::Error + 'static)) -> String {
    match as_kube(e) {
        Some(kube::Error::Api(s)) => {
            let message = if s.message.is_empty() {
                "the API server refused the request"
            } else {
                s.message.as_str()
            };
            if s.reason.is_empty() {
                format!("{message} (HTTP {})", s.code)
            } else {
                format!("{message} (HTTP {} {})", s.code, s.reason)
            }
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_bare_answer_gets_words() {
        let bare = kube::core::Status::failure("", "").with_code(503).boxed();
        assert_eq!(
            one_line(&kube::Error::Api(bare)),
            "the API server refused the request (HTTP 503)"
        );
    }

    #[test]
    fn a_wrapped_api_error_keeps_the_outer_step_and_the_plain_answer() {
        let status = kube::core::Status::failure("boom\nagain", "InternalError")
            .with_code(500)
            .boxed();
        let e = crate::FenceError::Api {
            verb: "get",
            resource: "leases.coordination.k8s.io".into(),
            target: "flux-system/flux-handoff".into(),
            source: Box::new(kube::Error::Api(status)),
        };
        let line = one_line(&e);
        assert!(
            line.starts_with("get leases.coordination.k8s.io flux-system/flux-handoff: "),
            "{line}"
        );
        assert!(
            line.ends_with("boom again (HTTP 500 InternalError)"),
            "{line}"
        );
        assert!(!line.contains("Status {"), "{line}");
    }
}

/// A value someone else wrote (a Lease holder, an annotation) as it may be shown in a line:
/// control characters as escapes (`\n`, `\r`, `\t`, `\u{1b}`), so it cannot end the line or
/// start another.
pub(crate) fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ =
                    std::fmt::Write::write_fmt(&mut out, format_args!("\\u{{{:x}}}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod printable_tests {
    #[test]
    fn log_injection_a_foreign_value_stays_on_its_line() {
        assert_eq!(super::printable("gh1.1-abc"), "gh1.1-abc");
        assert_eq!(
            super::printable("evil\n::error::x\r\u{1b}"),
            "evil\\n::error::x\\r\\u{1b}"
        );
    }
}
