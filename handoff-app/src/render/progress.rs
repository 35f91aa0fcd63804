//! Progress lines in the flux CLI's style: `► STAGE` when a stage (pause, work, resume)
//! starts, `✔ LINE (1.2s)` when one of its phases ends, `◎ LINE` while a wait goes on, and
//! `✗ STAGE failed` when the command fails inside it. No colour anywhere (so none off a
//! terminal either). In GitHub Actions a stage is one `::group::` holding its lines, instead of
//! one group per line. A stage opens at its first line, so a refusal before any phase is still
//! the one error line.

/// What a line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A phase ended.
    Done,
    /// A wait goes on.
    Waiting,
}

/// The stage currently open, and how stages are shown.
#[derive(Debug, Default)]
pub struct Progress {
    github: bool,
    /// The stage lines go to next.
    stage: Option<&'static str>,
    /// The stage shown as started (its `►` line or its group).
    open: Option<&'static str>,
}

impl Progress {
    #[must_use]
    pub fn new(github: bool) -> Self {
        Self {
            github,
            ..Self::default()
        }
    }

    /// The stage the next lines belong to.
    pub fn stage(&mut self, stage: &'static str) {
        self.stage = Some(stage);
    }

    /// The lines to print for `text` (escaped by the caller where it goes to Actions).
    pub fn line(&mut self, kind: Kind, text: &str) -> Vec<String> {
        let mut out = self.open_stage();
        out.push(match kind {
            Kind::Done => format!("✔ {text}"),
            Kind::Waiting => format!("◎ {text}"),
        });
        out
    }

    /// The lines ending the output: `✗ STAGE failed` on failure inside a stage, and the end
    /// of an open group.
    pub fn end(&mut self, failed: bool) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(open) = self.open.take() {
            if failed {
                out.push(format!("✗ {open} failed"));
            }
            if self.github {
                out.push("::endgroup::".into());
            }
        }
        out
    }

    fn open_stage(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let Some(stage) = self.stage else {
            return out;
        };
        if self.open == Some(stage) {
            return out;
        }
        if self.github {
            if self.open.is_some() {
                out.push("::endgroup::".into());
            }
            out.push(format!("::group::{stage}"));
        }
        out.push(format!("► {stage}"));
        self.open = Some(stage);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_progress_a_stage_starts_with_its_first_line_and_ends_with_the_output() {
        let mut p = Progress::new(false);
        // No stage yet: the line alone.
        assert_eq!(p.line(Kind::Done, "proven (1.0s)"), ["✔ proven (1.0s)"]);
        p.stage("pause");
        assert_eq!(
            p.line(Kind::Done, "lease acquired (0.1s)"),
            ["► pause", "✔ lease acquired (0.1s)"]
        );
        assert_eq!(p.line(Kind::Waiting, "waiting 10s"), ["◎ waiting 10s"]);
        p.stage("resume");
        assert_eq!(
            p.line(Kind::Done, "released: x (0.1s)"),
            ["► resume", "✔ released: x (0.1s)"]
        );
        assert_eq!(p.end(true), ["✗ resume failed"]);
        assert!(p.end(true).is_empty(), "ended once");
    }

    #[test]
    fn flux_progress_in_actions_one_group_per_stage() {
        let mut p = Progress::new(true);
        p.stage("pause");
        let mut lines = p.line(Kind::Done, "lease acquired (0.1s)");
        lines.extend(p.line(Kind::Done, "pause proven (2.0s)"));
        p.stage("work");
        lines.extend(p.line(Kind::Done, "running make (0.0s)"));
        lines.extend(p.end(false));
        assert_eq!(
            lines,
            [
                "::group::pause",
                "► pause",
                "✔ lease acquired (0.1s)",
                "✔ pause proven (2.0s)",
                "::endgroup::",
                "::group::work",
                "► work",
                "✔ running make (0.0s)",
                "::endgroup::",
            ]
        );
    }

    #[test]
    fn flux_progress_a_refusal_before_any_phase_prints_nothing_more() {
        let mut p = Progress::new(true);
        p.stage("pause");
        assert!(p.end(true).is_empty());
    }
}
