//! `flux-handoff fences`: list every fence and the Lease with liveness evidence and the exact
//! release command (read-only); `fences release` releases one fence with a CAS; `fences
//! recover` releases only provably orphaned fences (dry run unless `--yes`).
//!
//! The rules live in `flux_fence::recovery` (pure, plus its thin I/O layer); these files parse,
//! print and map exit codes ([`render`] holds the words).

pub(crate) mod evidence;
mod recover;
mod release;
pub mod render;
mod table;

use clap::{Args, Subcommand};
use flux_fence::discover::{Listing, Scope};
use flux_fence::recovery::{Recovery, Snapshot};
use flux_fence::{AnnotationKeys, LeaseConfig};
use flux_suspend::object::{helmrelease_resource, kustomization_resource};
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use kube::Client;
use kube::api::Api;

use crate::cli::{FindArgs, Global, TargetArgs};
use crate::failure::Failure;
use crate::output::Output;
use crate::{client, config, exit, settings};

/// `flux-handoff fences [release|recover]`.
#[derive(Debug, Args)]
pub struct FencesArgs {
    #[command(subcommand)]
    pub action: Option<FencesAction>,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// Where to look, and which Lease is the liveness evidence.
#[derive(Debug, Args, Clone)]
pub struct ScopeArgs {
    #[command(flatten)]
    pub find: FindArgs,
    /// The coordination Lease whose holder and renew time are the liveness evidence,
    /// `[namespace/]name` (default: the config file's [lease], else flux-system/flux-handoff).
    #[arg(long, value_name = "LEASE", global = true)]
    pub lease: Option<String>,
}

/// The actions on fences.
#[derive(Debug, Subcommand)]
pub enum FencesAction {
    /// Release one fence with a CAS on what was just observed (restores every prior value).
    Release(release::ReleaseArgs),
    /// Release only provably orphaned fences: watch the Lease for one full lease duration,
    /// take it over if it stayed unchanged, release children before parents, release the
    /// Lease. Dry run unless --yes.
    Recover(recover::RecoverArgs),
}

/// Runs `fences`, `fences release` or `fences recover`.
pub async fn run(global: &Global, args: &FencesArgs, out: &mut Output) -> Result<u8, Failure> {
    let ctx = Context::load(global, &args.scope).await?;
    match &args.action {
        None => list(&ctx, out).await,
        Some(FencesAction::Release(a)) => release::run(global, &ctx, a, out).await,
        Some(FencesAction::Recover(a)) => recover::run(&ctx, a, out).await,
    }
}

/// Everything the fences commands share: the client, keys, Lease and scope.
pub(crate) struct Context {
    pub client: Client,
    pub keys: AnnotationKeys,
    pub lease: LeaseConfig,
    pub scope: Scope,
    /// Label-selected, or a full scan.
    pub listing: Listing,
    /// Appended to each printed command (`--config PATH` when one was given).
    pub suffix: String,
    /// `[recovery]` of the configuration file.
    pub recovery_file: config::RecoveryConfig,
}

impl Context {
    async fn load(global: &Global, scope: &ScopeArgs) -> Result<Self, Failure> {
        let file = config::load_optional(global.config.as_deref()).map_err(Failure::usage)?;
        // The fence commands name no target: resolve the Lease and keys with a placeholder.
        let targets = TargetArgs {
            target: vec!["unused".into()],
            parent: None,
            retire: None,
            quiesce: false,
            lease: scope.lease.clone(),
            controller: None,
        };
        let s = settings::resolve(global, &targets, &file).map_err(Failure::usage)?;
        let listing = scope.find.listing();
        let scope = scope
            .find
            .scope(std::slice::from_ref(&global.namespace))
            .map_err(Failure::usage)?;
        let suffix = global
            .config
            .as_ref()
            .map(|p| format!(" --config {}", p.display()))
            .unwrap_or_default();
        let client = client::client(global).await?;
        Ok(Self {
            client,
            keys: s.keys,
            lease: s.lease,
            scope,
            listing,
            suffix,
            recovery_file: file.recovery.unwrap_or_default(),
        })
    }

    /// The recovery rules, set up for this scope, Lease and keys.
    pub fn recovery(&self) -> Recovery {
        Recovery::new(
            self.client.clone(),
            self.keys.clone(),
            self.lease.clone(),
            vec![kustomization_resource(), helmrelease_resource()],
            render::child_mark(),
        )
        .scope(self.scope.clone())
        .listing(self.listing)
    }

    /// Discovery in the scope, and the Lease, as read now.
    pub async fn snapshot(&self) -> Result<Snapshot, Failure> {
        Ok(self.recovery().snapshot().await?)
    }

    /// The Lease's holder, if it can be read (evidence for notes only).
    pub async fn snapshot_lease_holder(&self) -> Option<String> {
        let api: Api<KubeLease> = Api::namespaced(self.client.clone(), &self.lease.namespace);
        api.get_opt(&self.lease.name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
    }

    pub fn lease_name(&self) -> String {
        format!("{}/{}", self.lease.namespace, self.lease.name)
    }
}

/// `verb resource target: cause`, with 403 spelled as "forbidden to".
pub(crate) fn kube_line(verb: &str, resource: &str, target: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => {
            format!("forbidden to {verb} {resource} {target}: {}", s.message)
        }
        other => format!(
            "{verb} {resource} {target}: {}",
            crate::failure::chain(other)
        ),
    }
}

async fn list(ctx: &Context, out: &mut Output) -> Result<u8, Failure> {
    let snap = ctx.snapshot().await?;
    let rows =
        flux_fence::recovery::assess(&snap.report, snap.lease.as_ref(), &render::child_mark());
    table::emit(ctx, &snap, &rows, out);
    Ok(exit::SUCCESS)
}
