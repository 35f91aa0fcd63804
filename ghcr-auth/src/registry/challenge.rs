//! `WWW-Authenticate` challenges (RFC 7235) as registries send them: pure parsing.

/// What a registry asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Challenge {
    /// HTTP Basic with the Docker config's username and password.
    Basic,
    /// Exchange the credential for a token at `realm` (the GHCR and Docker Hub flow).
    Bearer {
        /// Token endpoint URL.
        realm: String,
        /// `service` parameter to pass on.
        service: Option<String>,
        /// `scope` parameter, when the registry names it.
        scope: Option<String>,
    },
    /// A scheme this crate does not speak.
    Unsupported,
}

/// Parses one `WWW-Authenticate` header value. Only the first challenge of the value is read.
/// `None` when the header is empty or a Bearer challenge has no realm.
#[must_use]
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header
        .split_once(char::is_whitespace)
        .unwrap_or((header, ""));
    if scheme.is_empty() {
        return None;
    }
    let params = parse_params(rest);
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    match scheme.to_ascii_lowercase().as_str() {
        "basic" => Some(Challenge::Basic),
        "bearer" => Some(Challenge::Bearer {
            realm: get("realm").filter(|r| !r.is_empty())?,
            service: get("service"),
            scope: get("scope"),
        }),
        _ => Some(Challenge::Unsupported),
    }
}

/// `name=value` pairs separated by commas; values are tokens or quoted strings with `\`
/// escapes. Names are lowercased. Parsing stops at anything malformed.
fn parse_params(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() || c == ',' {
                break;
            }
            name.push(c.to_ascii_lowercase());
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if name.is_empty() || chars.next() != Some('=') {
            return out;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => {
                        closed = true;
                        break;
                    }
                    _ => value.push(c),
                }
            }
            if !closed {
                return out;
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.push((name, value));
    }
}
