//! The small part of YAML the plugin catalog's files use, read without a YAML library: block
//! mappings, block sequences (`- ` items, a mapping's value may start at the key's own
//! indentation), plain or quoted one-line scalars, whole-line comments. Anything else (flow
//! collections, anchors, tags, block scalars, tabs, a repeated key) is an error rather than a
//! guess, so a file this reads means what the flux CLI's YAML reader takes it to mean.

use anyhow::bail;

/// A YAML value of that subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Scalar(String),
    Map(Vec<(String, Node)>),
    List(Vec<Node>),
}

impl Node {
    /// The value of `key` when this is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a scalar.
    pub fn text(&self) -> Option<&str> {
        match self {
            Node::Scalar(s) => Some(s),
            _ => None,
        }
    }
}

/// One meaningful line: its indentation and its content.
#[derive(Debug, Clone)]
struct Line {
    number: usize,
    indent: usize,
    text: String,
}

/// Parses `text` into one node (a mapping or a sequence at the top).
pub fn parse(text: &str) -> anyhow::Result<Node> {
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let content = raw.trim_start_matches(' ');
        if content.starts_with('\t') || raw.contains('\t') {
            bail!("line {number}: a tab (YAML indents with spaces)");
        }
        let content = content.trim_end();
        if content.is_empty() || content.starts_with('#') || content == "---" {
            continue;
        }
        lines.push(Line {
            number,
            indent: raw.len() - raw.trim_start_matches(' ').len(),
            text: content.to_string(),
        });
    }
    if lines.is_empty() {
        bail!("an empty document");
    }
    let mut at = 0;
    let indent = lines[0].indent;
    let node = block(&mut lines, &mut at, indent)?;
    if let Some(l) = lines.get(at) {
        bail!("line {}: unexpected indentation", l.number);
    }
    Ok(node)
}

/// The block (mapping or sequence) whose lines start at `lines[*at]` with `indent`.
fn block(lines: &mut [Line], at: &mut usize, indent: usize) -> anyhow::Result<Node> {
    if is_item(&lines[*at].text) {
        return sequence(lines, at, indent);
    }
    let mut entries: Vec<(String, Node)> = Vec::new();
    while let Some(l) = lines.get(*at).cloned() {
        if l.indent < indent || (l.indent == indent && is_item(&l.text)) {
            break;
        }
        if l.indent > indent {
            bail!("line {}: unexpected indentation", l.number);
        }
        let Some((key, value)) = split_key(&l.text) else {
            bail!("line {}: expected `key: value`", l.number);
        };
        if entries.iter().any(|(k, _)| *k == key) {
            bail!("line {}: the key `{key}` again", l.number);
        }
        *at += 1;
        let node = if value.is_empty() {
            match lines.get(*at) {
                Some(next) if next.indent > indent => {
                    let i = next.indent;
                    block(lines, at, i)?
                }
                Some(next) if next.indent == indent && is_item(&next.text) => {
                    sequence(lines, at, indent)?
                }
                _ => bail!("line {}: `{key}` has no value", l.number),
            }
        } else {
            Node::Scalar(scalar(value, l.number)?)
        };
        entries.push((key, node));
    }
    Ok(Node::Map(entries))
}

/// The `- ` items at `indent`; an item's first line is read as if it started two columns in.
fn sequence(lines: &mut [Line], at: &mut usize, indent: usize) -> anyhow::Result<Node> {
    let mut items = Vec::new();
    while let Some(l) = lines.get(*at).cloned() {
        if l.indent != indent || !is_item(&l.text) {
            if l.indent > indent {
                bail!("line {}: unexpected indentation", l.number);
            }
            break;
        }
        let rest = l.text[1..].trim_start();
        if rest.is_empty() {
            bail!("line {}: an empty sequence item", l.number);
        }
        if split_key(rest).is_none() {
            items.push(Node::Scalar(scalar(rest, l.number)?));
            *at += 1;
            continue;
        }
        let inner = indent + (l.text.len() - rest.len());
        lines[*at] = Line {
            number: l.number,
            indent: inner,
            text: rest.to_string(),
        };
        items.push(block(lines, at, inner)?);
    }
    Ok(Node::List(items))
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// `key: value` (or `key:`) split at the first `: ` that is outside quotes; None for a scalar.
fn split_key(text: &str) -> Option<(String, &str)> {
    if text.starts_with(['"', '\'']) {
        return None;
    }
    let (key, value) = match text.split_once(": ") {
        Some((k, v)) => (k, v.trim()),
        None => (text.strip_suffix(':')?, ""),
    };
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    plain.then(|| (key.to_string(), value))
}

/// A one-line scalar: plain, or in quotes without escapes.
fn scalar(value: &str, number: usize) -> anyhow::Result<String> {
    for (q, what) in [('"', "double"), ('\'', "single")] {
        if let Some(inner) = value.strip_prefix(q) {
            let Some(inner) = inner.strip_suffix(q) else {
                bail!("line {number}: an unclosed {what}-quoted scalar");
            };
            if inner.contains(q) || inner.contains('\\') {
                bail!("line {number}: escapes in a quoted scalar are not read here");
            }
            return Ok(inner.to_string());
        }
    }
    if value.starts_with(['{', '[', '&', '*', '!', '|', '>', '%', '@', '`']) {
        bail!("line {number}: `{value}` is YAML this reader does not take");
    }
    if value.contains(" #") {
        bail!("line {number}: a comment after a value is not read here");
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Node {
        Node::Scalar(v.into())
    }

    #[test]
    fn catalog_yaml_reads_mappings_sequences_and_quotes() {
        let n = parse("# c\na: 1\nlist:\n- x: 'q'\n  y: \"r\"\n- z\nm:\n  k: v\n").unwrap();
        assert_eq!(n.get("a"), Some(&s("1")));
        let Some(Node::List(items)) = n.get("list") else {
            panic!("{n:?}")
        };
        assert_eq!(items[0].get("x"), Some(&s("q")));
        assert_eq!(items[0].get("y"), Some(&s("r")));
        assert_eq!(items[1], s("z"));
        assert_eq!(n.get("m").and_then(|m| m.get("k")), Some(&s("v")));
        let nested = parse("p:\n  - a: 1\n    b:\n      - c: 2\n").unwrap();
        let Some(Node::List(p)) = nested.get("p") else {
            panic!("{nested:?}")
        };
        assert!(matches!(p[0].get("b"), Some(Node::List(_))));
    }

    #[test]
    fn catalog_yaml_refuses_what_it_does_not_read() {
        for bad in [
            "a: [1, 2]\n",
            "a: {b: c}\n",
            "a: &x 1\n",
            "a: |\n  text\n",
            "a: 1\na: 2\n",
            "a:\n\tb: 1\n",
            "a: 'open\n",
            "a: 1 # note\n",
            "a:\n",
            "a: 1\n   b: 2\n",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
