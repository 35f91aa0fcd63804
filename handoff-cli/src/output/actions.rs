//! Reporting a handoff the GitHub Actions way: `handoff_app::github` renders the step summary
//! and outputs; this module only says what they contain for a `flux-handoff` command — the
//! outcome word of each exit code, the holder and the paused objects from the phase lines, the
//! next command to run.
//!
//! Everything here is built from what [`super::Output`] already holds — phase lines, facts and
//! the final error line — none of which ever carries a credential.

use std::time::Duration;

use handoff_app::github::StepReport;
use serde_json::{Map, Value};

use super::Phase;

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
    /// The next step kept out of the error line (a proof timeout's), when there is one.
    pub next: Option<&'a str>,
    pub phases: &'a [Phase],
    pub facts: &'a Map<String, Value>,
    /// The objects this run fenced, parents first.
    pub paused: &'a [String],
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
            8 => "pause-broken",
            10 => "not-ready",
            130 => "cancelled",
            _ => "failed",
        }
    }

    /// The one command to run next after a failure: the one printed on its own line (a proof
    /// timeout's, whose error line is its counters only), or the one the error line ends with
    /// (`; next: COMMAND`, [`handoff_app::next`]), else by exit code. A timeout without its own
    /// next step gets none: `doctor` checks permissions, not a proof; nor does `not-ready`
    /// (exit 10): everything was handed back, so `fences` has nothing to show.
    pub fn next_command(&self) -> Option<String> {
        if self.code == 0 || self.outcome() == "command-failed" {
            return None;
        }
        if let Some(next) = self.next {
            return Some(next.to_string());
        }
        if let Some((_, next)) = self.error.and_then(|e| e.rsplit_once("; next: ")) {
            return Some(next.to_string());
        }
        match self.code {
            4 | 10 => None,
            2 | 6 => Some("flux-handoff doctor".into()),
            5 => Some("flux-handoff ghcr check".into()),
            _ => Some("flux-handoff fences".into()),
        }
    }

    /// The library's step report of this command.
    pub fn step_report(&self) -> StepReport {
        let outcome = self.outcome();
        let mut r = StepReport::new(
            &format!("flux-handoff {}", self.command),
            outcome,
            &format!("{} ({outcome})", self.code),
        );
        r.holder = self
            .facts
            .get("holder")
            .and_then(Value::as_str)
            .map(Into::into);
        r.paused = self.paused.to_vec();
        r.proven_after = self
            .proven_after_ms
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)));
        r.proof = self.facts.get("proof").map(|p| {
            let passes = p.get("passes").and_then(Value::as_u64).unwrap_or(0);
            let counters = p.get("counters").and_then(Value::as_str).unwrap_or("");
            (passes, counters.to_string())
        });
        r.secrets = self
            .facts
            .get("secret_counts")
            .and_then(Value::as_object)
            .map(|counts| {
                let n = ["created", "updated", "adopted"]
                    .iter()
                    .filter_map(|k| counts.get(*k).and_then(Value::as_u64))
                    .sum();
                let each: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
                (n, each.join(", "))
            });
        if let Some(c) = self.facts.get("command_exit_code") {
            r.rows.push(("Command exit code".into(), c.to_string()));
        }
        r.phases = self
            .phases
            .iter()
            .map(|p| {
                let ms = u64::try_from(p.millis).unwrap_or(u64::MAX);
                (p.name.clone(), Duration::from_millis(ms))
            })
            .collect();
        r.error = self.error.map(Into::into);
        r.next = self.next_command();
        r
    }
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
            next: None,
            phases,
            facts,
            paused: &[],
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
            (8, Some("unsuspended"), "pause-broken"),
            (10, Some("handed back, not Ready"), "not-ready"),
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
    fn next_step_summary_after_a_proof_timeout_is_its_next_line_never_doctor() {
        let facts = Map::new();
        // The proof timeout's line is its counters only; its next step comes on its own.
        let line = "stable pause not proven within 300s: observations=3";
        let mut r = report("pause", 4, Some(line), &[], &facts);
        r.next = Some("flux-handoff pause ks/a/b --retire restart");
        assert_eq!(
            r.next_command().as_deref(),
            Some("flux-handoff pause ks/a/b --retire restart")
        );
        assert_eq!(
            r.step_report().next.as_deref(),
            Some("flux-handoff pause ks/a/b --retire restart")
        );
        // Any other failure's line ends with its next step.
        let line = "Kustomization a/b did not acknowledge the suspend within 300s; next: \
                    kubectl -n flux-system logs deploy/kustomize-controller --since 10m";
        let r = report("pause", 4, Some(line), &[], &facts);
        assert_eq!(
            r.next_command().as_deref(),
            Some("kubectl -n flux-system logs deploy/kustomize-controller --since 10m")
        );
        let r = report(
            "pause",
            4,
            Some("stable pause not proven within 300s"),
            &[],
            &facts,
        );
        assert_eq!(r.next_command(), None);
        // Handed back but not Ready: nothing is held, so no `fences` to run.
        let line = "not Ready within 5s after the resume: Kustomization a/b (Ready=False)";
        let r = report("resume", 10, Some(line), &[], &facts);
        assert_eq!(r.next_command(), None);
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
        assert_eq!(r.next_command().as_deref(), Some("flux-handoff fences"));
    }

    #[test]
    fn the_step_report_carries_the_mapping() {
        let phases = run_phases();
        let mut facts = Map::new();
        facts.insert("proof".into(), json!({"passes": 3, "counters": "reads=9"}));
        facts.insert("command_exit_code".into(), json!(0));
        facts.insert(
            "secret_counts".into(),
            json!({"created": 1, "updated": 2, "unchanged": 5, "adopted": 1}),
        );
        facts.insert("holder".into(), json!("gh12.1-a1b2c3"));
        let paused = ["Kustomization flux-system/flux-system".to_string()];
        let mut r = report("run", 130, Some("interrupted"), &phases, &facts);
        r.proven_after_ms = Some(2390);
        r.paused = &paused;
        let step = r.step_report();
        assert_eq!(step.outputs()[2], ("proven_after_s", "2.4".to_string()));
        assert_eq!(step.outputs()[3], ("secrets_reasserted", "4".to_string()));
        let md = step.summary();
        for want in [
            "### flux-handoff run: cancelled",
            "| Holder | `gh12.1-a1b2c3` |",
            "| Paused | Kustomization flux-system/flux-system |",
            "| Proof | 3 passes; reads=9 |",
            "| Command exit code | 0 |",
            "| Exit code | 130 (cancelled) |",
            "**Next:** `flux-handoff fences`",
        ] {
            assert!(md.contains(want), "missing {want:?} in:\n{md}");
        }
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
