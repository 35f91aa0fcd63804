//! Label selectors checked before any request, so a typo is a usage error (exit 2) and not an
//! API server's 400 halfway through a handoff.
//!
//! The grammar is Kubernetes' (`k8s.io/apimachinery/pkg/labels`): comma-separated
//! requirements, each `key`, `!key`, `key=value`, `key==value`, `key!=value`,
//! `key in (v1,v2)`, `key notin (v1,v2)`, `key>N` or `key<N`. Keys are `[prefix/]name`
//! (prefix a DNS subdomain, name at most 63 characters of `[A-Za-z0-9._-]` starting and
//! ending alphanumeric); values are empty or like a name.

/// Checks `text` as a label selector.
///
/// # Errors
/// One line naming the selector and the first requirement that does not parse.
pub fn validate(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("label selector must not be empty".into());
    }
    if text.chars().any(char::is_control) {
        return Err("label selector contains control characters".into());
    }
    for req in split_requirements(text)? {
        requirement(req.trim()).map_err(|why| format!("label selector {text:?}: {req:?} {why}"))?;
    }
    Ok(())
}

/// Splits on commas outside parentheses.
fn split_requirements(text: &str) -> Result<Vec<&str>, String> {
    let unbalanced = || format!("label selector {text:?}: unbalanced parentheses");
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or_else(unbalanced)?,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(unbalanced());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn requirement(req: &str) -> Result<(), &'static str> {
    if let Some(key) = req.strip_prefix('!') {
        return check_key(key.trim());
    }
    for op in ["==", "!=", "=", ">", "<"] {
        if let Some((key, value)) = req.split_once(op) {
            check_key(key.trim())?;
            let value = value.trim();
            return if op == ">" || op == "<" {
                value
                    .parse::<i64>()
                    .map(drop)
                    .map_err(|_| "needs an integer after > or <")
            } else {
                check_value(value)
            };
        }
    }
    if let Some((key, rest)) = req.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        let values = rest
            .strip_prefix("notin")
            .or_else(|| rest.strip_prefix("in"))
            .map(str::trim)
            .and_then(|v| v.strip_prefix('('))
            .and_then(|v| v.strip_suffix(')'))
            .ok_or("is not `key in (values)` or `key notin (values)`")?;
        check_key(key)?;
        if values.trim().is_empty() {
            return Err("needs at least one value in the set");
        }
        return values.split(',').try_for_each(|v| check_value(v.trim()));
    }
    check_key(req)
}

fn check_key(key: &str) -> Result<(), &'static str> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if !is_dns_subdomain(prefix) {
                return Err("has a key prefix that is not a DNS subdomain");
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err("has an empty key");
    }
    if !is_name(name) {
        return Err("has an invalid key");
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), &'static str> {
    if value.is_empty() || is_name(value) {
        Ok(())
    } else {
        Err("has an invalid value")
    }
}

/// A label name or value: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
fn is_name(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && alnum(s.chars().next())
        && alnum(s.chars().last())
}

fn is_dns_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_selectors_are_accepted() {
        for good in [
            "ghcr-consumer=true",
            "ghcr-consumer==true",
            "team!=ops",
            "app",
            "!legacy",
            "env in (prod, staging)",
            "env notin (dev)",
            "example.com/pull=enabled,app",
            "a=b, c!=d ,e",
            "gen>3",
            "gen<10",
            "empty=",
            "a==",
        ] {
            assert_eq!(validate(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn malformed_selectors_are_one_line_refusals() {
        for bad in [
            "",
            " ",
            "a=b=c",
            "=x",
            "tier in ()",
            "a b",
            "env in prod",
            "env in (prod",
            "env in (prod))",
            "a,,b",
            "-bad=x",
            "Bad.Prefix/x=y",
            "a=b c",
            "gen>x",
            "a=(b)",
            "x=\n",
            &"k".repeat(64),
        ] {
            let err = validate(bad).unwrap_err();
            assert_eq!(err.lines().count(), 1, "{bad:?}: {err}");
        }
    }
}
