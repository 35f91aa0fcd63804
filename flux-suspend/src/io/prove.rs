use kube::Client;

use super::{Timing, lock, poll};
use crate::error::{OtherWriter, SuspendError};
use crate::judge::{Judge, Member, Proof, Verdict};
use crate::object::read_for_proof;
use flux_fence::ObjectRef;

/// One fenced object to prove, with what "still ours" means for it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProofTarget {
    pub object: ObjectRef,
    pub member: Member,
}

/// Reads every member once per `timing.interval` and asks the judge, until the pause is proven
/// or the deadline passes.
///
/// # Guarantees
/// - Status conditions are never read: a frozen `Reconciling=True` cannot block the proof.
/// - Every pass reads every member afresh; any change by another writer resets the proof.
///
/// # Errors
/// [`SuspendError::ProofTimeout`], whose Display is the redacted counter line;
/// [`SuspendError::BrokenDuringProof`] as soon as a pass reads a member another writer resumed,
/// unfenced or recreated (no later pass would mend it).
pub async fn prove_stable_pause(
    client: &Client,
    chain: &[ProofTarget],
    owner_key: &str,
    baseline: Option<Vec<String>>,
    timing: Timing,
) -> Result<Proof, SuspendError> {
    let mut judge = Judge::new(chain.iter().map(|t| t.member.clone()).collect());
    if let Some(b) = baseline {
        judge = judge.with_baseline(b);
    }
    let judge = std::sync::Mutex::new(judge);
    let proven = poll(timing, || async {
        let reads = futures::future::join_all(
            chain
                .iter()
                .map(|t| read_for_proof(client, &t.object, owner_key)),
        )
        .await;
        match lock(&judge).observe(&reads) {
            Verdict::Proven(proof) => Some(Ok(proof)),
            Verdict::Broken { member, why } => chain.get(member).map(|t| {
                Err(SuspendError::BrokenDuringProof {
                    object: Box::new(t.object.clone()),
                    why,
                })
            }),
            _ => None,
        }
    })
    .await;
    if let Some(done) = proven {
        return done;
    }
    Err({
        let judge = lock(&judge);
        let writers = judge
            .writers()
            .iter()
            .filter_map(|(i, manager, changes)| {
                Some(OtherWriter {
                    object: chain.get(*i)?.object.clone(),
                    manager: manager.clone(),
                    changes: *changes,
                })
            })
            .collect();
        SuspendError::ProofTimeout {
            waited: timing.timeout,
            counters: judge.counters(),
            writers,
        }
    })
}
