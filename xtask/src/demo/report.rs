//! Reading the demo's facts from the lines and JSON documents its processes print.

use anyhow::{Context, bail};
use serde_json::Value;

/// What the `ghcr reassert` run proved.
#[derive(Debug, Clone, PartialEq)]
pub struct ReassertSummary {
    /// Seconds from the start of the run until the stable pause was proven (every phase up to
    /// and including `pause proven`): the wait that, in the incident, never ended.
    pub pause_proven_secs: f64,
    /// Secrets now holding the proven credential: created + updated + unchanged + adopted.
    pub secrets: u64,
}

/// The value of `key=value` in a line of space-separated words.
pub fn word(line: &str, key: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .map(str::to_string)
}

/// Reads the `ghcr reassert --output json` document.
///
/// # Errors
/// A document that did not succeed, has no `pause proven` phase, or no Secret counts.
pub fn reassert_summary(doc: &Value) -> anyhow::Result<ReassertSummary> {
    if doc["result"] != "ok" {
        bail!("ghcr reassert did not succeed: {}", doc["error"]);
    }
    let phases = doc["phases"]
        .as_array()
        .context("no phases in the document")?;
    let mut millis: u64 = 0;
    let mut proven = false;
    for p in phases {
        millis += p["ms"].as_u64().unwrap_or(0);
        if p["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("pause proven"))
        {
            proven = true;
            break;
        }
    }
    if !proven {
        bail!("ghcr reassert finished without a `pause proven` phase (did it pause at all?)");
    }
    let counts = doc
        .pointer("/facts/secret_counts")
        .and_then(Value::as_object)
        .context("no secret_counts in the document")?;
    let secrets = ["created", "updated", "unchanged", "adopted"]
        .iter()
        .filter_map(|k| counts.get(*k).and_then(Value::as_u64))
        .sum();
    #[allow(clippy::cast_precision_loss)] // milliseconds of one run fit an f64 exactly
    let pause_proven_secs = millis as f64 / 1000.0;
    Ok(ReassertSummary {
        pause_proven_secs,
        secrets,
    })
}

/// The consumers External Secrets converged, from the `external_secrets` fact.
///
/// # Errors
/// The document has no such fact (the route did not run).
pub fn external_secrets(doc: &Value) -> anyhow::Result<u64> {
    doc.pointer("/facts/external_secrets")
        .and_then(Value::as_array)
        .map(|a| a.len() as u64)
        .context("no external_secrets in the document (did the External Secrets route run?)")
}

/// The number of fences in a `fences --output json` document.
///
/// # Errors
/// A document that did not succeed or lists no `fences` array.
pub fn fences_left(doc: &Value) -> anyhow::Result<usize> {
    if doc["result"] != "ok" {
        bail!("flux-handoff fences did not succeed: {}", doc["error"]);
    }
    doc.pointer("/facts/fences")
        .and_then(Value::as_array)
        .map(Vec::len)
        .context("no fences list in the fences document")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn word_finds_a_key_anywhere_in_a_line() {
        let line = "registry ready host=127.0.0.1:5000 image=127.0.0.1:5000/demo/podinfo:6.9.2";
        assert_eq!(word(line, "host=").as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(
            word(line, "image=").as_deref(),
            Some("127.0.0.1:5000/demo/podinfo:6.9.2")
        );
        assert_eq!(word(line, "digest="), None);
    }

    #[test]
    fn pause_proven_sums_every_phase_up_to_the_proof_and_secrets_count_every_ok_outcome() {
        let doc = json!({
            "result": "ok",
            "phases": [
                { "name": "credential proven for 1 image(s)", "ms": 300 },
                { "name": "lease acquired", "ms": 200 },
                { "name": "pause proven", "ms": 1500 },
                { "name": "secrets reasserted: created=1 updated=2 unchanged=0", "ms": 900 },
            ],
            "facts": { "secret_counts": { "created": 1, "updated": 2 } },
        });
        let s = reassert_summary(&doc).unwrap();
        assert!((s.pause_proven_secs - 2.0).abs() < f64::EPSILON);
        assert_eq!(s.secrets, 3);
    }

    #[test]
    fn a_reassert_without_a_pause_proof_is_not_a_demo_success() {
        let doc = json!({
            "result": "ok",
            "phases": [{ "name": "no targets: reasserting without a pause or Lease", "ms": 1 }],
            "facts": { "secret_counts": { "created": 3 } },
        });
        assert!(reassert_summary(&doc).is_err());
        let failed = json!({ "result": "error", "error": "refused" });
        assert!(reassert_summary(&failed).is_err());
    }

    #[test]
    fn fences_left_counts_the_listed_fences() {
        let doc = json!({ "result": "ok", "facts": { "fences": [{}, {}] } });
        assert_eq!(fences_left(&doc).unwrap(), 2);
        let none = json!({ "result": "ok", "facts": { "fences": [] } });
        assert_eq!(fences_left(&none).unwrap(), 0);
        assert!(fences_left(&json!({ "result": "ok", "facts": {} })).is_err());
    }
}
