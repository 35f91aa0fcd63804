//! The credential and Secret flags, as one [`GhcrSettings`] layer ([`layer`]) that
//! `handoff_app::settings` resolves over the `[ghcr]` config, before any I/O.

use std::path::PathBuf;

use clap::Args;
use ghcr_auth::GhcrSettings;

/// The credential and registry flags shared by `check` and `reassert`.
#[derive(Debug, Args, Clone)]
pub struct CredentialArgs {
    /// Read the credential from this environment variable (a bare token with --username, else
    /// a whole Docker config JSON). Default: `[ghcr].credential_env`.
    #[arg(long, value_name = "VAR", conflicts_with_all = ["credential_file", "credential_stdin"])]
    pub credential_env: Option<String>,
    /// Read the credential from this file. Default: `[ghcr].credential_file`.
    #[arg(long, value_name = "PATH", conflicts_with = "credential_stdin")]
    pub credential_file: Option<PathBuf>,
    /// Read the credential from standard input. Default: `[ghcr].credential_stdin`.
    #[arg(long)]
    pub credential_stdin: bool,
    /// Username paired with a bare token (e.g. the GitHub user or bot); without it (and without
    /// `[ghcr].username`) the credential is read as a Docker config JSON.
    #[arg(long, value_name = "NAME")]
    pub username: Option<String>,
    /// Image to prove the credential against, e.g. ghcr.io/org/app:1.2.3. Repeatable.
    /// Default: `[ghcr].images`.
    #[arg(long, value_name = "IMAGE")]
    pub image: Vec<String>,
    /// Registry `host:port` to reach over plain HTTP. For loopback test registries only
    /// (anything else is refused). Repeatable. Default: `[ghcr].insecure_http_hosts`.
    #[arg(long, value_name = "HOST:PORT")]
    pub insecure_http_host: Vec<String>,
    /// Also prove the registry refuses a wrong password for each image, so a pass is not just
    /// an anonymous-readable image. Default: `[ghcr].negative_check`, else off.
    #[arg(long)]
    pub negative_check: bool,
}

/// Which Secrets and Flux sources `ghcr reassert` writes and proves (also `flux-handoff rbac`).
#[derive(Debug, Args, Clone, Default)]
pub struct SecretArgs {
    /// Name of the pull Secret in every consumer namespace. Default: `[ghcr].secret_name`.
    #[arg(long, value_name = "NAME")]
    pub secret_name: Option<String>,
    /// Consumer namespaces, comma-separated, written in this order. Default: `[ghcr].namespaces`.
    #[arg(
        long,
        value_name = "NS,...",
        value_delimiter = ',',
        conflicts_with = "namespace_selector"
    )]
    pub namespace_list: Vec<String>,
    /// Consumer namespaces by label selector, e.g. ghcr-consumer=true (sorted by name).
    /// Default: `[ghcr].namespace_selector`.
    #[arg(long, value_name = "SELECTOR")]
    pub namespace_selector: Option<String>,
    /// The Secret Flux itself pulls with, `namespace/name`; written last, after every consumer
    /// holds the credential. Default: `[ghcr].root_secret`.
    #[arg(long, value_name = "NS/NAME")]
    pub root_secret: Option<String>,
    /// Flux source to prove pulls with the credential afterwards: `[oci/|helm/]namespace/name`
    /// (`OCIRepository` by default). Repeatable. Default: `[ghcr].sources`, else none.
    #[arg(long, value_name = "SOURCE")]
    pub source: Vec<String>,
}

/// Where else the credential goes: staged keys and the External Secrets route (`ghcr reassert`
/// only).
#[derive(Debug, Args, Clone, Default)]
pub struct FanoutArgs {
    /// Stage the credential in one data key of a Secret, `namespace/name:key` (value: base64 of
    /// the Docker config; only that key is patched, by CAS; the Secret must exist). Repeatable.
    /// Default: `[ghcr].secret_keys`.
    #[arg(long, value_name = "NS/NAME:KEY")]
    pub secret_key: Vec<String>,
    /// The External Secrets `PushSecret` that pushes a staged key to the store, `namespace/name`;
    /// force-synced and awaited after staging. Default: `[ghcr].push_secret`.
    #[arg(long, value_name = "NS/NAME")]
    pub push_secret: Option<String>,
    /// The `ExternalSecret`'s name in every consumer namespace (--namespace-list or
    /// --namespace-selector): each is force-synced and its target Secret must hold the proven
    /// credential before the root Secret is written; those Secrets are never written directly.
    /// Default: `[ghcr].external_secret`.
    #[arg(long, value_name = "NAME", conflicts_with = "secret_name")]
    pub external_secret: Option<String>,
    /// Bootstrap: when a CRD, the `PushSecret`, an `ExternalSecret` or a staging Secret is missing,
    /// write root, then staging, then root again, without a Flux pause (otherwise exit 3 before
    /// any write). Default: `[ghcr].allow_incomplete_fanout`.
    #[arg(long)]
    pub allow_incomplete_fanout: bool,
}

/// The GHCR flags of `check` (`credential`) and `reassert`/`doctor`/`rbac` (`secrets` and
/// `fanout`) as one [`GhcrSettings`] layer, resolved over `[ghcr]` by
/// [`handoff_app::settings`] (no parsing here).
pub(crate) fn layer(
    credential: Option<&CredentialArgs>,
    secrets: Option<(&SecretArgs, &FanoutArgs)>,
) -> GhcrSettings {
    let mut l = GhcrSettings::default();
    if let Some(args) = credential {
        l.credential_env.clone_from(&args.credential_env);
        l.credential_file.clone_from(&args.credential_file);
        l.credential_stdin = args.credential_stdin.then_some(true);
        l.username.clone_from(&args.username);
        l.images.clone_from(&args.image);
        l.insecure_http_hosts.clone_from(&args.insecure_http_host);
        l.negative_check = args.negative_check.then_some(true);
    }
    if let Some((args, fanout)) = secrets {
        l.secret_name.clone_from(&args.secret_name);
        l.namespaces.clone_from(&args.namespace_list);
        l.namespace_selector.clone_from(&args.namespace_selector);
        l.root_secret.clone_from(&args.root_secret);
        l.sources.clone_from(&args.source);
        l.secret_keys.clone_from(&fanout.secret_key);
        l.push_secret.clone_from(&fanout.push_secret);
        l.external_secret.clone_from(&fanout.external_secret);
        l.allow_incomplete_fanout = fanout.allow_incomplete_fanout.then_some(true);
    }
    l
}
