//! `--dry-run=server` of `pause`, `run` and `ghcr reassert`: the preflight, then the Lease
//! acquisition and each fence write sent with the server's `dryRun=All`
//! ([`flux_suspend::dry_run`]) — and for `ghcr reassert` each Secret write too — one
//! line per write with the server's answer. Nothing is changed, nothing is waited for, the
//! command of `run` is not run, and nothing is left to release.

use flux_fence::ObjectRef;
use flux_suspend::dry_run::{DryWhat, dry_run};
use flux_suspend::{Cancel, SessionOptions};
use handoff_app::settings::Plan;
use kube::Client;
use serde_json::{Value, json};

use crate::exit;
use crate::failure::Failure;
use crate::output::Output;
use crate::session;
use handoff_app::next::Hints;

/// The writes of a dry run so far: the `dry_run` fact, and the first that would not pass
/// (its line and the command to run next).
#[derive(Debug, Default)]
pub struct Tally {
    writes: Vec<Value>,
    passed: usize,
    first_failed: Option<(String, String)>,
}

impl Tally {
    /// Records one write: prints `✔ would …` or `✗ …`, adds it to the fact.
    pub fn write(&mut self, out: &mut Output, line: &str, passes: bool, fact: Value, next: String) {
        self.writes.push(fact);
        if passes {
            self.passed += 1;
            out.phase(line);
        } else {
            out.note(&format!("✗ {line}"));
            self.first_failed.get_or_insert((line.to_string(), next));
        }
    }

    /// `dry run: N writes would pass, M denied or refused; nothing was changed`.
    pub fn summary(&self) -> String {
        format!(
            "dry run: {} writes would pass, {} denied or refused; nothing was changed",
            self.passed,
            self.writes.len() - self.passed
        )
    }

    /// Prints the summary and the facts; exit 0 when every write would pass, else 6 with the
    /// first write that would not and its next command.
    pub fn end(self, out: &mut Output) -> Result<u8, Failure> {
        let summary = self.summary();
        out.fact("dry_run", json!(self.writes));
        out.fact("changed", json!(false));
        out.note(&summary);
        match self.first_failed {
            None => Ok(exit::SUCCESS),
            Some((line, next)) => Err(Failure::new(
                exit::KUBE_API,
                format!("{summary}; first: {line}; next: {next}"),
            )),
        }
    }
}

/// The preflight and the pause's first writes, dry, into `tally`.
pub async fn pause_writes(
    client: Client,
    opts: SessionOptions,
    cancel: Cancel,
    out: &mut Output,
    hints: &Hints,
    tally: &mut Tally,
) -> Result<(), Failure> {
    out.stage("dry run");
    // A dry run takes nothing: whatever happens, nothing is left to release.
    out.cleanup_complete(true);
    let found = dry_run(client, opts, cancel)
        .await
        .map_err(|e| session::failure(&e, hints))?;
    for w in &found.writes {
        tally.write(
            out,
            &w.line(),
            w.answer.passes(),
            json!(w),
            handoff_app::next::after_dry_write(&w.answer, hints),
        );
    }
    // `-o name`: the objects the real run would fence, parents first.
    let fenced: Vec<ObjectRef> = found
        .writes
        .iter()
        .filter(|w| w.what != DryWhat::Lease)
        .map(|w| w.object.clone())
        .collect();
    out.list(&fenced);
    Ok(())
}

/// The dry run of `pause` and `run`'s plan (no Lease wait: nothing is taken); `not_run` names
/// the program `run` would have started.
pub async fn run(
    client: Client,
    plan: Plan,
    cancel: Cancel,
    out: &mut Output,
    hints: &Hints,
    not_run: Option<&str>,
) -> Result<u8, Failure> {
    let mut tally = Tally::default();
    pause_writes(client, plan.options, cancel, out, hints, &mut tally).await?;
    if let Some(program) = not_run {
        out.note(&format!("dry run: {program} was not run"));
    }
    tally.end(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dry_run_the_summary_counts_passes_and_the_rest() {
        let mut out = Output::new(crate::output::Format::Json, false, true);
        let mut t = Tally::default();
        t.write(&mut out, "would a", true, json!({}), "n".into());
        t.write(&mut out, "b denied: x", false, json!({}), "next-b".into());
        t.write(&mut out, "c denied: y", false, json!({}), "next-c".into());
        assert_eq!(
            t.summary(),
            "dry run: 1 writes would pass, 2 denied or refused; nothing was changed"
        );
        let f = t.end(&mut out).unwrap_err();
        assert_eq!(f.code, exit::KUBE_API);
        assert!(
            f.message.ends_with("; first: b denied: x; next: next-b"),
            "{}",
            f.message
        );
    }
}
