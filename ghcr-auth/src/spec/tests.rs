//! Table tests of the settings resolvers, messages included.

use super::*;

fn flags() -> GhcrSettings {
    GhcrSettings {
        credential_env: Some("TOKEN".into()),
        username: Some("bot".into()),
        images: vec!["ghcr.io/org/app:1".into()],
        ..GhcrSettings::default()
    }
}

fn secrets(f: impl FnOnce(&mut GhcrSettings)) -> GhcrSettings {
    let mut s = GhcrSettings::default();
    f(&mut s);
    s
}

fn input_error(flags: &GhcrSettings, file: &GhcrSettings) -> String {
    credential_input(flags, file).unwrap_err().to_string()
}

fn spec_error(flags: &GhcrSettings, file: &GhcrSettings) -> String {
    secret_spec(flags, file, "x").unwrap_err().to_string()
}

#[test]
fn flags_resolve_to_a_token_for_the_images_registry() {
    let r = credential_input(&flags(), &GhcrSettings::default()).unwrap();
    assert_eq!(r.source, CredentialSource::Env("TOKEN".into()));
    assert_eq!(
        r.format,
        CredentialFormat::Token {
            registry: "ghcr.io".into(),
            username: "bot".into()
        }
    );
    assert!(!r.allow_insecure_loopback && !r.negative_check);
}

#[test]
fn config_supplies_what_flags_do_not() {
    let file = GhcrSettings {
        credential_file: Some("/run/secrets/ghcr".into()),
        images: vec!["127.0.0.1:5000/team/app:v1".into()],
        insecure_http_hosts: vec!["127.0.0.1:5000".into()],
        negative_check: Some(true),
        ..GhcrSettings::default()
    };
    let r = credential_input(&GhcrSettings::default(), &file).unwrap();
    assert_eq!(r.source, CredentialSource::File("/run/secrets/ghcr".into()));
    assert_eq!(r.format, CredentialFormat::DockerConfig);
    assert!(r.allow_insecure_loopback && r.negative_check);
}

#[test]
fn flags_win_over_the_config_and_the_flags_source_order_is_env_file_stdin() {
    let file = GhcrSettings {
        credential_stdin: Some(true),
        images: vec!["quay.io/a/b:1".into()],
        ..GhcrSettings::default()
    };
    let r = credential_input(&flags(), &file).unwrap();
    assert_eq!(r.source, CredentialSource::Env("TOKEN".into()));
    assert_eq!(r.images[0].registry(), "ghcr.io");
    let both = GhcrSettings {
        credential_file: Some("/f".into()),
        credential_stdin: Some(true),
        ..flags()
    };
    let r = credential_input(&both, &GhcrSettings::default()).unwrap();
    assert_eq!(r.source, CredentialSource::Env("TOKEN".into()));
}

#[test]
fn bad_credential_inputs_are_these_one_line_errors() {
    let none = GhcrSettings::default();
    let cases: [(GhcrSettings, GhcrSettings, &str); 9] = [
        (
            GhcrSettings {
                credential_env: None,
                ..flags()
            },
            none.clone(),
            "no credential source: pass --credential-env VAR, --credential-file PATH or \
             --credential-stdin (or set one in [ghcr])",
        ),
        (
            GhcrSettings {
                credential_env: None,
                ..flags()
            },
            GhcrSettings {
                credential_env: Some("A".into()),
                credential_stdin: Some(true),
                ..none.clone()
            },
            "config: [ghcr] sets more than one of credential_env, credential_file, \
             credential_stdin",
        ),
        (
            GhcrSettings {
                credential_env: Some("A=B".into()),
                ..flags()
            },
            none.clone(),
            "credential_env must be an environment variable name",
        ),
        (
            GhcrSettings {
                images: vec![],
                ..flags()
            },
            none.clone(),
            "no image to prove the credential against: pass --image or set [ghcr].images",
        ),
        (
            GhcrSettings {
                images: vec!["ghcr.io/App:1".into()],
                ..flags()
            },
            none.clone(),
            "parsing image reference `ghcr.io/App:1`: ",
        ),
        (
            GhcrSettings {
                username: Some("a:b".into()),
                ..flags()
            },
            none.clone(),
            "username must be non-empty without `:` or control characters",
        ),
        (
            GhcrSettings {
                images: vec!["ghcr.io/a/b:1".into(), "quay.io/a/b:1".into()],
                ..flags()
            },
            none.clone(),
            "a bare token (--username) is for one registry, but the images name several; \
             pass a Docker config instead",
        ),
        (
            GhcrSettings {
                insecure_http_hosts: vec!["registry.example.com:5000".into()],
                ..flags()
            },
            none.clone(),
            "insecure HTTP host \"registry.example.com:5000\" is not a loopback address \
             (plain HTTP is for local test registries only)",
        ),
        (
            GhcrSettings {
                username: None,
                ..flags()
            },
            GhcrSettings {
                username: Some(String::new()),
                ..none.clone()
            },
            "username must be non-empty without `:` or control characters",
        ),
    ];
    for (flags, file, want) in cases {
        let got = input_error(&flags, &file);
        assert!(got.starts_with(want), "{got}");
    }
}

#[test]
fn consumers_and_root_resolve_from_flags() {
    let flags = secrets(|s| {
        s.secret_name = Some("pull".into());
        s.namespaces = vec!["a".into(), "b".into()];
        s.root_secret = Some("flux-system/ghcr".into());
    });
    let spec = secret_spec(&flags, &GhcrSettings::default(), "flux-system").unwrap();
    assert_eq!(
        spec.consumers,
        Consumers::Namespaces(vec!["a".into(), "b".into()])
    );
    assert_eq!(spec.root, Some(SecretTarget::new("flux-system", "ghcr")));
    let bare = secrets(|s| s.root_secret = Some("ghcr".into()));
    let spec = secret_spec(&bare, &GhcrSettings::default(), "flux-system").unwrap();
    assert_eq!(spec.root, Some(SecretTarget::new("flux-system", "ghcr")));
}

#[test]
fn flags_consumers_replace_the_configs_and_the_config_must_not_name_both_kinds() {
    let file = secrets(|s| {
        s.secret_name = Some("pull".into());
        s.namespace_selector = Some("team=a".into());
    });
    let flags = secrets(|s| s.namespaces = vec!["b".into()]);
    let spec = secret_spec(&flags, &file, "x").unwrap();
    assert_eq!(spec.consumers, Consumers::Namespaces(vec!["b".into()]));
    assert_eq!(spec.secret_name, "pull");
    let spec = secret_spec(&GhcrSettings::default(), &file, "x").unwrap();
    assert_eq!(spec.consumers, Consumers::Selector("team=a".into()));
    let both = secrets(|s| {
        s.namespaces = vec!["a".into()];
        s.namespace_selector = Some("team=a".into());
    });
    assert_eq!(
        spec_error(&GhcrSettings::default(), &both),
        "config: [ghcr] sets both namespaces and namespace_selector; choose one"
    );
}

#[test]
fn bad_secret_inputs_are_these_one_line_errors() {
    let cases: [(GhcrSettings, &str); 6] = [
        (
            GhcrSettings::default(),
            "nothing to reassert: pass --namespace-list, --namespace-selector or \
             --root-secret (or set them in [ghcr])",
        ),
        (
            secrets(|s| s.namespaces = vec!["a".into()]),
            "no Secret name for the consumer namespaces: pass --secret-name or set \
             [ghcr].secret_name",
        ),
        (
            secrets(|s| {
                s.secret_name = Some("p".into());
                s.namespaces = vec!["A_B".into()];
            }),
            "--namespace-list: every entry must be a namespace name",
        ),
        (
            secrets(|s| s.namespace_selector = Some(" ".into())),
            "--namespace-selector must not be empty",
        ),
        (
            secrets(|s| s.namespace_selector = Some("a in (b".into())),
            "--namespace-selector: label selector \"a in (b\": unbalanced parentheses",
        ),
        (
            secrets(|s| s.root_secret = Some("a/../b".into())),
            "--root-secret: \"a/../b\" is not a valid [namespace/]name",
        ),
    ];
    for (flags, want) in cases {
        assert_eq!(spec_error(&flags, &GhcrSettings::default()), want);
    }
}

#[test]
fn sources_default_to_oci_repositories() {
    let flags = secrets(|s| {
        s.sources = vec!["flux-system/apps".into(), "helm/ns/charts".into()];
    });
    let s = source_refs(&flags, &GhcrSettings::default()).unwrap();
    assert_eq!(s[0].resource.kind, "OCIRepository");
    assert_eq!(s[1].resource.kind, "HelmRepository");
    let bad = secrets(|s| s.sources = vec!["x/y/z/w".into()]);
    assert_eq!(
        source_refs(&bad, &GhcrSettings::default())
            .unwrap_err()
            .to_string(),
        "--source \"x/y/z/w\": expected [oci/|helm/]namespace/name"
    );
}

/// The original tool's layout, as the `[ghcr]` table holds it.
fn eso_layout() -> GhcrSettings {
    secrets(|s| {
        s.secret_keys = vec!["flux-system/variables-base:ghcr_dockerconfigjson".into()];
        s.push_secret = Some("flux-system/seed-ghcr".into());
        s.external_secret = Some("ghcr-auth".into());
        s.namespaces = vec!["apps".into(), "web".into()];
        s.root_secret = Some("flux-system/ghcr-auth".into());
    })
}

#[test]
fn route_spec_resolves_the_original_layout_with_no_direct_consumers() {
    let r = route_spec(&GhcrSettings::default(), &eso_layout(), "default").unwrap();
    assert_eq!(
        r.keys[0].to_string(),
        "flux-system/variables-base:ghcr_dockerconfigjson"
    );
    let eso = r.eso.unwrap();
    assert_eq!(
        eso.push_secret,
        SecretTarget::new("flux-system", "seed-ghcr")
    );
    assert_eq!(eso.external_secret, "ghcr-auth");
    assert_eq!(
        eso.consumers,
        Consumers::Namespaces(vec!["apps".into(), "web".into()])
    );
    assert_eq!(r.direct.consumers, Consumers::Namespaces(vec![]));
    assert_eq!(
        r.direct.root,
        Some(SecretTarget::new("flux-system", "ghcr-auth"))
    );
    assert!(!r.allow_incomplete);
    // Flags win: bootstrap from the flag, a key of its own.
    let f = secrets(|s| {
        s.allow_incomplete_fanout = Some(true);
        s.secret_keys = vec!["vars:k".into()];
    });
    let r = route_spec(&f, &eso_layout(), "flux-system").unwrap();
    assert!(r.allow_incomplete);
    assert_eq!(r.keys[0].to_string(), "flux-system/vars:k");
}

#[test]
fn route_spec_refuses_partial_or_mixed_routes_naming_the_flag() {
    type Edit = fn(&mut GhcrSettings);
    let cases: [(Edit, &str); 6] = [
        (|s| s.push_secret = None, "missing --push-secret"),
        (|s| s.secret_keys.clear(), "missing --secret-key"),
        (|s| s.namespaces.clear(), "missing consumer namespaces"),
        (|s| s.secret_name = Some("pull".into()), "choose one"),
        (
            |s| s.secret_keys = vec!["ns/name".into()],
            "--secret-key \"ns/name\"",
        ),
        (
            |s| s.external_secret = Some("Bad_Name".into()),
            "--external-secret",
        ),
    ];
    for (edit, want) in cases {
        let mut file = eso_layout();
        edit(&mut file);
        let err = route_spec(&GhcrSettings::default(), &file, "d")
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{want}: {err}");
        assert_eq!(err.lines().count(), 1);
    }
    let mut file = eso_layout();
    file.external_secret = None;
    let err = route_spec(&GhcrSettings::default(), &file, "d")
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing --external-secret"), "{err}");
}

#[test]
fn route_spec_without_eso_is_the_direct_spec_and_a_key_alone_is_enough() {
    let direct = secrets(|s| {
        s.secret_name = Some("pull".into());
        s.namespaces = vec!["apps".into()];
    });
    let r = route_spec(&direct, &GhcrSettings::default(), "d").unwrap();
    assert_eq!(
        r.direct,
        secret_spec(&direct, &GhcrSettings::default(), "d").unwrap()
    );
    assert!(r.keys.is_empty() && r.eso.is_none());
    let key = secrets(|s| s.secret_keys = vec!["a/b:c".into()]);
    let r = route_spec(&key, &GhcrSettings::default(), "d").unwrap();
    assert_eq!(r.keys.len(), 1);
    assert_eq!(r.direct.root, None);
}
