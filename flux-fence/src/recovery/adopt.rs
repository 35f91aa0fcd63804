//! Adopting a holder's Lease to finish its work (`flux-handoff resume --holder H`): only a
//! parked pause, or a holder whose process the caller attests has exited. A Lease held by H and
//! not parked looks live: adopting it would release fences under a running command.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::Api;

use crate::api::{error, get_retrying};
use crate::{
    AnnotationKeys, Clock, FenceError, Holder, Lease, LeaseAcquire, LeaseConfig, LeaseGuard,
};

/// Whether the caller knows the holder's process has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HolderProcess {
    /// Unknown: a Lease held by the holder and not parked is treated as live.
    #[default]
    Unknown,
    /// The caller attests it has exited (e.g. a CI post step after its job's main step).
    Exited,
}

/// The answer of [`decide_adopt`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdoptDecision {
    /// Adopt (parked, or exited by attestation) or take it (free or absent) with
    /// [`Lease::acquire`].
    Acquire,
    /// Held by the holder, not parked, and nobody attests its exit: it looks live.
    LooksLive,
    /// Held by someone else.
    OtherHolder {
        /// The holder found.
        holder: String,
    },
}

/// Decides whether `holder`'s Lease may be adopted, on the Lease as read (`None`: absent).
#[must_use]
pub fn decide_adopt(
    read: Option<&KubeLease>,
    holder: &Holder,
    keys: &AnnotationKeys,
    process: HolderProcess,
) -> AdoptDecision {
    let Some(lease) = read else {
        return AdoptDecision::Acquire;
    };
    let found = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    let parked = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&keys.parked))
        .is_some_and(|p| p == holder.as_str());
    match found {
        None => AdoptDecision::Acquire,
        Some(h) if h != holder.as_str() => AdoptDecision::OtherHolder { holder: h.into() },
        Some(_) if parked || process == HolderProcess::Exited => AdoptDecision::Acquire,
        Some(_) => AdoptDecision::LooksLive,
    }
}

/// The outcome of [`adopt_holder`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Adoption {
    /// Ours as `holder`: adopted at its epoch, or taken when free or absent.
    Adopted(LeaseGuard),
    /// Held by `holder`, not parked, exit not attested: nothing was written.
    LooksLive,
    /// Held by another holder: nothing was written.
    OtherHolder {
        /// The holder found.
        holder: String,
    },
    /// Another party moved it on every attempt.
    Contended,
}

/// Takes the Lease as `holder` to finish its work, only as [`decide_adopt`] allows.
///
/// # Guarantees
/// Writes nothing unless the decision is to acquire; then as [`Lease::acquire`] (adopts our
/// holder at its epoch with a renewal of its own — a CAS on the read — so the holder's clock
/// starts at that renewal's send instant, never at the parked Lease's old `renewTime`; or
/// takes a free Lease with a CAS). The Lease is read again by
/// `acquire`: a change of holder in between is refused there.
///
/// # Errors
/// API failures.
pub async fn adopt_holder(
    client: Client,
    cfg: LeaseConfig,
    keys: &AnnotationKeys,
    holder: Holder,
    clock: Arc<dyn Clock>,
    process: HolderProcess,
) -> Result<Adoption, FenceError> {
    let cfg = cfg.with_keys(keys);
    let api: Api<KubeLease> = Api::namespaced(client.clone(), &cfg.namespace);
    let target = format!("{}/{}", cfg.namespace, cfg.name);
    let read = get_retrying(&api, &cfg.name, &target, crate::api::READ_RETRY_BUDGET)
        .await
        .map_err(|e| {
            error(
                "get",
                "leases.coordination.k8s.io".into(),
                target.clone(),
                e,
            )
        })?;
    match decide_adopt(read.as_ref(), &holder, keys, process) {
        AdoptDecision::LooksLive => return Ok(Adoption::LooksLive),
        AdoptDecision::OtherHolder { holder } => return Ok(Adoption::OtherHolder { holder }),
        AdoptDecision::Acquire => {}
    }
    Ok(match Lease::acquire(client, cfg, holder, clock).await? {
        LeaseAcquire::Acquired(g) => Adoption::Adopted(g),
        LeaseAcquire::Held { holder, .. } => Adoption::OtherHolder { holder },
        _ => Adoption::Contended,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use kube::api::ObjectMeta;

    use super::*;

    fn lease(holder: Option<&str>, parked_by: Option<&str>) -> KubeLease {
        KubeLease {
            metadata: ObjectMeta {
                annotations: parked_by.map(|p| {
                    [(AnnotationKeys::default().parked, p.to_string())]
                        .into_iter()
                        .collect()
                }),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_live_looking_holder_is_adopted_only_when_parked_or_attested_exited() {
        let h: Holder = "local-h-1-aaaaaa".parse().unwrap();
        let keys = AnnotationKeys::default();
        let (u, x) = (HolderProcess::Unknown, HolderProcess::Exited);
        let other = || AdoptDecision::OtherHolder {
            holder: "local-o-1-bbbbbb".into(),
        };
        let table = [
            (None, u, AdoptDecision::Acquire),
            (Some(lease(None, None)), u, AdoptDecision::Acquire),
            (
                Some(lease(Some(h.as_str()), None)),
                u,
                AdoptDecision::LooksLive,
            ),
            (
                Some(lease(Some(h.as_str()), None)),
                x,
                AdoptDecision::Acquire,
            ),
            (
                Some(lease(Some(h.as_str()), Some(h.as_str()))),
                u,
                AdoptDecision::Acquire,
            ),
            // Parked by an earlier holder: no mark of ours, so live-looking.
            (
                Some(lease(Some(h.as_str()), Some("local-o-1-bbbbbb"))),
                u,
                AdoptDecision::LooksLive,
            ),
            (Some(lease(Some("local-o-1-bbbbbb"), None)), u, other()),
            (Some(lease(Some("local-o-1-bbbbbb"), None)), x, other()),
        ];
        for (read, process, want) in table {
            assert_eq!(
                decide_adopt(read.as_ref(), &h, &keys, process),
                want,
                "{read:?} {process:?}"
            );
        }
    }
}
