//! The catalog's YAML files, read with the workspace's YAML library (serde-saphyr, already in
//! the tree through testkit) into a small tree the rules walk: mappings keep their key order,
//! scalars are their text. A repeated key is an error (the catalog's own validator, Go's YAML
//! reader, refuses one too), and so is an empty document.

use anyhow::{Context, bail};
use serde_json::Value;

/// A YAML value as the rules see it.
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

/// Reads one YAML document.
pub fn parse(text: &str) -> anyhow::Result<Node> {
    let value: Value = serde_saphyr::from_str(text).context("not YAML the catalog reads")?;
    match value {
        Value::Null => bail!("an empty document"),
        v => Ok(node(v)),
    }
}

fn node(v: Value) -> Node {
    match v {
        Value::Object(m) => Node::Map(m.into_iter().map(|(k, v)| (k, node(v))).collect()),
        Value::Array(items) => Node::List(items.into_iter().map(node).collect()),
        Value::String(s) => Node::Scalar(s),
        Value::Null => Node::Scalar(String::new()),
        other => Node::Scalar(other.to_string()),
    }
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
        assert_eq!(parse("v: 0.1.0\n").unwrap().get("v"), Some(&s("0.1.0")));
    }

    #[test]
    fn catalog_yaml_refuses_a_repeated_key_and_an_empty_document() {
        for bad in ["a: 1\na: 2\n", "a: 'open\n", "", "# only a comment\n"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
