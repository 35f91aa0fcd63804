//! A session's events as progress lines, the same words for every caller:
//! `parent fenced: Kustomization flux-system/flux-system`, `released: …`, `lease released`.

use flux_fence::ObjectRef;

use super::{Event, Session};
use crate::steps::Step;

/// The objects a session names in its lines: the targets and the parents, each as its
/// `Display` text ([`Session::members`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Members {
    /// Every target, in the order given.
    pub targets: Vec<ObjectRef>,
    /// Every parent, in the order of their targets.
    pub parents: Vec<ObjectRef>,
}

impl Session {
    /// The targets and parents of this session, for [`Event::line`].
    #[must_use]
    pub fn members(&self) -> Members {
        let chains = self.chains();
        Members {
            targets: chains.iter().map(|c| c.target.clone()).collect(),
            parents: chains.iter().filter_map(|c| c.parent.clone()).collect(),
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
            Event::ReleasedKeepingResume(o) if crate::object::is_operator_kind(&o.resource) => {
                format!(
                    "released: {o}, keeping fluxcd.controlplane.io/reconcile as another writer left \
                 it (a resume while paused)"
                )
            }
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
    let list = |objects: &[ObjectRef]| {
        let texts: Vec<String> = objects.iter().map(ToString::to_string).collect();
        texts.join(", ")
    };
    let (targets, parents) = (list(&m.targets), list(&m.parents));
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
        let ks = crate::object::kustomization;
        let m = Members {
            targets: vec![ks("a", "t1"), ks("a", "t2")],
            parents: vec![ks("a", "p")],
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
                Event::Released(ks("a", "t1")),
                "released: Kustomization a/t1",
            ),
            (
                Event::ReleasedKeepingResume(ks("a", "t1")),
                "released: Kustomization a/t1, keeping spec.suspend as another writer left it \
                 (a `flux resume` while paused)",
            ),
            (
                Event::ReleasedKeepingResume(crate::object::resource_set("a", "rs")),
                "released: ResourceSet a/rs, keeping fluxcd.controlplane.io/reconcile as another \
                 writer left it (a resume while paused)",
            ),
            (Event::LeaseReleased, "lease released"),
            (Event::LeaseParked, "lease parked"),
        ];
        for (event, want) in table {
            assert_eq!(event.line(&m), want);
        }
    }
}
