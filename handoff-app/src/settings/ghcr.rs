//! The GHCR part of the settings: `ghcr check`'s credential input, and everything
//! `ghcr reassert` does — the credential, its [`Route`], the Flux sources to prove and the
//! pause around the writes — resolved at once by [`ghcr_plan`], the flags' [`GhcrSettings`]
//! layer over the `[ghcr]` table, before any request.

use std::path::Path;
use std::sync::Arc;

use flux_fence::liveness::{LivenessSource, RecoveryTable};
use ghcr_auth::fanout::Route;
use ghcr_auth::source::SourceRef;
use ghcr_auth::{CredentialInput, GhcrSettings, credential_input, route_spec, source_refs};

use super::{Flags, Plan, Tables, plan};

/// What `ghcr reassert` does, resolved once by [`ghcr_plan`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GhcrPlan {
    /// Where the credential is read and what proves it.
    pub credential: CredentialInput,
    /// Where it goes: the plain route, or staged keys and External Secrets too.
    pub route: Route,
    /// The Flux sources proven to pull with it afterwards.
    pub sources: Vec<SourceRef>,
    /// The pause around the writes, when targets are named (flags or `[[targets]]`) and the
    /// route is not a bootstrap (which runs without a Flux pause).
    pub pause: Option<Plan>,
}

/// The credential input of `flags.ghcr` over `[ghcr]` (`ghcr check`'s whole setting).
///
/// # Errors
///
/// One line naming the flag or the table key, for a usage error.
pub fn ghcr_credential(flags: &Flags, file: &Tables<'_>) -> Result<CredentialInput, String> {
    credential_input(&flags.ghcr, &table(file)).map_err(|e| e.to_string())
}

/// The route and the sources of `flags.ghcr` over `[ghcr]` (what `doctor` and `rbac` check
/// and grant, and what `ghcr reassert` writes).
///
/// # Errors
///
/// One line naming the flag or the table key, for a usage error.
pub fn ghcr_route(flags: &Flags, file: &Tables<'_>) -> Result<(Route, Vec<SourceRef>), String> {
    let table = table(file);
    let route = route_spec(&flags.ghcr, &table, &flags.namespace).map_err(|e| e.to_string())?;
    let sources = source_refs(&flags.ghcr, &table).map_err(|e| e.to_string())?;
    Ok((route, sources))
}

/// Everything `ghcr reassert` does: [`ghcr_credential`], [`ghcr_route`], and — with targets
/// and no bootstrap — the pause's [`plan`] (`github` as there).
///
/// # Errors
///
/// One line naming the flag or the table key, for a usage error.
pub fn ghcr_plan<G>(flags: &Flags, file: &Tables<'_>, github: G) -> Result<GhcrPlan, String>
where
    G: FnOnce(Option<&Path>, &RecoveryTable) -> Result<Arc<dyn LivenessSource>, String>,
{
    let credential = ghcr_credential(flags, file)?;
    let (route, sources) = ghcr_route(flags, file)?;
    let targets = !flags.targets.is_empty() || !file.targets.is_empty();
    let pause = if targets && !route.allow_incomplete {
        Some(plan(flags, file, github)?)
    } else {
        None
    };
    Ok(GhcrPlan {
        credential,
        route,
        sources,
        pause,
    })
}

/// The `[ghcr]` table, or an empty one.
fn table(file: &Tables<'_>) -> GhcrSettings {
    file.ghcr.cloned().unwrap_or_default()
}
