//! Tier 1: credential parsing, validation, rendering and redaction (no cluster, no network).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ghcr_auth::CredentialProblem;
use ghcr_auth::MaskCommands;
use ghcr_auth::Redactor;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::is_github_actions;
use proptest::prelude::*;
use secrecy::{ExposeSecret, SecretString};

const TOKEN: &str = "ghp_0123456789abcdefABCDEF0123456789wxyz";

fn config_json(user: &str, pass: &str) -> String {
    let auth = STANDARD.encode(format!("{user}:{pass}"));
    serde_json::json!({"auths": {"ghcr.io": {"username": user, "password": pass, "auth": auth}}})
        .to_string()
}

fn problem(text: &str) -> CredentialProblem {
    DockerConfig::parse(text).expect_err("should be refused")
}

#[test]
fn valid_config_parses_with_username_password_and_auth() {
    let cfg = DockerConfig::parse(&config_json("octocat", TOKEN)).unwrap();
    let auth = cfg.credential_for("ghcr.io").unwrap();
    assert_eq!(auth.username(), "octocat");
    assert_eq!(auth.password().expose_secret(), TOKEN);
    assert_eq!(cfg.registries().collect::<Vec<_>>(), ["ghcr.io"]);
}

#[test]
fn auth_only_entry_is_decoded_into_username_and_password() {
    let auth = STANDARD.encode(format!("octocat:{TOKEN}"));
    let text = format!(r#"{{"auths":{{"ghcr.io":{{"auth":"{auth}"}}}}}}"#);
    let cfg = DockerConfig::parse(&text).unwrap();
    assert_eq!(
        cfg,
        DockerConfig::parse(&config_json("octocat", TOKEN)).unwrap()
    );
}

#[test]
fn auth_disagreeing_with_password_is_refused() {
    let auth = STANDARD.encode("octocat:other");
    let text = format!(
        r#"{{"auths":{{"ghcr.io":{{"username":"octocat","password":"{TOKEN}","auth":"{auth}"}}}}}}"#
    );
    assert_eq!(
        problem(&text),
        CredentialProblem::AuthMismatch {
            registry: "ghcr.io".into()
        }
    );
}

#[test]
fn auth_that_is_not_base64_of_a_pair_is_refused() {
    for auth in ["%%%not-base64", &STANDARD.encode("no-colon-here")] {
        let text = format!(r#"{{"auths":{{"ghcr.io":{{"auth":"{auth}"}}}}}}"#);
        assert_eq!(
            problem(&text),
            CredentialProblem::AuthMalformed {
                registry: "ghcr.io".into()
            }
        );
    }
}

#[test]
fn duplicate_registry_keys_are_refused_even_though_json_parsers_keep_the_last() {
    let text = format!(
        r#"{{"auths":{{"ghcr.io":{{"username":"a","password":"b"}},"ghcr.io":{{"username":"c","password":"{TOKEN}"}}}}}}"#
    );
    assert_eq!(problem(&text), CredentialProblem::DuplicateKey);
}

#[test]
fn registries_equal_after_normalisation_are_refused() {
    let text = r#"{"auths":{"ghcr.io":{"username":"a","password":"b"},"https://GHCR.io/v2/":{"username":"a","password":"b"}}}"#;
    assert_eq!(
        problem(text),
        CredentialProblem::DuplicateRegistry {
            registry: "ghcr.io".into()
        }
    );
}

#[test]
fn control_characters_in_values_are_refused() {
    let text = r#"{"auths":{"ghcr.io":{"username":"octocat","password":"tok\nen"}}}"#;
    assert_eq!(
        problem(text),
        CredentialProblem::ControlCharacter {
            registry: "ghcr.io".into(),
            field: "password"
        }
    );
    let text = r#"{"auths":{"ghcr.io":{"username":"octo\u0000cat","password":"token"}}}"#;
    assert_eq!(
        problem(text),
        CredentialProblem::ControlCharacter {
            registry: "ghcr.io".into(),
            field: "username"
        }
    );
}

#[test]
fn missing_or_empty_fields_are_refused() {
    let text = r#"{"auths":{"ghcr.io":{"username":"octocat"}}}"#;
    assert_eq!(
        problem(text),
        CredentialProblem::Missing {
            registry: "ghcr.io".into(),
            field: "password"
        }
    );
    let text = r#"{"auths":{"ghcr.io":{"username":"","password":"x"}}}"#;
    assert_eq!(
        problem(text),
        CredentialProblem::Missing {
            registry: "ghcr.io".into(),
            field: "username"
        }
    );
}

#[test]
fn wrong_shapes_are_refused() {
    assert!(matches!(problem("[]"), CredentialProblem::Shape(_)));
    assert!(matches!(
        problem(r#"{"auths":[]}"#),
        CredentialProblem::Shape(_)
    ));
    assert!(matches!(
        problem(r#"{"auths":{}}"#),
        CredentialProblem::Shape(_)
    ));
    assert!(matches!(
        problem(r#"{"auths":{"ghcr.io":"x"}}"#),
        CredentialProblem::Shape(_)
    ));
    assert!(matches!(
        problem("{not json"),
        CredentialProblem::NotJson { line: 1, .. }
    ));
}

#[test]
fn credential_helpers_and_identity_tokens_are_unsupported() {
    assert_eq!(
        problem(r#"{"credsStore":"desktop","auths":{}}"#),
        CredentialProblem::UnsupportedField {
            field: "credsStore".into()
        }
    );
    let text = r#"{"auths":{"ghcr.io":{"identitytoken":"abc"}}}"#;
    assert_eq!(
        problem(text),
        CredentialProblem::UnsupportedField {
            field: "identitytoken".into()
        }
    );
}

#[test]
fn invalid_registry_keys_are_refused() {
    let text = r#"{"auths":{"not a host":{"username":"a","password":"b"}}}"#;
    assert_eq!(problem(text), CredentialProblem::InvalidRegistry);
    let text = r#"{"auths":{"ghp0123456789":{"username":"a","password":"b"}}}"#;
    assert_eq!(problem(text), CredentialProblem::InvalidRegistry);
}

#[test]
fn render_is_canonical_and_parses_back_equal() {
    let cfg = DockerConfig::parse(&config_json("octocat", TOKEN)).unwrap();
    let rendered = cfg.render();
    let again = DockerConfig::parse(rendered.expose_secret()).unwrap();
    assert_eq!(cfg, again);
    assert_eq!(rendered.expose_secret(), again.render().expose_secret());
}

#[test]
fn from_token_builds_the_same_config_as_the_equivalent_json() {
    let cfg = DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(TOKEN)).unwrap();
    assert_eq!(
        cfg,
        DockerConfig::parse(&config_json("octocat", TOKEN)).unwrap()
    );
}

#[test]
fn problems_never_contain_the_secret() {
    let cases = [
        format!(r#"{{"auths":{{"ghcr.io":{{"username":"u","password":"{TOKEN}\n"}}}}}}"#),
        format!(r#"{{"auths":{{"{TOKEN} x":{{"username":"u","password":"p"}}}}}}"#),
        format!(r#"{{"{TOKEN}":1}}"#),
        format!(r#"{{"auths":{{"ghcr.io":{{"{TOKEN}":"p"}}}}}}"#),
        format!(r#"{{"auths": {TOKEN}"#),
    ];
    for text in cases {
        let p = problem(&text);
        let shown = format!("{p} {p:?}");
        assert!(!shown.contains(TOKEN), "leaked in {shown}");
    }
}

#[test]
fn debug_of_config_and_entry_shows_no_secret() {
    let cfg = DockerConfig::parse(&config_json("octocat", TOKEN)).unwrap();
    let shown = format!("{cfg:?} {:?}", cfg.credential_for("ghcr.io").unwrap());
    let redactor = Redactor::new(&cfg);
    assert!(!redactor.leaks_in(&shown), "{shown}");
    assert!(shown.contains("ghcr.io"));
}

#[test]
fn redactor_replaces_token_and_every_base64_form() {
    let cfg = DockerConfig::parse(&config_json("octocat", TOKEN)).unwrap();
    let redactor = Redactor::new(&cfg);
    let pair_b64 = STANDARD.encode(format!("octocat:{TOKEN}"));
    let cfg_b64 = STANDARD.encode(cfg.render().expose_secret());
    let text = format!("a {TOKEN} b {pair_b64} c {cfg_b64} d");
    let clean = redactor.redact(&text);
    assert!(!redactor.leaks_in(&clean), "{clean}");
    assert_eq!(clean, "a *** b *** c *** d");
}

#[test]
fn mask_commands_cover_token_base64_and_whole_config() {
    let cfg = DockerConfig::parse(&config_json("octocat", TOKEN)).unwrap();
    let mut out = Vec::new();
    MaskCommands::for_config(&cfg).write_to(&mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    let masked: Vec<&str> = out
        .lines()
        .map(|l| l.strip_prefix("::add-mask::").unwrap())
        .collect();
    assert!(masked.contains(&TOKEN));
    assert!(masked.contains(&STANDARD.encode(format!("octocat:{TOKEN}")).as_str()));
    assert!(masked.contains(&STANDARD.encode(TOKEN).as_str()));
    assert!(masked.contains(&cfg.render().expose_secret()));
    assert!(masked.contains(&STANDARD.encode(cfg.render().expose_secret()).as_str()));
    assert!(!format!("{:?}", MaskCommands::for_config(&cfg)).contains(TOKEN));
}

#[test]
fn mask_commands_escape_percent_and_split_lines() {
    let text = "{\n  \"auths\": {\"ghcr.io\": {\"username\": \"u\", \"password\": \"p%0Aq\"}}\n}";
    let cfg = DockerConfig::parse(text).unwrap();
    let mut out = Vec::new();
    MaskCommands::for_config(&cfg).write_to(&mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.lines().all(|l| l.starts_with("::add-mask::")), "{out}");
    assert!(out.contains("::add-mask::p%250Aq\n"));
    assert!(!out.contains("p%0Aq"));
}

#[test]
fn github_actions_is_detected_only_by_the_exact_value_true() {
    assert!(is_github_actions(Some("true")));
    assert!(!is_github_actions(Some("false")));
    assert!(!is_github_actions(Some("1")));
    assert!(!is_github_actions(None));
}

proptest! {
    #[test]
    fn any_plain_credential_round_trips_through_render(
        user in "[a-zA-Z0-9._-]{1,39}",
        pass in "[ -~]{1,80}",
    ) {
        let cfg = DockerConfig::from_token("ghcr.io", &user, SecretString::from(pass.clone())).unwrap();
        let back = DockerConfig::parse(cfg.render().expose_secret()).unwrap();
        prop_assert_eq!(back.credential_for("ghcr.io").unwrap().password().expose_secret(), pass.as_str());
        prop_assert_eq!(cfg, back);
    }

    #[test]
    fn redacted_text_never_contains_the_password(
        pass in "[A-Za-z0-9_]{12,60}",
        noise in "[ -~]{0,40}",
    ) {
        let cfg = DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(pass.clone())).unwrap();
        let text = format!("{noise}{pass}{noise}{}", STANDARD.encode(format!("octocat:{pass}")));
        let clean = Redactor::new(&cfg).redact(&text);
        prop_assert!(!clean.contains(&pass));
    }
}
