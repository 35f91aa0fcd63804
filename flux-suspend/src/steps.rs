//! The order of a pause, decided from the strategy alone (pure).
//!
//! Protocol phases 3–7: fence top-down; before the target is fenced, no parent execution that
//! began before the parent was fenced may still be running; retire in-flight executions; prove.

use crate::retire::Strategy;

/// One step of a pause, applied to every object of its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// `none`: wait until the parents read quiet *before* fencing them (status is still a
    /// clock while they are not suspended).
    QuiesceParents,
    /// Owner fence + `spec.suspend=true` + `requestedAt` nonce on each parent.
    FenceParents,
    /// `ack`: wait until each parent acknowledged its nonce — no pre-fence parent execution is
    /// still running, so none can re-apply a target over its fence.
    AwaitParentAcks,
    /// Wait until each target shows no `Reconciling=True` (strategy `none`, or `--quiesce`).
    QuiesceTargets,
    /// Owner fence + `spec.suspend=true` + `reconcile: disabled` + nonce on each target.
    FenceTargets,
    /// `ack`: wait until each target acknowledged its nonce.
    AwaitTargetAcks,
    /// `restart`: rollout-restart the controller and wait until every old Pod is gone.
    RestartController,
    /// `restart`: a pre-restart parent execution may have re-applied a target's Git state;
    /// put back any mark it reverted (CAS), so the proof starts over on a fenced target.
    RefenceReverted,
    /// Replicas gates: wait until each gated Deployment reports its count with no Pod of any
    /// other left ([`crate::io::wait_scaled`]).
    AwaitScaled,
    /// Two consecutive stable passes.
    Prove,
}

/// What a step does, as words for a line about it (`stopped while ...`).
#[must_use]
pub fn describe(step: Step) -> &'static str {
    match step {
        Step::QuiesceParents => "waiting for the parents to be quiet",
        Step::FenceParents => "fencing the parents",
        Step::AwaitParentAcks => "waiting for the parents to acknowledge the suspend",
        Step::QuiesceTargets => "waiting for the targets to be quiet",
        Step::FenceTargets => "fencing the targets",
        Step::AwaitTargetAcks => "waiting for the targets to acknowledge the suspend",
        Step::RestartController => "restarting the controller",
        Step::RefenceReverted => "checking the fences after the restart",
        Step::AwaitScaled => "waiting for the gated Deployments to scale",
        Step::Prove => "proving the stable pause",
    }
}

/// A wait that is still going on, reported about every [`WAITING_EVERY`] so a person watching
/// a log can tell a slow controller from a hung tool. Fixed words and the names of the chain's
/// objects only: no condition message, no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiting {
    /// The step that waits.
    pub step: Step,
    /// How long it has waited.
    pub waited: std::time::Duration,
    /// Its budget.
    pub budget: std::time::Duration,
}

/// How often a wait reports that it still waits.
pub const WAITING_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// From this long on, a line about an acknowledgement wait also names the likely cause and
/// Flux's lever for it: an in-flight reconcile waiting on a health check runs to its timeout
/// unless the controller runs with `CancelHealthCheckOnNewRevision` (docs/bench.md).
pub const LONG_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The hint of a long acknowledgement wait (fixed words).
const HEALTH_CHECK_HINT: &str = "; a reconcile waiting on a health check runs to its timeout \
     unless the controller has --feature-gates=CancelHealthCheckOnNewRevision=true (`doctor` \
     tells)";

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.step {
            Step::AwaitParentAcks => {
                "a reconcile of the parent that started before its fence is still running"
            }
            Step::AwaitTargetAcks => {
                "a reconcile of the target that started before its fence is still running"
            }
            Step::QuiesceParents | Step::QuiesceTargets => "it still reports Reconciling=True",
            Step::RestartController => {
                "old controller pods are still there or their replacements are not ready"
            }
            Step::AwaitScaled => "Pods of another count are still there",
            Step::Prove => "the chain has not yet read unchanged on two passes in a row",
            Step::FenceParents | Step::FenceTargets | Step::RefenceReverted => {
                "another writer keeps changing the object"
            }
        };
        let acks = matches!(self.step, Step::AwaitParentAcks | Step::AwaitTargetAcks);
        let hint = if acks && self.waited >= LONG_ACK_WAIT {
            HEALTH_CHECK_HINT
        } else {
            ""
        };
        write!(
            f,
            "still {} ({}s of {}s): {why}{hint}",
            describe(self.step),
            self.waited.as_secs(),
            self.budget.as_secs()
        )
    }
}

/// The steps of a pause, in order.
#[must_use]
pub fn pause_steps(strategy: Strategy, quiesce: bool, has_parents: bool) -> Vec<Step> {
    let mut steps = Vec::new();
    if has_parents {
        if strategy == Strategy::QuietWindow {
            steps.push(Step::QuiesceParents);
        }
        steps.push(Step::FenceParents);
        if strategy == Strategy::Ack {
            steps.push(Step::AwaitParentAcks);
        }
    }
    if quiesce || strategy == Strategy::QuietWindow {
        steps.push(Step::QuiesceTargets);
    }
    steps.push(Step::FenceTargets);
    match strategy {
        Strategy::Ack => steps.push(Step::AwaitTargetAcks),
        Strategy::Restart => {
            steps.push(Step::RestartController);
            steps.push(Step::RefenceReverted);
        }
        Strategy::QuietWindow => {}
    }
    steps.push(Step::Prove);
    steps
}

/// `steps` with [`Step::AwaitScaled`] before the proof when the pause has replicas gates: the
/// Flux chain is fenced and acknowledged first (no parent applies a gate over its count), and
/// the proof's passes follow the scale, so the pause is proven as the work will find it. When
/// every target is a gate, the target steps that wait on a Flux controller (quiet, its
/// acknowledgement) go: nothing reconciles a Deployment's fence.
#[must_use]
pub fn with_gates(mut steps: Vec<Step>, gates: usize, targets: usize) -> Vec<Step> {
    if gates > 0 && gates == targets {
        steps.retain(|s| !matches!(s, Step::QuiesceTargets | Step::AwaitTargetAcks));
    }
    if gates > 0 {
        let prove = steps
            .iter()
            .position(|s| *s == Step::Prove)
            .unwrap_or(steps.len());
        steps.insert(prove, Step::AwaitScaled);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::Step::*;
    use super::*;

    #[test]
    fn ack_waits_for_the_parent_before_fencing_the_target() {
        assert_eq!(
            pause_steps(Strategy::Ack, false, true),
            [
                FenceParents,
                AwaitParentAcks,
                FenceTargets,
                AwaitTargetAcks,
                Prove
            ]
        );
    }

    #[test]
    fn ack_does_not_quiesce_unless_asked() {
        assert!(!pause_steps(Strategy::Ack, false, true).contains(&QuiesceTargets));
        assert_eq!(
            pause_steps(Strategy::Ack, true, true),
            [
                FenceParents,
                AwaitParentAcks,
                QuiesceTargets,
                FenceTargets,
                AwaitTargetAcks,
                Prove
            ]
        );
    }

    #[test]
    fn restart_fences_both_restarts_once_then_refences() {
        assert_eq!(
            pause_steps(Strategy::Restart, false, true),
            [
                FenceParents,
                FenceTargets,
                RestartController,
                RefenceReverted,
                Prove
            ]
        );
    }

    #[test]
    fn none_quiesces_parents_before_fencing_and_targets_always() {
        assert_eq!(
            pause_steps(Strategy::QuietWindow, false, true),
            [
                QuiesceParents,
                FenceParents,
                QuiesceTargets,
                FenceTargets,
                Prove
            ]
        );
    }

    #[test]
    fn a_long_acknowledgement_wait_names_the_feature_gate() {
        let line = |step, waited| {
            Waiting {
                step,
                waited: std::time::Duration::from_secs(waited),
                budget: std::time::Duration::from_mins(5),
            }
            .to_string()
        };
        let short = line(AwaitParentAcks, 10);
        assert_eq!(
            short,
            "still waiting for the parents to acknowledge the suspend (10s of 300s): a reconcile \
             of the parent that started before its fence is still running"
        );
        let long = line(AwaitParentAcks, 20);
        assert_eq!(
            long,
            format!("{}{HEALTH_CHECK_HINT}", short.replace("(10s", "(20s"))
        );
        assert!(long.contains("--feature-gates=CancelHealthCheckOnNewRevision=true"));
        assert!(line(AwaitTargetAcks, 30).ends_with("(`doctor` tells)"));
        // Only acknowledgement waits: the gate does not shorten the others.
        for step in [Prove, RestartController, QuiesceTargets] {
            assert!(!line(step, 60).contains("feature-gates"), "{step:?}");
        }
    }

    #[test]
    fn replicas_gate_scales_after_every_acknowledgement_and_before_the_proof() {
        for strategy in [Strategy::Ack, Strategy::Restart, Strategy::QuietWindow] {
            let plain = pause_steps(strategy, true, true);
            assert_eq!(with_gates(plain.clone(), 0, 1), plain);
            // A gate beside a Flux target: every step as before, the scale before the proof.
            let mixed = with_gates(plain.clone(), 1, 2);
            assert_eq!(mixed.len(), plain.len() + 1);
            assert_eq!(
                &mixed[mixed.len() - 2..],
                &[AwaitScaled, Prove],
                "{strategy:?}"
            );
            // Gates only: no target step waits on a controller that never answers for them.
            let gates = with_gates(plain.clone(), 2, 2);
            assert!(!gates.contains(&AwaitTargetAcks) && !gates.contains(&QuiesceTargets));
            assert!(gates.contains(&FenceTargets) && gates.contains(&AwaitScaled));
            assert_eq!(gates.last(), Some(&Prove));
        }
    }

    #[test]
    fn top_level_target_has_no_parent_steps() {
        assert_eq!(
            pause_steps(Strategy::Ack, false, false),
            [FenceTargets, AwaitTargetAcks, Prove]
        );
    }
}
