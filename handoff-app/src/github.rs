//! Reporting a handoff the GitHub Actions way, for any program that runs one in a workflow
//! (the `flux-handoff` CLI, or a deploy tool in merge-group runs): the step summary (Markdown
//! appended to `$GITHUB_STEP_SUMMARY`), the step outputs (appended to `$GITHUB_OUTPUT`), and
//! workflow-command escaping for annotations.
//!
//! A [`StepReport`] is plain data the caller fills from what it already knows — the session's
//! progress lines ([`flux_suspend::Event::line`]), its holder, its proof — and never a credential. The
//! Markdown and the outputs are pure functions of it; [`StepReport::append_to_runner_files`]
//! only appends them to the runner's files.
//!
//! ```
//! use std::time::Duration;
//! use handoff_app::github::StepReport;
//!
//! let mut report = StepReport::new("deploy", "succeeded", "0 (succeeded)");
//! report.holder = Some("gh12.1-a1b2c3".into());
//! report.paused = vec!["Kustomization flux-system/apps".into()];
//! report.phases.push(("pause proven".into(), Duration::from_millis(2100)));
//! let md = report.summary();
//! assert!(md.contains("| Holder | `gh12.1-a1b2c3` |"));
//! assert!(md.contains("| pause proven | 2.1 s |"));
//! ```

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

/// What a finished handoff step reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepReport {
    /// What ran, e.g. `flux-handoff run` or `deploy`.
    pub title: String,
    /// The `outcome` output: one word, e.g. `succeeded`, `refused`, `cancelled`.
    pub outcome: String,
    /// The exit status as shown, e.g. `130 (cancelled)`.
    pub exit: String,
    /// The holder of the run.
    pub holder: Option<String>,
    /// The objects paused, parents first.
    pub paused: Vec<String>,
    /// Time from the start until the pause was proven.
    pub proven_after: Option<Duration>,
    /// The proof: its passes and its counters line.
    pub proof: Option<(u64, String)>,
    /// Secrets written under the pause, if the step wrote any: the total and its breakdown.
    pub secrets: Option<(u64, String)>,
    /// More rows of the summary's table, in order (label, value).
    pub rows: Vec<(String, String)>,
    /// Each finished phase, with its duration.
    pub phases: Vec<(String, Duration)>,
    /// The error line, when the step failed.
    pub error: Option<String>,
    /// The one command to run next, when there is one.
    pub next: Option<String>,
    /// The step holds nothing any more (it released all it took, or took nothing): the
    /// output `cleanup=complete`, on which the Action's post step stands down.
    pub cleanup_complete: bool,
}

impl StepReport {
    /// A report with its title, outcome word and exit text; the rest empty.
    #[must_use]
    pub fn new(title: &str, outcome: &str, exit: &str) -> Self {
        Self {
            title: title.into(),
            outcome: outcome.into(),
            exit: exit.into(),
            ..Self::default()
        }
    }

    /// The step outputs, `name=value` each: `holder`, `outcome`, `proven_after_s`,
    /// `secrets_reasserted` (an empty value means "not reached"), then `cleanup=complete`
    /// when the step holds nothing.
    #[must_use]
    pub fn outputs(&self) -> Vec<(&'static str, String)> {
        let mut outputs = vec![
            ("holder", self.holder.clone().unwrap_or_default()),
            ("outcome", self.outcome.clone()),
            (
                "proven_after_s",
                self.proven_after
                    .map(|d| format!("{:.1}", d.as_secs_f64()))
                    .unwrap_or_default(),
            ),
            (
                "secrets_reasserted",
                self.secrets
                    .as_ref()
                    .map(|(n, _)| n.to_string())
                    .unwrap_or_default(),
            ),
        ];
        if self.cleanup_complete {
            outputs.push(("cleanup", "complete".into()));
        }
        outputs
    }

    /// The step summary in Markdown. Every value is made safe for one table cell.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "### {}: {}\n", self.title, self.outcome);
        let _ = writeln!(md, "| | |\n|---|---|");
        if let Some(h) = &self.holder {
            let _ = writeln!(md, "| Holder | `{}` |", cell(h));
        }
        if !self.paused.is_empty() {
            let _ = writeln!(md, "| Paused | {} |", cell(&self.paused.join(", ")));
        }
        if let Some(d) = self.proven_after {
            let _ = writeln!(md, "| Pause proven after | {:.1} s |", d.as_secs_f64());
        }
        if let Some((passes, counters)) = &self.proof {
            let counters = if counters.is_empty() { "-" } else { counters };
            let _ = writeln!(md, "| Proof | {passes} passes; {} |", cell(counters));
        }
        if let Some((n, each)) = &self.secrets {
            let _ = writeln!(md, "| Secrets reasserted | {n} ({}) |", cell(each));
        }
        for (label, value) in &self.rows {
            let _ = writeln!(md, "| {} | {} |", cell(label), cell(value));
        }
        let _ = writeln!(md, "| Exit code | {} |", cell(&self.exit));
        if !self.phases.is_empty() {
            let _ = writeln!(md, "\n| Phase | Duration |\n|---|---|");
            for (name, d) in &self.phases {
                let _ = writeln!(md, "| {} | {:.1} s |", cell(name), d.as_secs_f64());
            }
        }
        if let Some(e) = &self.error {
            let _ = writeln!(md, "\n**Error:** {}", cell(e));
        }
        if let Some(next) = &self.next {
            let _ = writeln!(md, "\n**Next:** `{}`", next.replace('`', "'"));
        }
        md.push('\n');
        md
    }

    /// Appends the summary to `$GITHUB_STEP_SUMMARY` and the outputs to `$GITHUB_OUTPUT`, each
    /// only when its variable is set; an output whose value is not one line is left out.
    ///
    /// # Errors
    ///
    /// One line naming each file that could not be written; the other is still written.
    pub fn append_to_runner_files(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty())
            && let Err(e) = append(&path, &self.summary())
        {
            problems.push(format!("cannot append the step summary: {e}"));
        }
        if let Some(path) = std::env::var_os("GITHUB_OUTPUT").filter(|p| !p.is_empty()) {
            let mut text = String::new();
            for (name, value) in self.outputs() {
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
}

/// Escapes text for a workflow command's data part (`::error::<data>`): `%`, CR and LF are
/// encoded, so untrusted text cannot end the command and start another.
#[must_use]
pub fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
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
    use super::*;

    fn full() -> StepReport {
        let mut r = StepReport::new("flux-handoff run", "cancelled", "130 (cancelled)");
        r.holder = Some("gh12.1-a1b2c3".into());
        r.paused = vec![
            "Kustomization flux-system/flux-system".into(),
            "Kustomization flux-system/infrastructure".into(),
        ];
        r.proven_after = Some(Duration::from_millis(2390));
        r.proof = Some((3, "reads=9 frozen=0".into()));
        r.phases = vec![("pause proven".into(), Duration::from_millis(2100))];
        r.error = Some("interrupted while sh was running".into());
        r.next = Some("flux-handoff fences".into());
        r
    }

    #[test]
    fn summary_names_what_was_paused_the_phases_the_proof_the_outcome_and_the_next_command() {
        let md = full().summary();
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
    fn outputs_are_one_line_each_and_empty_when_not_reached() {
        let mut r = full();
        r.outcome = "succeeded".into();
        r.secrets = Some((4, "created 1, updated 2".into()));
        assert_eq!(
            r.outputs(),
            [
                ("holder", "gh12.1-a1b2c3".to_string()),
                ("outcome", "succeeded".to_string()),
                ("proven_after_s", "2.4".to_string()),
                ("secrets_reasserted", "4".to_string()),
            ]
        );
        let mut r = StepReport::new("x", "cancelled", "130");
        r.cleanup_complete = true;
        assert_eq!(
            r.outputs(),
            [
                ("holder", String::new()),
                ("outcome", "cancelled".to_string()),
                ("proven_after_s", String::new()),
                ("secrets_reasserted", String::new()),
                ("cleanup", "complete".to_string()),
            ]
        );
    }

    #[test]
    fn untrusted_text_cannot_break_the_summary_table_or_start_a_workflow_command() {
        let mut r = StepReport::new("x", "succeeded", "0");
        r.phases = vec![("released: x|y\n<script>".into(), Duration::ZERO)];
        let md = r.summary();
        assert!(
            md.contains("| released: x\\|y &lt;script&gt; | 0.0 s |"),
            "{md}"
        );
        let hostile = "boom\n::add-mask::x\r\n::set-env name=A::b %0A";
        let escaped = escape_data(hostile);
        assert!(!escaped.contains('\n') && !escaped.contains('\r'));
        assert_eq!(
            escaped,
            "boom%0A::add-mask::x%0D%0A::set-env name=A::b %250A"
        );
    }
}
