//! What will end a hold: the one judgement behind every piece of advice about a pause or a
//! Lease someone else holds (a refusal, `fences --overdue`). It follows liveness, as
//! `fences recover` judges it (`assess`, `plan_recover`): a deliberate pause is kept by
//! recovery and ends only when resumed; a holder that renews its Lease ends its hold itself;
//! recovery acts only on a holder that stopped renewing the Lease it holds without parking
//! it, or on fences whose holder holds no Lease. Pure.

use crate::command::{Command, Spell};

/// The facts of one hold, as read: whose it is and what the Lease says of that holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Hold<'a> {
    /// The holder of the hold (a pause's fences, or the Lease).
    pub holder: &'a str,
    /// The Lease's holder as read (`None`: the Lease is absent or free).
    pub lease_holder: Option<&'a str>,
    /// Whether the Lease's holder parked it (a deliberate pause).
    pub parked: bool,
    /// Whether the Lease's holder stopped renewing it: expired by the reader's clock, or left
    /// unwritten for a full duration of its own while watched.
    pub unrenewed: bool,
    /// The Lease the hold's fences were taken under, when it is not the one read.
    pub other_lease: Option<&'a str>,
    /// Whether a fence of the hold carries a mark another writer moved since: recovery keeps
    /// that fence.
    pub mark_moved: bool,
}

impl<'a> Hold<'a> {
    /// The hold of `holder`, whose Lease (the one read) is held by `lease_holder`; parked and
    /// unrenewed unset, taken under the Lease read, no mark moved.
    #[must_use]
    pub fn new(holder: &'a str, lease_holder: Option<&'a str>) -> Self {
        Self {
            holder,
            lease_holder,
            parked: false,
            unrenewed: false,
            other_lease: None,
            mark_moved: false,
        }
    }

    /// Sets [`Hold::parked`].
    #[must_use]
    pub fn parked(mut self, on: bool) -> Self {
        self.parked = on;
        self
    }

    /// Sets [`Hold::unrenewed`].
    #[must_use]
    pub fn unrenewed(mut self, on: bool) -> Self {
        self.unrenewed = on;
        self
    }

    /// Sets [`Hold::other_lease`].
    #[must_use]
    pub fn other_lease(mut self, lease: Option<&'a str>) -> Self {
        self.other_lease = lease;
        self
    }

    /// Sets [`Hold::mark_moved`].
    #[must_use]
    pub fn mark_moved(mut self, on: bool) -> Self {
        self.mark_moved = on;
        self
    }
}

/// What will end a hold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ending {
    /// A deliberate pause: recovery keeps it; only resuming its holder ends it.
    Resume {
        /// The holder to resume.
        holder: String,
    },
    /// Its holder has the Lease and renews it: its run releases it when it ends (a CI job's
    /// post step, when the run is cut short).
    ItsRun {
        /// The holder.
        holder: String,
    },
    /// `fences recover` acts on it: its holder stopped renewing the Lease it holds (released
    /// once the Lease stays unwritten for its full duration while watched), or holds no Lease.
    Recover {
        /// Whether its holder still holds the Lease (then recovery watches it first).
        holds_lease: bool,
    },
    /// Recovery would keep a fence of it whose mark another writer moved: only a release that
    /// keeps the moved value ends it (the listing names it).
    MarkMoved,
    /// Taken under another Lease (`namespace/name`), which alone says whether its holder lives.
    OtherLease(String),
}

/// What will end `hold`, as recovery judges it.
///
/// # Guarantees
/// [`Ending::Recover`] only when `fences recover` (without `--include-paused`) would act on
/// it; a parked Lease of the hold's holder is always [`Ending::Resume`].
#[must_use]
pub fn what_ends(hold: &Hold<'_>) -> Ending {
    if let Some(l) = hold.other_lease {
        return Ending::OtherLease(l.to_string());
    }
    let holds_lease = hold.lease_holder == Some(hold.holder);
    let holder = hold.holder.to_string();
    match (holds_lease, hold.parked, hold.unrenewed) {
        (true, true, _) => Ending::Resume { holder },
        (true, false, false) => Ending::ItsRun { holder },
        _ if hold.mark_moved => Ending::MarkMoved,
        (holds_lease, ..) => Ending::Recover { holds_lease },
    }
}

impl Ending {
    /// The command that ends it, when one does: the resume of a parked pause, or the recovery
    /// of the Lease `lease` (`namespace/name`).
    #[must_use]
    pub fn command(&self, lease: &str) -> Option<Command> {
        match self {
            Self::Resume { holder } => Some(Command::Resume {
                holder: holder.clone(),
                lease: Some(lease.to_string()),
                exited: false,
            }),
            Self::Recover { .. } => Some(Command::Recover {
                lease: lease.to_string(),
            }),
            _ => None,
        }
    }

    /// What ends it, in words, the commands spelled by `spell`; `lease` is the Lease read.
    #[must_use]
    pub fn describe(&self, lease: &str, spell: Spell) -> String {
        let command = || self.command(lease).as_ref().map(spell).unwrap_or_default();
        match self {
            Self::Resume { .. } => command(),
            Self::ItsRun { .. } => {
                "not parked: its run still holds the Lease and releases it when it ends".into()
            }
            Self::Recover { holds_lease: true } => format!(
                "its run stopped renewing the Lease {lease} and did not park it: `{}` releases it \
                 once the Lease stays unwritten for its full duration",
                command()
            ),
            Self::Recover { holds_lease: false } => format!(
                "its holder does not hold the Lease {lease}: `{}` releases it",
                command()
            ),
            Self::MarkMoved => format!(
                "another writer moved a mark of it, which recovery keeps: `{}` names the release \
                 that keeps that value",
                spell(&Command::Fences {
                    lease: Some(lease.to_string())
                })
            ),
            Self::OtherLease(l) => format!(
                "taken under Lease {l}, which alone says what ends it: `{}`",
                spell(&Command::Fences {
                    lease: Some(l.clone())
                })
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::test_spell;

    /// Every combination of the facts: recovery is named only where it would act, and a
    /// parked pause of its own holder is always a resume.
    #[test]
    fn what_ends_follows_liveness_as_recovery_judges_it() {
        let resume = || Ending::Resume { holder: "h".into() };
        let run = || Ending::ItsRun { holder: "h".into() };
        let recover = |holds_lease| Ending::Recover { holds_lease };
        let h = |lease| Hold::new("h", lease);
        let table: Vec<(Hold<'_>, Ending)> = vec![
            // The Lease is the hold's own.
            (h(Some("h")), run()),
            (h(Some("h")).unrenewed(true), recover(true)),
            (h(Some("h")).parked(true), resume()),
            (h(Some("h")).parked(true).unrenewed(true), resume()),
            (h(Some("h")).parked(true).mark_moved(true), resume()),
            (h(Some("h")).mark_moved(true), run()),
            (
                h(Some("h")).unrenewed(true).mark_moved(true),
                Ending::MarkMoved,
            ),
            // Its holder holds no Lease: orphans, whatever the Lease's own holder does.
            (h(None), recover(false)),
            (h(Some("other")), recover(false)),
            (h(Some("other")).parked(true), recover(false)),
            (
                h(Some("other")).parked(true).unrenewed(true),
                recover(false),
            ),
            (h(Some("other")).mark_moved(true), Ending::MarkMoved),
            // Taken under another Lease: only that one says.
            (
                h(Some("h")).parked(true).other_lease(Some("ns/l2")),
                Ending::OtherLease("ns/l2".into()),
            ),
            (
                h(None).other_lease(Some("ns/l2")),
                Ending::OtherLease("ns/l2".into()),
            ),
        ];
        for (hold, want) in table {
            assert_eq!(what_ends(&hold), want, "{hold:?}");
        }
    }

    #[test]
    fn what_ends_in_words_names_recover_only_when_it_acts() {
        let table = [
            (
                Ending::Resume { holder: "h".into() },
                "app resume --holder h --lease fs/l",
            ),
            (
                Ending::ItsRun { holder: "h".into() },
                "not parked: its run still holds the Lease and releases it when it ends",
            ),
            (
                Ending::Recover { holds_lease: true },
                "its run stopped renewing the Lease fs/l and did not park it: `app fences recover \
                 --lease fs/l` releases it once the Lease stays unwritten for its full duration",
            ),
            (
                Ending::Recover { holds_lease: false },
                "its holder does not hold the Lease fs/l: `app fences recover --lease fs/l` \
                 releases it",
            ),
            (
                Ending::MarkMoved,
                "another writer moved a mark of it, which recovery keeps: `app fences --lease \
                 fs/l` names the release that keeps that value",
            ),
            (
                Ending::OtherLease("ns/l2".into()),
                "taken under Lease ns/l2, which alone says what ends it: `app fences --lease \
                 ns/l2`",
            ),
        ];
        for (e, want) in table {
            let words = e.describe("fs/l", &test_spell);
            assert_eq!(words, want);
            let recover = words.contains("fences recover");
            assert_eq!(recover, matches!(e, Ending::Recover { .. }), "{words}");
            assert!(!words.contains("include-paused"), "{words}");
        }
    }
}
