//! [`Write`]: one write of a Lease as a decision gives it, sent for real or dry.

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::api::{Api, PostParams};

use crate::lease::decide::transitions;
use crate::{Epoch, FenceError};

/// One write of a Lease as a decision gives it: the create of an absent Lease, or the update
/// of a read one, carrying its resourceVersion (a free Lease taken, a gone holder's taken
/// over, a free one moved on after a lost answer). The acquisition, the recovery and the
/// settlement send it for real; the acquisition's server dry run (`crate::dry_run`) sends the
/// same body with `dryRun=All`.
pub(crate) enum Write {
    /// `create`, epoch 1.
    Create(Box<KubeLease>),
    /// `update`, a CAS on the read resourceVersion.
    Update(Box<KubeLease>),
}

impl Write {
    /// The verb the server authorizes: `create` or `update`.
    pub(crate) fn verb(&self) -> &'static str {
        match self {
            Self::Create(_) => "create",
            Self::Update(_) => "update",
        }
    }

    /// The epoch the body gives its holder (its `leaseTransitions`).
    pub(crate) fn epoch(&self) -> Result<Epoch, FenceError> {
        let (Self::Create(lease) | Self::Update(lease)) = self;
        Ok(Epoch(transitions(&lease.spec.clone().unwrap_or_default())?))
    }

    /// Sends it with `params`: the real ones, or `dryRun=All`.
    pub(crate) async fn send(
        &self,
        api: &Api<KubeLease>,
        name: &str,
        params: &PostParams,
    ) -> kube::Result<KubeLease> {
        match self {
            Self::Create(lease) => api.create(params, lease).await,
            Self::Update(lease) => api.replace(name, params, lease).await,
        }
    }
}
