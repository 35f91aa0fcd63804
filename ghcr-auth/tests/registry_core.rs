//! Tier 1: the pure parts of the registry proof (challenges, statuses, image references).

use ghcr_auth::image::ImageRef;
use ghcr_auth::registry::{
    Challenge, ProofOutcome, ProofStep, classify, is_loopback_host, parse_challenge, parse_token,
};
use proptest::prelude::*;
use secrecy::ExposeSecret;

#[test]
fn ghcr_bearer_challenge_is_parsed_with_realm_service_and_scope() {
    let h =
        r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:org/app:pull""#;
    assert_eq!(
        parse_challenge(h),
        Some(Challenge::Bearer {
            realm: "https://ghcr.io/token".into(),
            service: Some("ghcr.io".into()),
            scope: Some("repository:org/app:pull".into()),
        })
    );
}

#[test]
fn challenge_parsing_handles_case_spaces_tokens_and_escapes() {
    let h = r#"bearer  Realm = "https://r.example/t\"x" , service=reg.example"#;
    assert_eq!(
        parse_challenge(h),
        Some(Challenge::Bearer {
            realm: "https://r.example/t\"x".into(),
            service: Some("reg.example".into()),
            scope: None,
        })
    );
    assert_eq!(
        parse_challenge(r#"Basic realm="registry""#),
        Some(Challenge::Basic)
    );
    assert_eq!(parse_challenge("Negotiate"), Some(Challenge::Unsupported));
}

#[test]
fn bearer_without_realm_and_empty_headers_are_not_challenges() {
    assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
    assert_eq!(parse_challenge("   "), None);
    assert_eq!(parse_challenge(r#"Bearer realm="unterminated"#), None);
}

#[test]
fn statuses_401_403_404_are_distinct_outcomes() {
    assert_eq!(classify(ProofStep::Manifest, 200), None);
    assert_eq!(
        classify(ProofStep::Token, 401),
        Some(ProofOutcome::Unauthorized {
            step: ProofStep::Token
        })
    );
    assert_eq!(
        classify(ProofStep::Manifest, 403),
        Some(ProofOutcome::Forbidden {
            step: ProofStep::Manifest
        })
    );
    assert_eq!(
        classify(ProofStep::Manifest, 404),
        Some(ProofOutcome::NotFound)
    );
    assert_eq!(
        classify(ProofStep::Token, 404),
        Some(ProofOutcome::Unexpected {
            step: ProofStep::Token,
            status: 404
        })
    );
    assert_eq!(
        classify(ProofStep::Manifest, 500),
        Some(ProofOutcome::Unexpected {
            step: ProofStep::Manifest,
            status: 500
        })
    );
}

#[test]
fn token_is_read_from_token_or_access_token() {
    assert_eq!(
        parse_token(br#"{"token":"a"}"#).unwrap().expose_secret(),
        "a"
    );
    assert_eq!(
        parse_token(br#"{"access_token":"b"}"#)
            .unwrap()
            .expose_secret(),
        "b"
    );
    assert!(parse_token(br#"{"token":""}"#).is_none());
    assert!(parse_token(b"not json").is_none());
}

#[test]
fn only_loopback_hosts_count_as_loopback() {
    for h in [
        "127.0.0.1:5000",
        "localhost:5000",
        "localhost",
        "[::1]:5000",
        "127.9.9.9",
    ] {
        assert!(is_loopback_host(h), "{h}");
    }
    for h in [
        "ghcr.io",
        "10.0.0.1:5000",
        "192.168.1.1",
        "localhost.evil.example",
        "[::2]:1",
    ] {
        assert!(!is_loopback_host(h), "{h}");
    }
}

#[test]
fn image_references_parse_registry_repository_and_reference() {
    let i: ImageRef = "ghcr.io/org/team/app:1.2.3".parse().unwrap();
    assert_eq!(
        (i.registry(), i.repository(), i.reference()),
        ("ghcr.io", "org/team/app", "1.2.3")
    );
    let i: ImageRef = "oci://127.0.0.1:5000/app".parse().unwrap();
    assert_eq!(
        (i.registry(), i.repository(), i.reference()),
        ("127.0.0.1:5000", "app", "latest")
    );
    let digest = format!("sha256:{}", "a".repeat(64));
    let i: ImageRef = format!("ghcr.io/org/app@{digest}").parse().unwrap();
    assert_eq!(i.reference(), digest);
    assert_eq!(i.to_string(), format!("ghcr.io/org/app@{digest}"));
}

#[test]
fn image_references_without_registry_or_with_bad_parts_are_refused() {
    for bad in [
        "org/app:1",
        "app",
        "ghcr.io/Org/app:1",
        "ghcr.io/org/app:-x",
        "ghcr.io/org/app@sha256:zz",
        "ghcr.io/",
    ] {
        assert!(bad.parse::<ImageRef>().is_err(), "{bad}");
    }
}

proptest! {
    #[test]
    fn challenge_parser_never_panics(s in "\\PC{0,200}") {
        let _ = parse_challenge(&s);
    }

    #[test]
    fn quoted_realms_round_trip(realm in "https://[a-z]{1,10}\\.example/[a-z\"\\\\]{0,10}") {
        let quoted = realm.replace('\\', "\\\\").replace('"', "\\\"");
        let h = format!("Bearer realm=\"{quoted}\",service=\"s\"");
        prop_assert_eq!(
            parse_challenge(&h),
            Some(Challenge::Bearer { realm, service: Some("s".into()), scope: None })
        );
    }

    #[test]
    fn image_display_parses_back_equal(
        repo in "[a-z0-9]{1,8}(/[a-z0-9]{1,8}){0,2}",
        tag in "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,20}",
    ) {
        let i: ImageRef = format!("ghcr.io/{repo}:{tag}").parse().unwrap();
        let again: ImageRef = i.to_string().parse().unwrap();
        prop_assert_eq!(i, again);
    }
}
