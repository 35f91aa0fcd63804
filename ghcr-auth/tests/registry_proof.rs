//! Tier 3: the registry proof against a real local OCI registry (`docker-registry` with
//! htpasswd, Basic challenge) and a scripted loopback registry speaking the Bearer token flow.

mod support;

use ghcr_auth::credential::DockerConfig;
use ghcr_auth::image::ImageRef;
use ghcr_auth::registry::{ProofOutcome, ProofStep, ProverOptions, RegistryProver};
use secrecy::SecretString;
use support::registry::LocalRegistry;
use support::stub::{Received, Script, StubRegistry};

const USER: &str = "robot";
const PASS: &str = "registry-pass-0123456789";

fn prover() -> RegistryProver {
    support::crypto();
    RegistryProver::new(ProverOptions::default().with_insecure_loopback(true)).unwrap()
}

fn cfg(host: &str, user: &str, pass: &str) -> DockerConfig {
    DockerConfig::from_token(host, user, SecretString::from(pass)).unwrap()
}

fn image(host: &str, path: &str) -> ImageRef {
    format!("{host}/{path}").parse().unwrap()
}

#[tokio::test]
async fn valid_credential_fetches_the_manifest_from_the_real_registry() {
    support::crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    let digest = reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&reg.host, USER, PASS),
            &image(&reg.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ProofOutcome::Proven {
            digest: Some(digest)
        }
    );
}

#[tokio::test]
async fn wrong_password_is_unauthorized_at_the_manifest_step() {
    support::crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&reg.host, USER, "wrong-password"),
            &image(&reg.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ProofOutcome::Unauthorized {
            step: ProofStep::Manifest
        }
    );
}

#[tokio::test]
async fn missing_tag_is_not_found_not_unauthorized() {
    support::crypto();
    let reg = LocalRegistry::start(&[(USER, PASS)]).await.unwrap();
    reg.push_image(USER, PASS, "team/app", "v1").await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&reg.host, USER, PASS),
            &image(&reg.host, "team/app:v2"),
        )
        .await
        .unwrap();
    assert_eq!(outcome, ProofOutcome::NotFound);
}

#[tokio::test]
async fn config_without_an_entry_for_the_registry_sends_nothing() {
    let stub = StubRegistry::start(script(200, 200)).await.unwrap();
    let outcome = prover()
        .prove(
            &cfg("ghcr.io", USER, PASS),
            &image(&stub.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert_eq!(outcome, ProofOutcome::NoCredential);
    assert!(stub.seen().is_empty());
}

fn script(token_status: u16, manifest_status: u16) -> Script {
    Script {
        user: USER.into(),
        pass: PASS.into(),
        token_status,
        manifest_status,
        realm: None,
    }
}

#[tokio::test]
async fn bearer_flow_exchanges_the_credential_for_a_token_then_fetches_the_manifest() {
    let stub = StubRegistry::start(script(200, 200)).await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&stub.host, USER, PASS),
            &image(&stub.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert!(outcome.is_proven(), "{outcome:?}");
    let seen = stub.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        seen[0],
        Received {
            path: "/v2/team/app/manifests/v1".into(),
            auth: None
        }
    );
    assert!(
        seen[1]
            .path
            .starts_with("/token?scope=repository%3Ateam%2Fapp%3Apull&service=stub")
    );
    assert_eq!(seen[1].auth.as_deref(), Some("Basic"));
    assert_eq!(
        seen[2].auth.as_deref(),
        Some("Bearer"),
        "the password itself is not sent to the manifest endpoint"
    );
}

#[tokio::test]
async fn token_endpoint_rejections_are_reported_by_status_and_step() {
    let stub = StubRegistry::start(script(200, 200)).await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&stub.host, USER, "bad"),
            &image(&stub.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ProofOutcome::Unauthorized {
            step: ProofStep::Token
        }
    );

    let stub = StubRegistry::start(script(403, 200)).await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&stub.host, USER, PASS),
            &image(&stub.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ProofOutcome::Forbidden {
            step: ProofStep::Token
        }
    );
}

#[tokio::test]
async fn manifest_403_and_404_are_distinct_outcomes() {
    let stub = StubRegistry::start(script(200, 403)).await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&stub.host, USER, PASS),
            &image(&stub.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        ProofOutcome::Forbidden {
            step: ProofStep::Manifest
        }
    );
    let stub = StubRegistry::start(script(200, 404)).await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&stub.host, USER, PASS),
            &image(&stub.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert_eq!(outcome, ProofOutcome::NotFound);
}

#[tokio::test]
async fn plain_http_realm_on_another_host_is_refused_before_the_credential_is_sent() {
    let mut s = script(200, 200);
    s.realm = Some("http://auth.example.invalid/token".into());
    let stub = StubRegistry::start(s).await.unwrap();
    let outcome = prover()
        .prove(
            &cfg(&stub.host, USER, PASS),
            &image(&stub.host, "team/app:v1"),
        )
        .await
        .unwrap();
    assert_eq!(outcome, ProofOutcome::UntrustedRealm);
    assert!(stub.seen().iter().all(|s| s.auth.is_none()));
}

#[tokio::test]
async fn loopback_http_is_not_used_unless_allowed() {
    support::crypto();
    let strict = RegistryProver::new(ProverOptions::default()).unwrap();
    let stub = StubRegistry::start(script(200, 200)).await.unwrap();
    // Without the option the prover speaks HTTPS to the stub, which cannot answer it.
    let result = strict
        .prove(
            &cfg(&stub.host, USER, PASS),
            &image(&stub.host, "team/app:v1"),
        )
        .await;
    assert!(result.is_err(), "{result:?}");
    assert!(stub.seen().iter().all(|s| s.auth.is_none()));
}
