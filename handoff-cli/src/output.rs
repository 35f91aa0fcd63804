//! What `flux-handoff` prints: phase lines for people on stderr, one JSON document for machines
//! on stdout (`--output json`), and in GitHub Actions phase groups and `::error::` annotations
//! whose untrusted text is escaped so it cannot become a workflow command.
//!
//! In GitHub Actions (`GITHUB_ACTIONS=true`) a handoff command (`pause`, `run`, `resume`,
//! `ghcr reassert`) also reports the Actions way when it ends ([`actions`]): a step summary in
//! Markdown appended to `$GITHUB_STEP_SUMMARY`, and the outputs `holder`, `outcome`,
//! `proven_after_s` and `secrets_reasserted` appended to `$GITHUB_OUTPUT`, and `cleanup=complete`
//! when it holds nothing any more (released all it took, or took nothing).
//!
//! Nothing here ever receives a credential: callers pass phase names, counts and object names.

mod actions;

use std::io::Write;
use std::time::Instant;

use flux_fence::ObjectRef;
use flux_fence::recovery::short_ref;
use serde_json::{Value, json};

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    /// The JSON document as YAML.
    Yaml,
    /// One `kind/namespace/name` per line of the objects the command lists.
    Name,
}

/// One finished phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub name: String,
    pub millis: u128,
}

/// Collects phases and prints them as they finish.
#[derive(Debug)]
pub struct Output {
    format: Format,
    github: bool,
    quiet: bool,
    started: Instant,
    phase_started: Instant,
    phases: Vec<Phase>,
    facts: serde_json::Map<String, Value>,
    /// The objects fenced, parents first (the step summary's "Paused").
    paused: Vec<String>,
    /// Milliseconds from the start until the pause was proven (the `proof` fact arrived).
    proven_after: Option<u128>,
    /// The command released everything it took (or took nothing): the `cleanup=complete`
    /// output, on which the Action's post step stands down.
    cleanup_complete: bool,
    /// The objects the command lists (`-o name`), as `kind/namespace/name`.
    names: Vec<String>,
    /// The flux-style progress lines and Actions groups ([`progress`]).
    progress: progress::Progress,
    /// Where Flux-format events go (`--events-addr`; [`crate::notify`]).
    events: Option<handoff_app::notify::Notifier>,
}

impl Output {
    pub fn new(format: Format, github: bool, quiet: bool) -> Self {
        let now = Instant::now();
        Self {
            format,
            github,
            quiet,
            started: now,
            phase_started: now,
            phases: Vec::new(),
            facts: serde_json::Map::new(),
            paused: Vec::new(),
            proven_after: None,
            cleanup_complete: false,
            names: Vec::new(),
            progress: progress::Progress::new(github),
            events: None,
        }
    }

    /// Sends Flux-format events from now on ([`crate::notify::configure`]).
    pub fn set_events(&mut self, notifier: handoff_app::notify::Notifier) {
        self.events = Some(notifier);
    }

    /// The events' sender, when `--events-addr` is set.
    pub fn events(&mut self) -> Option<&mut handoff_app::notify::Notifier> {
        self.events.as_mut()
    }

    /// The sender, to wait for what is still in flight ([`crate::notify::flush`]).
    pub fn take_events(&mut self) -> Option<handoff_app::notify::Notifier> {
        self.events.take()
    }

    /// The stage the next phase lines belong to (`pause`, `work`, `resume`): one `►` line
    /// when its first line comes, and in Actions one group holding its lines.
    pub fn stage(&mut self, stage: &'static str) {
        self.progress.stage(stage);
    }

    /// A wait that goes on: `◎ LINE`.
    pub fn waiting(&mut self, line: &str) {
        let lines = self.progress.line(progress::Kind::Waiting, line);
        if !self.quiet {
            self.print(&lines);
        }
    }

    fn print(&self, lines: &[String]) {
        let mut err = std::io::stderr().lock();
        for l in lines {
            // Only the group title is a workflow command's data; the lines are plain output.
            match l.strip_prefix("::group::") {
                Some(title) if self.github => {
                    let _ = writeln!(err, "::group::{}", escape_data(&plain::line(title)));
                }
                // Our own command with no data (the escaper would make it `\::endgroup::`).
                None if self.github && l == "::endgroup::" => {
                    let _ = writeln!(err, "::endgroup::");
                }
                _ => {
                    let _ = writeln!(err, "{}", plain::line(l));
                }
            }
        }
    }

    /// Whether stdout carries only the final output (`-o json|yaml|name`), not text.
    pub fn is_json(&self) -> bool {
        self.format != Format::Text
    }

    /// Records the objects the command lists (`-o name` prints them as `kind/ns/name`).
    pub fn list(&mut self, objects: &[ObjectRef]) {
        self.names.extend(objects.iter().map(short_ref));
    }

    /// Records objects the command lists by their names, already `kind/ns/name`.
    pub fn list_names(&mut self, names: &[String]) {
        self.names.extend_from_slice(names);
    }

    /// Whether this run is inside GitHub Actions (`GITHUB_ACTIONS=true`).
    pub fn github_from_env() -> bool {
        std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
    }

    /// Records a finished phase and prints its line, e.g. `lease acquired (0.1s)`.
    pub fn phase(&mut self, line: &str) {
        let millis = self.phase_started.elapsed().as_millis();
        self.phase_started = Instant::now();
        self.phases.push(Phase {
            name: line.to_string(),
            millis,
        });
        let lines = self.progress.line(
            progress::Kind::Done,
            &format!("{line} ({:.1}s)", secs(millis)),
        );
        if !self.quiet {
            self.print(&lines);
        }
    }

    /// In GitHub Actions, a `::warning::` annotation (a wait past half its budget); elsewhere
    /// nothing (the line was already printed as a note).
    pub fn warning(&self, line: &str) {
        if self.github && !self.quiet {
            eprintln!("::warning::{}", escape_data(&plain::line(line)));
        }
    }

    /// Prints an informational line for people (not a phase).
    pub fn note(&self, line: &str) {
        if !self.quiet {
            eprintln!("{}", plain::line(line));
        }
    }

    /// Records objects just fenced, for the step summary.
    pub fn paused(&mut self, objects: &[ObjectRef]) {
        self.paused.extend(objects.iter().map(ToString::to_string));
        self.list(objects);
    }

    /// Adds a fact to the final JSON document. The `proof` fact marks the moment the pause was
    /// proven (the `proven_after_s` output in Actions).
    pub fn fact(&mut self, key: &str, value: Value) {
        if key == "proof" && self.proven_after.is_none() {
            self.proven_after = Some(self.started.elapsed().as_millis());
        }
        self.facts.insert(key.to_string(), value);
    }

    /// The `holder` fact, once the session has one.
    pub fn holder(&self) -> Option<&str> {
        self.facts.get("holder").and_then(Value::as_str)
    }

    /// Records whether the command holds nothing any more: it released everything it took,
    /// or it took nothing. A parked pause holds.
    pub fn cleanup_complete(&mut self, complete: bool) {
        self.cleanup_complete = complete;
    }

    /// Prints the end of the run: the error line (as a GitHub annotation in Actions), last,
    /// after `next` as a `next: COMMAND` line of its own when the error line carries no next
    /// step ([`crate::failure::Failure::next`]), and with `--output json` the one final
    /// document on stdout (with `next` as its own key then). In Actions, a handoff command also
    /// appends its step summary and outputs ([`actions`]); a file that cannot be written is
    /// reported on stderr and changes nothing else.
    pub fn finish(&mut self, command: &str, code: u8, error: Option<&str>, next: Option<&str>) {
        let end = self.progress.end(code != 0);
        if !self.quiet {
            self.print(&end);
        }
        if let (Some(_), Some(next)) = (error, next) {
            eprintln!("{}", plain::line(&next_line(next)));
        }
        if let Some(msg) = error {
            if self.github {
                eprintln!("::error::{}", escape_data(&plain::line(msg)));
            } else {
                eprintln!("error: {}", plain::line(msg));
            }
        }
        if self.github && actions::reports(command) {
            let report = actions::Report {
                command,
                code,
                error,
                next,
                phases: &self.phases,
                facts: &self.facts,
                paused: &self.paused,
                proven_after_ms: self.proven_after,
            };
            let mut step = report.step_report();
            step.cleanup_complete = self.cleanup_complete;
            if let Err(e) = step.append_to_runner_files() {
                eprintln!("::warning::{}", escape_data(&plain::line(&e)));
            }
        }
        if self.format != Format::Text {
            let mut doc = json!({
                "command": command,
                "result": if code == 0 { "ok" } else { "error" },
                "exit_code": code,
                "error": error,
                "duration_ms": self.started.elapsed().as_millis(),
                "phases": self.phases.iter().map(|p| json!({ "name": p.name, "ms": p.millis })).collect::<Vec<_>>(),
                "facts": self.facts,
            });
            if let (Some(_), Some(next)) = (error, next) {
                doc["next"] = json!(next);
            }
            match self.format {
                Format::Yaml => print!("{}", plain::document(&yaml::document(&doc))),
                Format::Name => self
                    .names
                    .iter()
                    .for_each(|n| println!("{}", plain::line(n))),
                _ => println!("{}", plain::document(&doc.to_string())),
            }
        }
    }
}

/// The line of a next step kept out of the error line: `next: COMMAND`. It never starts with
/// `::`, so in Actions it is plain output, not a workflow command.
fn next_line(next: &str) -> String {
    format!("next: {next}")
}

/// Which commands list objects (`-o name` is refused, exit 2, elsewhere).
pub fn lists_objects(command: &str) -> bool {
    matches!(
        command,
        "pause" | "run" | "resume" | "fences" | "ghcr reassert"
    )
}

#[allow(clippy::cast_precision_loss)] // phase times are seconds with one decimal
fn secs(millis: u128) -> f64 {
    millis as f64 / 1000.0
}

use handoff_app::github::escape_data;
use handoff_app::render::{plain, progress, yaml};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flux_habits_commands_that_list_objects() {
        for (cmd, lists) in [
            ("fences", true),
            ("resume", true),
            ("doctor", false),
            ("rbac", false),
            ("ghcr check", false),
        ] {
            assert_eq!(lists_objects(cmd), lists, "{cmd}");
        }
    }
}
