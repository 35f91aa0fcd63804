//! `-o yaml`: the JSON document as YAML 1.2 block style, as `kubectl -o yaml` prints. Every
//! string is a double-quoted scalar with JSON's escapes (valid YAML: YAML 1.2 is a superset of
//! JSON), so no value can turn into another type, a comment or a document marker; keys are
//! plain only when they are plain words.

use serde_json::Value;

/// The document, starting with `---`, each line ending in a newline.
#[must_use]
pub fn document(v: &Value) -> String {
    let mut out = String::from("---\n");
    match v {
        Value::Object(m) if !m.is_empty() => map(&mut out, m, 0),
        Value::Array(a) if !a.is_empty() => seq(&mut out, a, 0),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn map(out: &mut String, m: &serde_json::Map<String, Value>, indent: usize) {
    for (k, v) in m {
        out.push_str(&" ".repeat(indent));
        out.push_str(&key(k));
        out.push(':');
        nested(out, v, indent + 2, false);
    }
}

fn seq(out: &mut String, a: &[Value], indent: usize) {
    for v in a {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        nested(out, v, indent + 2, true);
    }
}

/// A value after `key:` or `-`: a scalar or an empty collection on the same line, else the
/// collection on the lines below (a sequence item's map starts on the dash's line).
fn nested(out: &mut String, v: &Value, indent: usize, item: bool) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            if item {
                let mut inner = String::new();
                map(&mut inner, m, indent);
                out.push(' ');
                out.push_str(&inner[indent..]);
            } else {
                out.push('\n');
                map(out, m, indent);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            // Sequences in a map sit at the key's column, as kubectl prints them.
            seq(out, a, if item { indent } else { indent - 2 });
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        // null, booleans, numbers and double-quoted strings read the same in YAML 1.2.
        other => other.to_string(),
    }
}

fn key(k: &str) -> String {
    let plain = k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    // `y`, `no`, `null`... are plain words a YAML 1.1 reader takes for booleans or null.
    let reserved = matches!(
        k.to_ascii_lowercase().as_str(),
        "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null"
    );
    if plain && !reserved {
        k.to_string()
    } else {
        Value::String(k.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::document;

    #[test]
    fn flux_habits_yaml_prints_the_json_document_block_style() {
        let cases = [
            (json!({}), "---\n{}\n"),
            (json!({"a": 1, "b": null}), "---\na: 1\nb: null\n"),
            (
                json!({"command": "fences", "facts": {"fences": [
                    {"epoch": 3, "object": "ks/a/b"},
                    {"marks": [], "object": "hr/a/c"}
                ]}}),
                "---\ncommand: \"fences\"\nfacts:\n  fences:\n  - epoch: 3\n    \
                 object: \"ks/a/b\"\n  - marks: []\n    object: \"hr/a/c\"\n",
            ),
            (
                json!({"released": ["Kustomization a/t", "x: #y\n---"]}),
                "---\nreleased:\n- \"Kustomization a/t\"\n- \"x: #y\\n---\"\n",
            ),
            (
                json!({"a b": false, "no": true}),
                "---\n\"a b\": false\n\"no\": true\n",
            ),
            (
                json!([[1, 2], {"k": {}}]),
                "---\n-\n  - 1\n  - 2\n- k: {}\n",
            ),
        ];
        for (doc, want) in cases {
            assert_eq!(document(&doc), want, "{doc}");
        }
    }
}
