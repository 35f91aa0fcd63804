//! A session's events as progress lines, the same words for every caller:
//! `parent fenced: Kustomization flux-system/flux-system`, `released: …`, `lease released`.

use super::{Event, Session};
use crate::steps::Step;

/// The objects a session names in its lines: the targets and the parents, each as its
/// `Display` text ([`Session::members`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Members {
    /// Every target, in the order given.
    pub targets: Vec<String>,
    /// Every parent, in the order of their targets.
    pub parents: Vec<String>,
}

impl Session {
    /// The targets and parents of this session, for [`Event::line`].
    #[must_use]
    pub fn members(&self) -> Members {
        let chains = self.chains();
        Members {
            targets: chains.iter().map(|c| c.target.to_string()).collect(),
            parents: chains
                .iter()
                .filter_map(|c| c.parent.as_ref().map(ToString::to_string))
                .collect(),
        }
    }
}

impl Event {
    /// This event as one progress line.
    #[must_use]
    pub fn line(&self, members: &Members) -> String {
        match self {
            Event::Step(step) => step_line(*step, members),
            Event::Released(o) => format!("released: {o}"),
            Event::ReleasedKeepingResume(o) if crate::flux::is_operator_display(o) => format!(
                "released: {o}, keeping fluxcd.controlplane.io/reconcile as another writer left \
                 it (a resume while paused)"
            ),
            Event::ReleasedKeepingResume(o) => format!(
                "released: {o}, keeping spec.suspend as another writer left it (a `flux \
                 resume` while paused)"
            ),
            Event::LeaseReleased => "lease released".into(),
            Event::LeaseParked => "lease parked".into(),
            Event::Waiting(w) => w.to_string(),
        }
    }
}

fn step_line(step: Step, m: &Members) -> String {
    let (targets, parents) = (m.targets.join(", "), m.parents.join(", "));
    match step {
        Step::QuiesceParents => format!("parent quiet: {parents}"),
        Step::FenceParents => format!("parent fenced: {parents}"),
        Step::AwaitParentAcks => "parent acknowledged the suspend".into(),
        Step::QuiesceTargets => format!("target quiet: {targets}"),
        Step::FenceTargets => format!("target fenced: {targets}"),
        Step::AwaitTargetAcks => "target acknowledged the suspend".into(),
        Step::RestartController => "controller restarted; every old pod gone".into(),
        Step::RefenceReverted => "fences checked after the restart".into(),
        Step::AwaitScaled => format!("gate scaled: {targets}"),
        Step::Prove => "pause proven".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_has_its_line() {
        let m = Members {
            targets: vec!["Kustomization a/t1".into(), "Kustomization a/t2".into()],
            parents: vec!["Kustomization a/p".into()],
        };
        let table = [
            (
                Event::Step(Step::FenceParents),
                "parent fenced: Kustomization a/p",
            ),
            (
                Event::Step(Step::FenceTargets),
                "target fenced: Kustomization a/t1, Kustomization a/t2",
            ),
            (Event::Step(Step::Prove), "pause proven"),
            (
                Event::Released("Kustomization a/t1".into()),
                "released: Kustomization a/t1",
            ),
            (
                Event::ReleasedKeepingResume("Kustomization a/t1".into()),
                "released: Kustomization a/t1, keeping spec.suspend as another writer left it \
                 (a `flux resume` while paused)",
            ),
            (Event::LeaseReleased, "lease released"),
            (Event::LeaseParked, "lease parked"),
        ];
        for (event, want) in table {
            assert_eq!(event.line(&m), want);
        }
    }
}
