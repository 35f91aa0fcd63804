//! `flux-handoff.toml`: everything a handoff needs, so a CI step is one short line. Every key
//! can be overridden by a flag; unknown keys are rejected with their name and line.
//!
//! ```toml
//! events_addr = "http://notification-controller.flux-system.svc.cluster.local./"  # off by default
//!
//! [lease]
//! namespace = "flux-system"      # default
//! name = "flux-handoff"          # default
//! duration = "60s"
//! wait = "2m"                    # --wait-lease: wait for a live holder's Lease (default 0)
//! max_hold = "2h"                # --max-hold: `fences --overdue` names a pause held longer
//!
//! [fence]
//! annotation_prefix = "flux-handoff.io"
//! retire = "ack"                 # ack | restart | none
//! quiesce = false
//!
//! [controller]                   # the Deployment `--retire restart` restarts: the one that
//! namespace = "flux-system"      # reconciles the targets (helm-controller for HelmReleases;
//! name = "kustomize-controller"  # targets of both kinds cannot share one restart: exit 2)
//!
//! [[targets]]
//! kind = "Kustomization"         # or HelmRelease
//! namespace = "flux-system"
//! name = "infrastructure"
//! # parent = "flux-system/flux-system"   # default: from kustomize.toolkit.fluxcd.io labels
//!
//! [ghcr]
//! username = "flux"
//! credential_env = "GHCR_TOKEN"  # or credential_file = "/run/secrets/ghcr", or credential_stdin
//! images = ["ghcr.io/org/app:1.2.3"]
//! secret_name = "ghcr-auth"
//! namespaces = ["apps"]          # and/or namespace_selector = "ghcr-consumer=true"
//! root_secret = "flux-system/ghcr-auth"
//! sources = ["flux-system/app"]  # OCIRepositories to reconcile as the Flux proof
//! # The External Secrets layout (docs/fanout.md) instead of secret_name's direct writes:
//! # secret_keys = ["flux-system/variables-base:ghcr_dockerconfigjson"]  # staged, CAS per key
//! # push_secret = "flux-system/seed-ghcr"   # force-synced after staging
//! # external_secret = "ghcr-auth"           # in every consumer namespace, pulled and verified
//! # allow_incomplete_fanout = false         # bootstrap only: root, staging, root, no pause
//!
//! [recovery]
//! evidence = "github"            # lease (default) | github: how `fences recover` proves a holder gone
//! github_token_file = "/run/secrets/gh"  # default: GITHUB_TOKEN (needs `actions: read`)
//! recover_finished_runs = true   # pause/run/ghcr reassert: recover a finished CI run's hold first
//! ```

use std::path::Path;

use crate::settings::{ControllerTable, FenceTable, LeaseTable, Tables, TargetTable};
use serde::Deserialize;

/// The configuration file as written.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// notification-controller's event server (`--events-addr`); before the first table.
    pub events_addr: Option<String>,
    pub lease: Option<LeaseTable>,
    pub fence: Option<FenceTable>,
    pub controller: Option<ControllerTable>,
    #[serde(default)]
    pub targets: Vec<TargetTable>,
    pub ghcr: Option<GhcrConfig>,
    pub recovery: Option<RecoveryConfig>,
}

impl FileConfig {
    /// The session's tables, under the flags ([`crate::settings::plan`]).
    #[must_use]
    pub fn tables(&self) -> Tables<'_> {
        Tables {
            lease: self.lease.as_ref(),
            fence: self.fence.as_ref(),
            controller: self.controller.as_ref(),
            targets: &self.targets,
            recovery: self.recovery.as_ref(),
            ghcr: self.ghcr.as_ref(),
        }
    }
}

/// `[recovery]`: the evidence recovery uses (see docs/recovery.md).
pub use flux_fence::liveness::RecoveryTable as RecoveryConfig;

/// `[ghcr]`: the lower layer of `ghcr check`/`ghcr reassert`'s settings.
pub use ghcr_auth::GhcrSettings as GhcrConfig;

/// The most a config file may hold; a wrong path (`/dev/zero`, a log) fails instead of being
/// read forever.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Reads and parses `path`. Errors are one line: `config <path>:<line>: <what>`.
pub fn load(path: &Path) -> Result<FileConfig, String> {
    let text = read_bounded(path, MAX_CONFIG_BYTES)
        .map_err(|e| format!("config {}: cannot read: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("config {}{e}", path.display()))
}

use crate::kubeconfig::read_bounded;

/// Loads `path` when given; no config file is an empty config.
pub fn load_optional(path: Option<&Path>) -> Result<FileConfig, String> {
    path.map_or_else(|| Ok(FileConfig::default()), load)
}

/// Parses config text. Errors start with `:<line>: ` when the position is known.
pub fn parse(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| {
        let what = e
            .message()
            .lines()
            .next()
            .unwrap_or("invalid TOML")
            .trim()
            .to_string();
        match e.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!(":{line}: {what}")
            }
            None => format!(": {what}"),
        }
    })
}

/// Splits `namespace/name`; a bare `name` takes `default_ns`; both must be names the API
/// server accepts ([`crate::names::split_namespaced`]).
pub fn split_ref(text: &str, default_ns: &str) -> Result<(String, String), String> {
    crate::names::split_namespaced(text, default_ns).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_example_parses() {
        let text = include_str!("config.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .skip_while(|l| !l.starts_with("```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
        let cfg = parse(&text).unwrap();
        assert_eq!(cfg.targets.len(), 1);
        assert_eq!(cfg.targets[0].name, "infrastructure");
        assert_eq!(cfg.ghcr.unwrap().images, ["ghcr.io/org/app:1.2.3"]);
    }

    #[test]
    fn the_external_secrets_layout_is_a_few_lines_of_ghcr() {
        let cfg = parse(
            "[ghcr]\ncredential_env = \"GHCR_TOKEN\"\nimages = [\"ghcr.io/org/app:1\"]\n\
             secret_keys = [\"flux-system/variables-base:ghcr_dockerconfigjson\"]\n\
             push_secret = \"flux-system/seed-ghcr\"\nexternal_secret = \"ghcr-auth\"\n\
             namespaces = [\"apps\", \"web\"]\nroot_secret = \"flux-system/ghcr-auth\"\n\
             allow_incomplete_fanout = false\n",
        )
        .unwrap();
        let g = cfg.ghcr.unwrap();
        let route = ghcr_auth::route_spec(&GhcrConfig::default(), &g, "default").unwrap();
        let eso = route.eso.unwrap();
        assert_eq!(eso.external_secret, "ghcr-auth");
        assert_eq!(eso.push_secret.to_string(), "flux-system/seed-ghcr");
        assert_eq!(route.keys.len(), 1);
        assert!(!route.allow_incomplete);
    }

    #[test]
    fn unknown_key_is_rejected_with_its_name_and_line() {
        let err = parse("[lease]\nname = \"x\"\nnamspace = \"y\"\n").unwrap_err();
        assert!(err.starts_with(":3: "), "{err}");
        assert!(err.contains("namspace"), "{err}");
        assert_eq!(err.lines().count(), 1);
    }

    #[test]
    fn an_endless_config_file_fails_at_the_bound() {
        let err = load(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            err,
            "config /dev/zero: cannot read: more than 1048576 bytes"
        );
    }

    #[test]
    fn unknown_table_is_rejected() {
        let err = parse("[leese]\nname = \"x\"\n").unwrap_err();
        assert!(err.starts_with(":1: ") && err.contains("leese"), "{err}");
    }

    #[test]
    fn wrong_type_names_the_line() {
        let err = parse("[fence]\nquiesce = \"yes\"\n").unwrap_err();
        assert!(err.starts_with(":2: "), "{err}");
    }

    #[test]
    fn the_recovery_section_parses_and_rejects_unknown_keys() {
        let cfg = parse(
            "[recovery]\nevidence = \"github\"\ngithub_token_file = \"/run/gh\"\nrecover_finished_runs = true\n",
        )
        .unwrap();
        let r = cfg.recovery.unwrap();
        assert_eq!(r.evidence.as_deref(), Some("github"));
        assert_eq!(
            r.github_token_file,
            Some(std::path::PathBuf::from("/run/gh"))
        );
        assert_eq!(r.recover_finished_runs, Some(true));
        let err = parse("[recovery]\ntoken = \"x\"\n").unwrap_err();
        assert!(err.contains("token"), "{err}");
    }
}
