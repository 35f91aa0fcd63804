//! Reporting a handoff the GitHub Actions way: the step summary (Markdown appended to
//! `$GITHUB_STEP_SUMMARY`) and the step outputs (appended to `$GITHUB_OUTPUT`).
//!
//! Everything here is built from what [`super::Output`] already holds — phase lines, facts and
//! the final error line — none of which ever carries a credential. The Markdown and the outputs
//! are pure functions of a [`Report`]; [`write`] only appends them to the runner's files.

use std::fmt::Write as _;
use std::io::Write as _;

use serde_json::{Map, Value};

use super::{Phase, secs};

/// The commands that report the Actions way (the others — `fences`, `doctor`, `ghcr check` —
/// neither pause nor hold anything).
pub fn reports(command: &str) -> bool {
    matches!(command, "pause" | "run" | "resume" | "ghcr reassert")
}

/// What a finished handoff command knows about itself.
#[derive(Debug)]
pub struct Report<'a> {
    pub command: &'a str,
    pub code: u8,
    pub error: Option<&'a str>,
    pub phases: &'a [Phase],
    pub facts: &'a Map<String, Value>,
    /// Milliseconds from the start until the pause was proven.
    pub proven_after_ms: Option<u128>,
}

impl Report<'_> {
    /// The `outcome` output: what the exit code means, in one word. With `run`, a command that
    /// failed inside a handoff that itself succeeded is `command-failed`.
    pub fn outcome(&self) -> &'static str {
        if self.error.is_none() && self.code != 0 && self.facts.get("command_exit_code").is_some() {
            return "command-failed";
        }
        match self.code {
            0 => "succeeded",
            1 => "internal-error",
            2 => "usage-error",
            3 => "refused",
            4 => "timeout",
            5 => "registry-error",
            6 => "api-error",
            7 => "cleanup-failed",
            130 => "cancelled",
            _ => "failed",
        }
    }

    /// The holder of this run: the `holder` fact, else the one named by the Lease phase line
    /// (`lease acquired: ns/name (holder H, epoch N)`).
    pub fn holder(&self) -> Option<String> {
        if let Some(h) = self.facts.get("holder").and_then(Value::as_str) {
            return Some(h.to_string());
        }
        self.phases.iter().find_map(|p| {
            let rest = p.name.strip_prefix("lease acquired: ")?;
            let start = rest.find("(holder ")? + "(holder ".len();
            let end = start + rest[start..].find(',')?;
            Some(rest[start..end].to_string())
        })
    }

    /// The objects this run fenced, from the fence phase lines, parents first.
    pub fn fenced(&self) -> Vec<String> {
        let mut out = Vec::new();
        for prefix in ["parent fenced: ", "target fenced: "] {
            for p in self.phases {
                if let Some(list) = p.name.strip_prefix(prefix) {
                    out.extend(
                        list.split(", ")
                            .filter(|s| !s.is_empty())
                            .map(ToString::to_string),
                    );
                }
            }
        }
        out
    }

    /// Secrets written by `ghcr reassert` (created, updated, or adopted after a lost response).
    pub fn secrets_reasserted(&self) -> Option<u64> {
        let counts = self.facts.get("secret_counts")?.as_object()?;
        Some(
            ["created", "updated", "adopted"]
                .iter()
                .filter_map(|k| counts.get(*k).and_then(Value::as_u64))
                .sum(),
        )
    }

    /// The one command to run next after a failure.
    pub fn next_command(&self) -> Option<&'static str> {
        match self.code {
            0 => None,
            _ if self.outcome() == "command-failed" => None,
            2 | 4 | 6 => Some("flux-handoff doctor"),
            5 => Some("flux-handoff ghcr check"),
            _ => Some("flux-handoff fences"),
        }
    }

    /// The step outputs, `name=value` each (every value is one line by construction: a holder,
    /// a word or a number; an empty value means "not reached").
    pub fn outputs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("holder", self.holder().unwrap_or_default()),
            ("outcome", self.outcome().to_string()),
            (
                "proven_after_s",
                self.proven_after_ms
                    .map(|ms| format!("{:.1}", secs(ms)))
                    .unwrap_or_default(),
            ),
            (
                "secrets_reasserted",
                self.secrets_reasserted()
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
            ),
        ]
    }

    /// The step summary in Markdown.
    pub fn summary(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "### flux-handoff {}: {}\n",
            self.command,
            self.outcome()
        );
        let _ = writeln!(md, "| | |\n|---|---|");
        if let Some(h) = self.holder() {
            let _ = writeln!(md, "| Holder | `{}` |", cell(&h));
        }
        let fenced = self.fenced();
        if !fenced.is_empty() {
            let _ = writeln!(md, "| Paused | {} |", cell(&fenced.join(", ")));
        }
        if let Some(ms) = self.proven_after_ms {
            let _ = writeln!(md, "| Pause proven after | {:.1} s |", secs(ms));
        }
        if let Some(proof) = self.facts.get("proof") {
            let passes = proof.get("passes").and_then(Value::as_u64).unwrap_or(0);
            let counters = proof.get("counters").and_then(Value::as_str).unwrap_or("");
            let _ = writeln!(
                md,
                "| Proof | {passes} passes; {} |",
                cell(if counters.is_empty() { "-" } else { counters })
            );
        }
        if let Some(counts) = self.facts.get("secret_counts").and_then(Value::as_object) {
            let each: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(
                md,
                "| Secrets reasserted | {} ({}) |",
                self.secrets_reasserted().unwrap_or(0),
                cell(&each.join(", "))
            );
        }
        if let Some(c) = self.facts.get("command_exit_code") {
            let _ = writeln!(md, "| Command exit code | {c} |");
        }
        let _ = writeln!(md, "| Exit code | {} ({}) |", self.code, self.outcome());
        if !self.phases.is_empty() {
            let _ = writeln!(md, "\n| Phase | Duration |\n|---|---|");
            for p in self.phases {
                let _ = writeln!(md, "| {} | {:.1} s |", cell(&p.name), secs(p.millis));
            }
        }
        if let Some(e) = self.error {
            let _ = writeln!(md, "\n**Error:** {}", cell(e));
        }
        if let Some(next) = self.next_command() {
            let _ = writeln!(md, "\n**Next:** `{next}`");
        }
        md.push('\n');
        md
    }
}

/// Appends the summary and the outputs to the runner's files (each only when its variable is
/// set). Returns a line for the log when a file cannot be written.
pub fn write(report: &Report<'_>) -> Result<(), String> {
    let mut problems = Vec::new();
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty())
        && let Err(e) = append(&path, &report.summary())
    {
        problems.push(format!("cannot append the step summary: {e}"));
    }
    if let Some(path) = std::env::var_os("GITHUB_OUTPUT").filter(|p| !p.is_empty()) {
        let mut text = String::new();
        for (name, value) in report.outputs() {
            if !value.contains(['\n', '\r']) {
                let _ = writeln!(text, "{name}={value}");
            }
        }
        if let Err(e) = append(&path, &text) {
            problems.push(format!("cannot append the step outputs: {e}"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn append(path: &std::ffi::OsStr, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    f.write_all(text.as_bytes())
}

/// Text made safe for one Markdown table cell: no line breaks, no cell separator, no HTML.
fn cell(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn phase(name: &str, millis: u128) -> Phase {
        Phase {
            name: name.into(),
            millis,
        }
    }

    fn report<'a>(
        command: &'a str,
        code: u8,
        error: Option<&'a str>,
        phases: &'a [Phase],
        facts: &'a Map<String, Value>,
    ) -> Report<'a> {
        Report {
            command,
            code,
            error,
            phases,
            facts,
            proven_after_ms: None,
        }
    }

    fn run_phases() -> Vec<Phase> {
        vec![
            phase(
                "lease acquired: flux-system/flux-handoff (holder gh12.1-a1b2c3, epoch 4)",
                120,
            ),
            phase("parent fenced: Kustomization flux-system/flux-system", 80),
            phase(
                "target fenced: Kustomization flux-system/infrastructure",
                90,
            ),
            phase("pause proven", 2100),
        ]
    }

    #[test]
    fn outcome_words_follow_the_exit_codes() {
        let facts = Map::new();
        let table: &[(u8, Option<&str>, &str)] = &[
            (0, None, "succeeded"),
            (1, Some("bug"), "internal-error"),
            (2, Some("bad flag"), "usage-error"),
            (3, Some("held"), "refused"),
            (4, Some("slow"), "timeout"),
            (5, Some("401"), "registry-error"),
            (6, Some("403"), "api-error"),
            (7, Some("left"), "cleanup-failed"),
            (130, Some("interrupted"), "cancelled"),
            (42, None, "failed"),
        ];
        for (code, error, word) in table {
            assert_eq!(
                report("run", *code, *error, &[], &facts).outcome(),
                *word,
                "{code}"
            );
        }
    }

    #[test]
    fn a_failed_command_inside_a_good_handoff_is_command_failed_with_no_next_command() {
        let mut facts = Map::new();
        facts.insert("command_exit_code".into(), json!(3));
        let r = report("run", 3, None, &[], &facts);
        assert_eq!(r.outcome(), "command-failed");
        assert_eq!(r.next_command(), None);
        // The same code from the handoff itself (an error line) is a refusal.
        let r = report("run", 3, Some("lease held by x"), &[], &facts);
        assert_eq!(r.outcome(), "refused");
        assert_eq!(r.next_command(), Some("flux-handoff fences"));
    }

    #[test]
    fn holder_comes_from_the_fact_else_from_the_lease_line() {
        let phases = run_phases();
        let facts = Map::new();
        let r = report("run", 0, None, &phases, &facts);
        assert_eq!(r.holder().as_deref(), Some("gh12.1-a1b2c3"));
        let mut facts = Map::new();
        facts.insert("holder".into(), json!("local-ffffff"));
        let r = report("pause", 0, None, &phases, &facts);
        assert_eq!(r.holder().as_deref(), Some("local-ffffff"));
        assert_eq!(report("run", 3, None, &[], &Map::new()).holder(), None);
    }

    #[test]
    fn fenced_objects_are_read_from_the_fence_lines_parents_first() {
        let phases = vec![
            phase("target fenced: Kustomization a/t1, Kustomization a/t2", 1),
            phase("parent fenced: Kustomization a/p", 1),
        ];
        let facts = Map::new();
        assert_eq!(
            report("pause", 0, None, &phases, &facts).fenced(),
            [
                "Kustomization a/p",
                "Kustomization a/t1",
                "Kustomization a/t2"
            ]
        );
    }

    #[test]
    fn outputs_are_one_line_each_and_empty_when_not_reached() {
        let phases = run_phases();
        let mut facts = Map::new();
        facts.insert(
            "secret_counts".into(),
            json!({"created": 1, "updated": 2, "unchanged": 5, "adopted": 1}),
        );
        let mut r = report("ghcr reassert", 0, None, &phases, &facts);
        r.proven_after_ms = Some(2390);
        assert_eq!(
            r.outputs(),
            [
                ("holder", "gh12.1-a1b2c3".to_string()),
                ("outcome", "succeeded".to_string()),
                ("proven_after_s", "2.4".to_string()),
                ("secrets_reasserted", "4".to_string()),
            ]
        );
        let none = Map::new();
        let r = report("run", 130, Some("interrupted"), &[], &none);
        assert_eq!(
            r.outputs(),
            [
                ("holder", String::new()),
                ("outcome", "cancelled".to_string()),
                ("proven_after_s", String::new()),
                ("secrets_reasserted", String::new()),
            ]
        );
    }

    #[test]
    fn summary_names_what_was_paused_the_phases_the_proof_the_outcome_and_the_next_command() {
        let phases = run_phases();
        let mut facts = Map::new();
        facts.insert(
            "proof".into(),
            json!({"passes": 3, "counters": "reads=9 frozen=0"}),
        );
        let mut r = report(
            "run",
            130,
            Some("interrupted while sh was running"),
            &phases,
            &facts,
        );
        r.proven_after_ms = Some(2390);
        let md = r.summary();
        for want in [
            "### flux-handoff run: cancelled",
            "| Holder | `gh12.1-a1b2c3` |",
            "| Paused | Kustomization flux-system/flux-system, Kustomization flux-system/infrastructure |",
            "| Pause proven after | 2.4 s |",
            "| Proof | 3 passes; reads=9 frozen=0 |",
            "| Exit code | 130 (cancelled) |",
            "| pause proven | 2.1 s |",
            "**Error:** interrupted while sh was running",
            "**Next:** `flux-handoff fences`",
        ] {
            assert!(md.contains(want), "missing {want:?} in:\n{md}");
        }
    }

    #[test]
    fn untrusted_text_cannot_break_the_summary_table() {
        let phases = vec![phase("released: x|y\n<script>", 1)];
        let facts = Map::new();
        let md = report("resume", 0, None, &phases, &facts).summary();
        assert!(
            md.contains("| released: x\\|y &lt;script&gt; | 0.0 s |"),
            "{md}"
        );
    }

    #[test]
    fn only_handoff_commands_report() {
        for c in ["pause", "run", "resume", "ghcr reassert"] {
            assert!(reports(c), "{c}");
        }
        for c in ["fences", "doctor", "ghcr check"] {
            assert!(!reports(c), "{c}");
        }
    }
}
