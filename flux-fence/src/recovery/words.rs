//! The words of recovery: how a judged fence, a kept entry, a planned release and the
//! evidence read to a person (and, for `--output json`, the same facts as JSON values). The
//! rules live in the sibling modules; these only describe their results.

use std::fmt;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::assess::{Action, Liveness, Row, Withhold};
use super::plan::{KeepReason, PlannedRelease, RecoverPlan, Subject};
use super::run::RecoverReport;
use super::watch::WatchProgress;
use crate::ObjectRef;
use crate::command::{Command, Spell};

/// `ks/ns/name` (Kustomization), `hr/ns/name` (`HelmRelease`), else `<kind in lower
/// case>/ns/name`: the short form a person types to name a fenced object.
#[must_use]
pub fn short_ref(obj: &ObjectRef) -> String {
    let kind = match obj.resource.kind.as_str() {
        "HelmRelease" => "hr".to_string(),
        "Kustomization" => "ks".to_string(),
        other => other.to_lowercase(),
    };
    format!("{kind}/{}/{}", obj.namespace, obj.name)
}

/// `1h02m`, `3m05s`, `12s`, `1d01h`.
#[must_use]
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `now - then`, zero if `then` lies in the future.
pub(crate) fn duration_since(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or_default()
}

impl Liveness {
    /// The evidence, in words; `now` only turns the last renewal into an age, `spell` names
    /// the command that made a deliberate pause.
    #[must_use]
    pub fn describe(&self, now: Timestamp, spell: Spell) -> String {
        match self {
            Self::Live {
                renewed_while_watched: Some(after),
                ..
            } => format!(
                "holder has the Lease, renewed while watched ({}s into the watch)",
                after.as_secs()
            ),
            Self::Live {
                renewed: Some(r), ..
            } => format!(
                "holder has the Lease, renewed {} ago",
                age(duration_since(now, *r))
            ),
            Self::Live { .. } => "holder has the Lease".into(),
            Self::Paused => format!(
                "paused on purpose by `{}` (Lease parked, not renewed)",
                spell(&Command::Pause)
            ),
            Self::Orphaned(o) => o.to_string(),
            Self::OtherLease(l) => format!(
                "taken under Lease {l}, which alone says whether its holder lives (use --lease {l})"
            ),
        }
    }
}

impl fmt::Display for Withhold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ChildrenHeld { holder, children } => write!(
                f,
                "a parent whose child is still held by {holder}: release {} first",
                children
                    .iter()
                    .map(short_ref)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::MarkMoved(at) => write!(
                f,
                "{at} was changed by another writer since the fence; a plain release cannot restore it (`fences release --keep-moved` keeps that value, restores the other marks and removes the fence)"
            ),
            Self::OtherLease(l) => write!(f, "taken under Lease {l}: judged only with --lease {l}"),
            Self::Malformed { owner, problem } => write!(
                f,
                "owner annotation {owner:?} is malformed ({problem}); inspect it and fix by hand"
            ),
        }
    }
}

impl KeepReason {
    /// Why something is kept by a recovery, in words; `spell` names the commands.
    #[must_use]
    pub fn describe(&self, now: Timestamp, spell: Spell) -> String {
        match self {
            Self::Live { holder, liveness } => {
                format!("{holder} is live: {}", liveness.describe(now, spell))
            }
            Self::Paused { holder } => format!(
                "{holder} {}; only `{}` ends it",
                Liveness::Paused.describe(now, spell),
                spell(&Command::Resume {
                    holder: holder.clone(),
                    lease: None,
                    exited: false,
                })
            ),
            Self::Withheld(w) => w.to_string(),
            Self::ChildKept { holder } => {
                format!("a parent whose child is still held by {holder}")
            }
            Self::NotProved { holder, why } => format!("{holder} not proved gone: {why}"),
            Self::UnknownHolder => "its holder is unknown".into(),
        }
    }
}

impl Subject {
    /// `ks/ns/name`, or `lease <lease>` for the Lease (named `ns/name` by the caller).
    #[must_use]
    pub fn describe(&self, lease: &str) -> String {
        match self {
            Self::Fence(o) => short_ref(o),
            Self::Lease => format!("lease {lease}"),
        }
    }
}

impl fmt::Display for PlannedRelease {
    /// `ks/ns/name (holder H: why H counts as gone)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let obj = short_ref(&self.object);
        write!(f, "{obj} (holder {}: {})", self.holder, self.why)
    }
}

impl WatchProgress {
    /// One progress line of a watch of the Lease `lease` (`ns/name`).
    #[must_use]
    pub fn describe(&self, lease: &str) -> String {
        format!(
            "watching lease {lease} (holder {}, resourceVersion {}): unchanged for {}s of {}s",
            self.holder,
            self.resource_version,
            self.unchanged_for.as_secs(),
            self.duration.as_secs()
        )
    }
}

impl Row {
    /// The command that releases this fence alone, when it may be released.
    #[must_use]
    pub fn release(&self) -> Option<Command> {
        match (&self.action, &self.holder) {
            (Action::Release { .. }, Some(h)) => Some(Command::Release {
                object: self.object.clone(),
                holder: h.clone(),
                exited: false,
                keep_moved: false,
            }),
            _ => None,
        }
    }

    /// The row as JSON (`--output json` of `flux-handoff fences`).
    #[must_use]
    pub fn to_json(&self, now: Timestamp, spell: Spell) -> Value {
        let (patch, withheld) = match &self.action {
            Action::Release { patch } => (serde_json::from_str::<Value>(patch).ok(), None),
            Action::Withheld(w) => (None, Some(w.to_string())),
        };
        json!({
            "object": short_ref(&self.object),
            "kind": self.object.resource.kind,
            "namespace": self.object.namespace,
            "name": self.object.name,
            "holder": self.holder,
            "epoch": self.epoch,
            "age_seconds": self.age.map(|a| a.as_secs()),
            "role": if self.child { "target" } else { "parent" },
            "liveness": self.liveness.as_ref().map(Liveness::label),
            "evidence": self.liveness.as_ref().map(|l| l.describe(now, spell)),
            "release_command": self.release().as_ref().map(spell),
            "release_patch": patch,
            "withheld": withheld,
        })
    }
}

impl RecoverPlan {
    /// One line per fence released (`yes`) or that would be (dry run), for the Lease taken
    /// over, and for each thing kept with why. `lease` names the Lease (`ns/name`).
    #[must_use]
    pub fn lines(&self, lease: &str, now: Timestamp, yes: bool, spell: Spell) -> Vec<String> {
        let verb = if yes { "release" } else { "would release" };
        let mut lines: Vec<String> = self
            .release
            .iter()
            .map(|p| format!("{verb}: {p}"))
            .collect();
        if let Some(gone) = &self.take_lease {
            let v = if yes { "clear" } else { "would clear" };
            let (h, e) = (&gone.holder, &gone.evidence);
            lines.push(format!("{v}: lease {lease} (holder {h}: {e})"));
        }
        for (name, why) in self.kept(lease, now, spell) {
            lines.push(format!("keep: {name}: {why}"));
        }
        lines
    }

    /// The same as JSON facts: `dry_run`, `release`, `keep`, `lease`.
    #[must_use]
    pub fn facts(
        &self,
        lease: &str,
        now: Timestamp,
        yes: bool,
        spell: Spell,
    ) -> Vec<(&'static str, Value)> {
        let release: Vec<Value> = self
            .release
            .iter()
            .map(|p| {
                let (obj, why) = (short_ref(&p.object), p.why.to_string());
                json!({"object": obj, "holder": p.holder, "evidence": why})
            })
            .collect();
        let keep: Vec<Value> = self
            .kept(lease, now, spell)
            .into_iter()
            .map(|(n, w)| json!({"object": n, "why": w}))
            .collect();
        let taken = self.take_lease.as_ref();
        vec![
            ("dry_run", json!(!yes)),
            ("release", json!(release)),
            ("keep", json!(keep)),
            (
                "lease",
                json!(taken.map(|g| json!({"holder": g.holder, "evidence": g.evidence}))),
            ),
        ]
    }

    fn kept(&self, lease: &str, now: Timestamp, spell: Spell) -> Vec<(String, String)> {
        let keep = self.keep.iter();
        keep.map(|(s, why)| (s.describe(lease), why.describe(now, spell)))
            .collect()
    }
}

impl RecoverReport {
    /// `released: ks/ns/name` for each fence released, then `lease cleared: <lease>`.
    #[must_use]
    pub fn lines(&self, lease: &str) -> Vec<String> {
        let released = self.released.iter();
        let mut lines: Vec<String> = released
            .map(|o| format!("released: {}", short_ref(o)))
            .collect();
        if self.lease_released {
            lines.push(format!("lease cleared: {lease}"));
        }
        lines
    }

    /// `ks/ns/name: why; lease ns/name: why` for what could not be done, or `None`.
    #[must_use]
    pub fn problems_line(&self, lease: &str) -> Option<String> {
        let problems = self.problems.iter();
        let all: Vec<String> = problems
            .map(|(s, why)| format!("{}: {why}", s.describe(lease)))
            .collect();
        (!all.is_empty()).then(|| all.join("; "))
    }
}

#[cfg(test)]
mod tests;
