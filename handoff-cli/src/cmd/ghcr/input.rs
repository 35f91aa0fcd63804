//! Flags over the `[ghcr]` config: where the credential comes from, how it is understood, and
//! which images prove it. Resolved before any I/O; errors are one line for exit code 2 and name
//! a field, never a value.

use std::path::PathBuf;

use clap::Args;
use ghcr_auth::image::ImageRef;
use ghcr_auth::registry::is_loopback_host;
use ghcr_auth::{CredentialFormat, CredentialSource};

use crate::config::GhcrConfig;

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

/// The resolved credential inputs.
#[derive(Debug, Clone)]
pub struct CredentialInput {
    pub source: CredentialSource,
    pub format: CredentialFormat,
    pub images: Vec<ImageRef>,
    pub allow_insecure_loopback: bool,
    pub negative_check: bool,
}

/// Resolves flags over `[ghcr]`.
pub fn resolve(
    args: &CredentialArgs,
    file: Option<&GhcrConfig>,
) -> Result<CredentialInput, String> {
    let empty = GhcrConfig::default();
    let file = file.unwrap_or(&empty);
    let source = if let Some(var) = &args.credential_env {
        CredentialSource::Env(var.clone())
    } else if let Some(path) = &args.credential_file {
        CredentialSource::File(path.clone())
    } else if args.credential_stdin {
        CredentialSource::Stdin
    } else {
        let configured = [
            file.credential_env.is_some(),
            file.credential_file.is_some(),
            file.credential_stdin == Some(true),
        ];
        if configured.iter().filter(|c| **c).count() > 1 {
            return Err(
                "config: [ghcr] sets more than one of credential_env, credential_file, \
                        credential_stdin"
                    .into(),
            );
        }
        match (&file.credential_env, &file.credential_file) {
            (Some(var), _) => CredentialSource::Env(var.clone()),
            (None, Some(path)) => CredentialSource::File(path.clone()),
            (None, None) if file.credential_stdin == Some(true) => CredentialSource::Stdin,
            (None, None) => {
                return Err("no credential source: pass --credential-env VAR, \
                            --credential-file PATH or --credential-stdin (or set one in [ghcr])"
                    .into());
            }
        }
    };
    if let CredentialSource::Env(var) = &source
        && (var.is_empty() || var.contains('='))
    {
        return Err("credential_env must be an environment variable name".into());
    }

    let image_texts = if args.image.is_empty() {
        &file.images
    } else {
        &args.image
    };
    if image_texts.is_empty() {
        return Err(
            "no image to prove the credential against: pass --image or set [ghcr].images".into(),
        );
    }
    let mut images = Vec::new();
    for text in image_texts {
        images.push(
            text.parse::<ImageRef>()
                .map_err(|e| crate::failure::chain(&e))?,
        );
    }

    let username = args.username.clone().or_else(|| file.username.clone());
    let format = match username {
        None => CredentialFormat::DockerConfig,
        Some(u) if u.is_empty() || u.contains(':') || u.chars().any(char::is_control) => {
            return Err("username must be non-empty without `:` or control characters".into());
        }
        Some(username) => {
            let registry = images[0].registry().to_string();
            if images.iter().any(|i| i.registry() != registry) {
                return Err(
                    "a bare token (--username) is for one registry, but the images \
                            name several; pass a Docker config instead"
                        .into(),
                );
            }
            CredentialFormat::Token { registry, username }
        }
    };

    let insecure = if args.insecure_http_host.is_empty() {
        &file.insecure_http_hosts
    } else {
        &args.insecure_http_host
    };
    if let Some(bad) = insecure.iter().find(|h| !is_loopback_host(h)) {
        return Err(format!(
            "insecure HTTP host {bad:?} is not a loopback address (plain HTTP is for local test \
             registries only)"
        ));
    }
    Ok(CredentialInput {
        source,
        format,
        images,
        allow_insecure_loopback: !insecure.is_empty(),
        negative_check: args.negative_check || file.negative_check == Some(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> CredentialArgs {
        CredentialArgs {
            credential_env: Some("TOKEN".into()),
            credential_file: None,
            credential_stdin: false,
            username: Some("bot".into()),
            image: vec!["ghcr.io/org/app:1".into()],
            insecure_http_host: vec![],
            negative_check: false,
        }
    }

    #[test]
    fn flags_resolve_to_a_token_for_the_images_registry() {
        let r = resolve(&args(), None).unwrap();
        assert_eq!(r.source, CredentialSource::Env("TOKEN".into()));
        assert_eq!(
            r.format,
            CredentialFormat::Token {
                registry: "ghcr.io".into(),
                username: "bot".into()
            }
        );
        assert!(!r.allow_insecure_loopback);
    }

    #[test]
    fn config_supplies_what_flags_do_not() {
        let a = CredentialArgs {
            credential_env: None,
            username: None,
            image: vec![],
            ..args()
        };
        let file = GhcrConfig {
            credential_file: Some("/run/secrets/ghcr".into()),
            images: vec!["127.0.0.1:5000/team/app:v1".into()],
            insecure_http_hosts: vec!["127.0.0.1:5000".into()],
            negative_check: Some(true),
            ..GhcrConfig::default()
        };
        let r = resolve(&a, Some(&file)).unwrap();
        assert_eq!(r.source, CredentialSource::File("/run/secrets/ghcr".into()));
        assert_eq!(r.format, CredentialFormat::DockerConfig);
        assert!(r.allow_insecure_loopback && r.negative_check);
    }

    #[test]
    fn bad_inputs_are_one_line_errors() {
        let no_source = CredentialArgs {
            credential_env: None,
            ..args()
        };
        assert!(
            resolve(&no_source, None)
                .unwrap_err()
                .starts_with("no credential source")
        );
        let no_image = CredentialArgs {
            image: vec![],
            ..args()
        };
        assert!(
            resolve(&no_image, None)
                .unwrap_err()
                .starts_with("no image")
        );
        let remote_http = CredentialArgs {
            insecure_http_host: vec!["registry.example.com:5000".into()],
            ..args()
        };
        assert!(
            resolve(&remote_http, None)
                .unwrap_err()
                .contains("not a loopback")
        );
        let two_registries = CredentialArgs {
            image: vec!["ghcr.io/a/b:1".into(), "quay.io/a/b:1".into()],
            ..args()
        };
        assert!(
            resolve(&two_registries, None)
                .unwrap_err()
                .contains("one registry")
        );
    }
}
