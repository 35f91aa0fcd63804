//! The counter report of the stable-pause proof: fixed names, counts only.
//!
//! The report is redacted by construction: [`Counters::incr`] takes a [`Counter`] from a closed
//! enum, and the rendered line is built from `&'static str` names and integers only. No
//! condition message, resourceVersion, uid, holder or other identity can reach it.

use std::fmt;

/// One counter of the proof report. The order of the variants is the order of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Counter {
    /// Passes read.
    Observations,
    /// Passes where a read of the parent or the target failed.
    Unreadable,
    /// Passes where the target was readable but not ours (owner value, uid, suspend flag or the
    /// `reconcile: disabled` annotation differ).
    ChildNotOwned,
    /// Passes where the parent was readable but not ours (owner value, uid or suspend flag).
    ParentNotOwned,
    /// Passes where the parent's resourceVersion differed from the previous pass.
    ParentChanged,
    /// Passes where the target's resourceVersion differed from the previous pass.
    VersionChanges,
}

impl Counter {
    /// Every counter, in line order.
    pub const ALL: [Counter; 6] = [
        Counter::Observations,
        Counter::Unreadable,
        Counter::ChildNotOwned,
        Counter::ParentNotOwned,
        Counter::ParentChanged,
        Counter::VersionChanges,
    ];

    /// The counter's fixed name in the report line.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Observations => "observations",
            Counter::Unreadable => "unreadable",
            Counter::ChildNotOwned => "child_not_owned",
            Counter::ParentNotOwned => "parent_not_owned",
            Counter::ParentChanged => "parent_changed",
            Counter::VersionChanges => "version_changes",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// Counts of the proof's predicates. Renders as `observations=N unreadable=N ...`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters([u64; 6]);

impl Counters {
    /// Adds one to `counter`. The only way to change a report.
    pub fn incr(&mut self, counter: Counter) {
        self.0[counter.index()] = self.0[counter.index()].saturating_add(1);
    }

    /// The current count of `counter`.
    #[must_use]
    pub fn get(&self, counter: Counter) -> u64 {
        self.0[counter.index()]
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, counter) in Counter::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", counter.name(), self.get(*counter))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_line_lists_every_counter_in_protocol_order() {
        let mut c = Counters::default();
        c.incr(Counter::Observations);
        c.incr(Counter::Observations);
        c.incr(Counter::VersionChanges);
        assert_eq!(
            c.to_string(),
            "observations=2 unreadable=0 child_not_owned=0 parent_not_owned=0 parent_changed=0 \
             version_changes=1"
        );
    }

    #[test]
    fn timeout_line_counter_names_are_unique_and_ordered() {
        let names: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            [
                "observations",
                "unreadable",
                "child_not_owned",
                "parent_not_owned",
                "parent_changed",
                "version_changes"
            ]
        );
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }
}
