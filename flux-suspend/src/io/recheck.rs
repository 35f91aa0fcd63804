//! A recheck of a proven pause right before a protected write: one fresh read of every member
//! of the chain, judged by [`crate::judge::first_broken`].
//!
//! No Kubernetes write can be conditional on another object, so a person may still set
//! `spec.suspend=false` by hand between this read and the write: the recheck narrows that
//! window to one round trip, it cannot close it (docs/design/protocol.md).

use kube::Client;

use super::ProofTarget;
use crate::judge::{Broken, first_broken};
use crate::object::read_for_proof;
use flux_fence::{ErrorClass, ObjectRef};

/// Rechecks the pause the session proved: give it to the work ([`crate::Paused::check`]) and
/// call [`PauseCheck::still_holds`] before a write that consumers follow (e.g. the root Secret
/// of a credential rotation). Clonable; costs one read per member.
#[derive(Clone)]
pub struct PauseCheck {
    client: Client,
    owner_key: String,
    chain: Vec<ProofTarget>,
}

impl std::fmt::Debug for PauseCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseCheck")
            .field("chain", &self.chain)
            .finish_non_exhaustive()
    }
}

/// The pause no longer holds on a recheck: a member was changed after the proof (typically a
/// person's `spec.suspend=false`). Nothing more should be written; the cleanup will find the
/// mark moved, keep that fence and list it in the fence report.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the pause no longer holds: {object}: {why}")]
#[non_exhaustive]
pub struct PauseBroken {
    /// The object that broke it.
    pub object: Box<ObjectRef>,
    /// What changed.
    pub why: Broken,
}

impl PauseBroken {
    /// [`ErrorClass::PauseBroken`]: something changed under the pause after writes, so a
    /// fence will be kept and listed (exit code 8 in the CLI, as when the session's watch sees
    /// it first); an unreadable member is [`ErrorClass::KubeApi`].
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self.why {
            Broken::Unreadable => ErrorClass::KubeApi,
            _ => ErrorClass::PauseBroken,
        }
    }
}

impl PauseCheck {
    /// A check of `chain` (in proof order) by the owner annotation `owner_key`.
    #[must_use]
    pub fn new(client: Client, owner_key: impl Into<String>, chain: Vec<ProofTarget>) -> Self {
        Self {
            client,
            owner_key: owner_key.into(),
            chain,
        }
    }

    /// The client, the owner annotation key and the chain (in proof order), for the session's
    /// watch of the pause while the work runs.
    pub(crate) fn parts(&self) -> (&Client, &str, &[ProofTarget]) {
        (&self.client, &self.owner_key, &self.chain)
    }

    /// The recheck as a hook another library runs before a write: each call of the returned
    /// closure is one [`PauseCheck::still_holds`], its [`PauseBroken`] boxed. It fits
    /// ghcr-auth's `Reasserter::with_root_check` as is:
    /// `reasserter.with_root_check(paused.check.hook())`.
    pub fn hook(
        &self,
    ) -> impl Fn() -> futures::future::BoxFuture<
        'static,
        Result<(), Box<dyn std::error::Error + Send + Sync + 'static>>,
    > + Send
    + Sync
    + 'static {
        let check = self.clone();
        move || {
            let check = check.clone();
            Box::pin(async move {
                check
                    .still_holds()
                    .await
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
            })
        }
    }

    /// Reads every member once (concurrently) and confirms each is still ours, suspended, the
    /// same uid and, below the top, `reconcile: disabled`.
    ///
    /// # Errors
    /// [`PauseBroken`] naming the first member (in chain order) that no longer holds.
    pub async fn still_holds(&self) -> Result<(), PauseBroken> {
        let reads = futures::future::join_all(
            self.chain
                .iter()
                .map(|t| read_for_proof(&self.client, &t.object, &self.owner_key)),
        )
        .await;
        let members: Vec<_> = self.chain.iter().map(|t| t.member.clone()).collect();
        match first_broken(&members, &reads) {
            None => Ok(()),
            Some((i, why)) => Err(PauseBroken {
                object: Box::new(self.chain[i].object.clone()),
                why,
            }),
        }
    }
}
