//! Resuming by holder: the other half of [`crate::Session::park`], for a later step, another
//! process or a CI post step. Takes the holder's Lease (only as
//! [`flux_fence::recovery::decide_adopt`] allows: a parked pause, or one whose process is
//! attested gone), finds the holder's fences — every member of its chain record on the Lease
//! (read by name, wherever it lives) and what the scope given lists — releases them targets
//! before parents, then releases the Lease and the record with it.

use std::sync::Arc;

use flux_fence::discover::{self, FoundState, Listing, Scope};
use flux_fence::lease::LeaseRelease;
use flux_fence::lease::{merge_found, read_members, read_record};
use flux_fence::recovery::{Adoption, HolderProcess, adopt_holder};
use flux_fence::{AnnotationKeys, FenceError, Fencer, Holder, LeaseConfig, ObjectRef};
use kube::Client;

mod error;
pub use error::ResumeError;

use super::Event;
use crate::cancel::Cancel;
use crate::handoff::{Handoff, ReadyWait};
use crate::io::Timing;
use crate::object::{helmrelease_resource, kustomization_resource};

/// What [`resume_holder`] resumes, and where it looks.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ResumeOptions {
    /// The holder whose pause is resumed.
    pub holder: Holder,
    /// The coordination Lease.
    pub lease: LeaseConfig,
    /// The fence annotation keys.
    pub keys: AnnotationKeys,
    /// Where the holder's fences are looked for.
    pub scope: Scope,
    /// How fences are found (by the fenced label, or by reading every object).
    pub listing: Listing,
    /// The caller attests the holder's process has exited (a CI post step after its main step
    /// ended): a Lease it holds without having parked it may then be taken. A keeper of the
    /// holder's command on this machine is asked to end the command's tree first
    /// ([`crate::command::end_holders_work`]); one that cannot is a refusal.
    pub holder_exited: bool,
    /// After everything was released (fences, Lease, chain record), wait until each released
    /// object is Ready for its generation: a report, [`Resumed::ready`].
    pub wait_ready: Option<Timing>,
    /// A stop before the first write writes nothing ([`ResumeError::Cancelled`]); once the
    /// Lease is taken the release runs to its end, and a stop then ends only the Ready wait
    /// ([`ReadyWait::Stopped`]).
    pub cancel: Cancel,
    /// Act only where the holder still holds the Lease (a CI post step): the Lease and the
    /// holder's fences are read first, and unless the holder holds the Lease nothing is
    /// written — a free Lease, or one another holder has, is never taken.
    pub if_held: bool,
}

impl ResumeOptions {
    /// Resume `holder`'s pause, looking in `scope`, with the default Lease and keys.
    #[must_use]
    pub fn new(holder: Holder, scope: Scope) -> Self {
        Self {
            holder,
            lease: LeaseConfig::default(),
            keys: AnnotationKeys::default(),
            scope,
            listing: Listing::Labelled,
            holder_exited: false,
            wait_ready: None,
            cancel: Cancel::new(),
            if_held: false,
        }
    }
}

/// What a resume by holder released.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Resumed {
    /// Objects released, in release order (empty: the holder held no fence).
    pub released: Vec<ObjectRef>,
    /// Whether the holder's Lease was taken and released (false only with
    /// [`ResumeOptions::if_held`] when the holder did not hold it: nothing was written).
    pub lease_released: bool,
    /// The Ready wait after the release ([`ResumeOptions::wait_ready`]; [`ReadyWait::Ready`]
    /// without one). Whatever it says, everything above was handed back.
    pub ready: ReadyWait,
}

impl Default for Resumed {
    fn default() -> Self {
        Self {
            released: Vec::new(),
            lease_released: false,
            ready: ReadyWait::Ready,
        }
    }
}

/// The record of the holder's chain on the Lease, as read: its owner and the members of a
/// kind this version does not release.
struct HolderRecord {
    owner: String,
    unknown: Vec<String>,
}

/// `found` plus every fence on a member of the holder's chain record (read by name).
async fn with_record(
    client: &Client,
    opts: &ResumeOptions,
    kinds: &[kube::api::ApiResource],
    mut found: discover::FenceReport,
) -> Result<(discover::FenceReport, Option<HolderRecord>), FenceError> {
    let Some(record) = read_record(client, &opts.keys, &opts.lease).await? else {
        return Ok((found, None));
    };
    if !record.owner_value().is_ok_and(|o| o.holder == opts.holder) {
        return Ok((found, None));
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let members = read_members(client, &opts.keys, kinds, &record, now).await?;
    merge_found(&mut found.fences, members.found);
    let unknown = members.unknown.iter().map(ToString::to_string).collect();
    Ok((
        found,
        Some(HolderRecord {
            owner: record.owner,
            unknown,
        }),
    ))
}

/// Resumes `opts.holder`'s pause: takes its Lease, releases its fences in `opts.scope`
/// (targets first, no parent while a target is held), then releases the Lease and its chain
/// record; only then, with [`ResumeOptions::wait_ready`], waits for Ready — a report in
/// [`Resumed::ready`], never a reason to keep anything. `progress` gets [`Event::Released`]
/// for each object and [`Event::LeaseReleased`] after them.
///
/// A holder that holds no fence is not an error: the Lease is taken and given back, and
/// [`Resumed::released`] is empty.
///
/// # Errors
///
/// [`ResumeError`]; see [`ResumeError::nothing_changed`].
pub async fn resume_holder(
    client: &Client,
    opts: &ResumeOptions,
    mut progress: impl FnMut(Event),
) -> Result<Resumed, ResumeError> {
    let stopped = || {
        if opts.cancel.is_stopped() {
            Err(ResumeError::Cancelled)
        } else {
            Ok(())
        }
    };
    stopped()?;
    let opts = &under_fences_lease(client, opts).await?;
    if opts.if_held && !holds_lease(client, opts).await? {
        return Ok(Resumed::default());
    }
    // The last moment a stop writes nothing: the Lease is taken next.
    stopped()?;
    let lease = adopt(client, opts).await?;
    let kinds = [kustomization_resource(), helmrelease_resource()];
    let clock = flux_fence::SystemClock;
    let found = discover::discover_listed(
        client,
        &opts.keys,
        &kinds,
        &opts.scope,
        None,
        &clock,
        opts.listing,
    )
    .await;
    // The holder's chain on record finds its fences wherever they are, whatever the scope.
    let found = match found {
        Ok(f) => with_record(client, opts, &crate::object::recorded_kinds(), f).await,
        Err(e) => Err(e),
    };
    let (found, record) = match found {
        Ok(f) => f,
        Err(e) => {
            // Nothing released: the Lease stays held with the holder's fences.
            lease.leave_held();
            return Err(e.into());
        }
    };
    let fencer = Fencer::new(client.clone(), opts.keys.clone(), lease.owner());
    let mut guards = Vec::new();
    for f in &found.fences {
        if let FoundState::Fence { owner, .. } = &f.state
            && owner.holder == opts.holder
        {
            match fencer.adopt_recorded(&f.object, owner).await {
                Ok(Some(g)) => guards.push(g),
                Ok(None) => {}
                Err(e) => {
                    // Nothing released yet: keep the Lease with what is held.
                    lease.leave_held();
                    return Err(e.into());
                }
            }
        }
    }
    let guards = in_dependency_order(client, guards).await;
    let mut handoff =
        Handoff::adopt(client.clone(), fencer, guards).with_cancel(opts.cancel.clone());
    // Released first, the Lease and its record with it; the Ready wait comes after, apart.
    let report = match handoff.release().await {
        Ok(r) => r,
        Err(e) => {
            // Keep what is still held listed, and the Lease with it.
            let _ = handoff.leave_paused();
            lease.leave_held();
            return Err(ResumeError::Release(e));
        }
    };
    for o in &report.released {
        progress(super::settle::released_event(o, &report.kept_resume));
    }
    if let Some(r) = &record {
        if !r.unknown.is_empty() {
            lease.leave_held();
            return Err(ResumeError::LeaseNotReleased(format!(
                "the chain record lists objects of kinds this version does not release ({}); they may still be fenced, so the Lease stays held",
                r.unknown.join(", ")
            )));
        }
        // Every recorded fence of the holder was released above: the record goes too.
        lease.handle().settle_record(&opts.keys.chain, &r.owner);
    }
    match lease.release().await? {
        LeaseRelease::Released | LeaseRelease::Gone => progress(Event::LeaseReleased),
        other => return Err(ResumeError::LeaseNotReleased(other.to_string())),
    }
    let ready = match opts.wait_ready {
        Some(timing) => handoff.wait_ready(&report, timing).await,
        None => ReadyWait::Ready,
    };
    Ok(Resumed {
        released: report.released,
        lease_released: true,
        ready,
    })
}

/// `guards` in the order to hand to a handoff so that its release frees each object after the
/// objects it depends on (`spec.dependsOn`, [`crate::flux::order`]): one read of each object
/// when there are several (a single fence has no order); an object that cannot be read keeps
/// its place at the end.
async fn in_dependency_order(
    client: &Client,
    mut guards: Vec<flux_fence::FenceGuard>,
) -> Vec<flux_fence::FenceGuard> {
    if guards.len() < 2 {
        return guards;
    }
    let mut nodes = Vec::with_capacity(guards.len());
    for g in &guards {
        if let Ok(obj) = crate::object::get_json(client, g.object()).await {
            nodes.push(crate::flux::order::Node::read(g.object().clone(), &obj));
        }
    }
    let ordered = crate::flux::order::release_order(&nodes);
    guards.sort_by_key(|g| ordered.fence_rank(g.object()));
    guards
}

/// `opts` with the Lease the holder's fences name ([`super::fence_lease::lease_named`]): the
/// holder's fences are read first (one list per kind, no write), so a resume never takes a
/// free Lease while the holder works under another.
async fn under_fences_lease(
    client: &Client,
    opts: &ResumeOptions,
) -> Result<ResumeOptions, ResumeError> {
    let kinds = [kustomization_resource(), helmrelease_resource()];
    let found = discover::discover_listed(
        client,
        &opts.keys,
        &kinds,
        &opts.scope,
        None,
        &flux_fence::SystemClock,
        opts.listing,
    )
    .await?;
    let named = found.fences.iter().filter_map(|f| match &f.state {
        FoundState::Fence { owner, lease, .. } if owner.holder == opts.holder => {
            Some(lease.as_deref())
        }
        _ => None,
    });
    let lease = super::fence_lease::lease_named(&opts.lease, named).map_err(|leases| {
        ResumeError::Leases {
            holder: opts.holder.clone(),
            leases,
        }
    })?;
    if lease != opts.lease {
        tracing::info!(holder = %opts.holder, lease = %lease, "the holder's fences were taken under this lease: resuming under it");
    }
    let mut opts = opts.clone();
    opts.lease = lease;
    Ok(opts)
}

/// With [`ResumeOptions::if_held`]: reads the Lease and the holder's fences (no write) and
/// says whether the holder holds the Lease. A holder that holds neither holds nothing; one
/// whose fences outlived its Lease is [`ResumeError::FencedWithoutLease`].
async fn holds_lease(client: &Client, opts: &ResumeOptions) -> Result<bool, ResumeError> {
    let kinds = [kustomization_resource(), helmrelease_resource()];
    let clock = flux_fence::SystemClock;
    let found = discover::discover_listed(
        client,
        &opts.keys,
        &kinds,
        &opts.scope,
        Some(&opts.lease),
        &clock,
        opts.listing,
    )
    .await?;
    let holder = found.lease.as_ref().and_then(|l| l.holder.as_deref());
    if holder == Some(opts.holder.as_str()) {
        return Ok(true);
    }
    let fences: Vec<ObjectRef> = found
        .fences
        .iter()
        .filter(
            |f| matches!(&f.state, FoundState::Fence { owner, .. } if owner.holder == opts.holder),
        )
        .map(|f| f.object.clone())
        .collect();
    if fences.is_empty() {
        return Ok(false);
    }
    Err(ResumeError::FencedWithoutLease {
        lease: opts.lease.to_string(),
        holder: opts.holder.clone(),
        fences,
    })
}

/// The attestation that the holder's process exited says nothing of its command: a keeper of
/// the holder's on this machine (a killed `run`, the Action's main step its post step killed)
/// is asked to end the command's tree first, and waited for. Its holder's kill time bounds
/// it: within one Lease duration after the last renewal, plus the keeper's SIGKILL wait.
#[cfg(target_os = "linux")]
async fn end_work_here(opts: &ResumeOptions) -> Result<(), ResumeError> {
    let holder = opts.holder.clone();
    let bound = opts.lease.duration + crate::command::KILL_WAIT + std::time::Duration::from_secs(1);
    let ended =
        tokio::task::spawn_blocking(move || crate::command::end_holders_work(&holder, bound))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
    for pid in ended {
        tracing::info!(holder = %opts.holder, keeper = pid, "the holder's command was still running here; its keeper ended it");
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
async fn end_work_here(_opts: &ResumeOptions) -> Result<(), ResumeError> {
    Ok(())
}

/// Takes `opts.holder`'s Lease for the resume ([`adopt_holder`]), or says why not.
async fn adopt(
    client: &Client,
    opts: &ResumeOptions,
) -> Result<flux_fence::LeaseGuard, ResumeError> {
    let lease_name = opts.lease.to_string();
    if opts.holder_exited {
        end_work_here(opts).await?;
    }
    let process = if opts.holder_exited {
        HolderProcess::Exited
    } else {
        HolderProcess::Unknown
    };
    match adopt_holder(
        client.clone(),
        opts.lease.clone(),
        &opts.keys,
        opts.holder.clone(),
        Arc::new(flux_fence::SystemClock),
        process,
    )
    .await?
    {
        Adoption::Adopted(g) => Ok(g),
        Adoption::LooksLive => Err(ResumeError::LooksLive {
            lease: lease_name,
            holder: opts.holder.clone(),
        }),
        Adoption::OtherHolder { holder: other } => Err(ResumeError::OtherHolder {
            lease: lease_name,
            holder: opts.holder.clone(),
            other,
        }),
        _ => Err(ResumeError::Contended { lease: lease_name }),
    }
}
