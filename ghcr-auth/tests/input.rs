//! Tier 1: reading credentials from files and the environment (never argv).

use ghcr_auth::GhcrError;
use ghcr_auth::credential::CredentialFormat;
use ghcr_auth::credential::CredentialSource;
use ghcr_auth::credential::DockerConfig;
use secrecy::ExposeSecret;

fn temp_file(content: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("ghcr-auth-input-{}", testkit::random_suffix(8)));
    std::fs::write(&path, content).unwrap();
    path
}

#[test]
fn token_file_with_trailing_newline_becomes_a_one_registry_config() {
    let path = temp_file("ghp_tokenFromFile0123456789\n");
    let cfg = DockerConfig::load(
        &CredentialSource::File(path.clone()),
        &CredentialFormat::Token {
            registry: "ghcr.io".into(),
            username: "octocat".into(),
        },
    )
    .unwrap();
    std::fs::remove_file(path).unwrap();
    let auth = cfg.credential_for("ghcr.io").unwrap();
    assert_eq!(
        auth.password().expose_secret(),
        "ghp_tokenFromFile0123456789"
    );
}

#[test]
fn docker_config_file_is_validated_on_load() {
    let path = temp_file(r#"{"auths":{"ghcr.io":{"username":"u"}}}"#);
    let err = DockerConfig::load(
        &CredentialSource::File(path.clone()),
        &CredentialFormat::DockerConfig,
    )
    .unwrap_err();
    std::fs::remove_file(path).unwrap();
    assert!(matches!(err, GhcrError::InvalidCredential(_)), "{err:?}");
    assert_eq!(err.to_string(), "validating the credential");
}

#[test]
fn unset_environment_variable_is_reported_as_missing_by_name() {
    let err = CredentialSource::Env("GHCR_AUTH_TEST_VARIABLE_THAT_IS_NEVER_SET".into())
        .read()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "reading the credential from environment variable GHCR_AUTH_TEST_VARIABLE_THAT_IS_NEVER_SET: it is missing or empty"
    );
}

#[test]
fn blank_or_unreadable_files_are_errors_naming_the_file_only() {
    let path = temp_file("  \n");
    let err = CredentialSource::File(path.clone()).read().unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(err, GhcrError::CredentialMissing { .. }));
    let err = CredentialSource::File(path.clone()).read().unwrap_err();
    assert!(matches!(err, GhcrError::ReadCredential { .. }));
    assert!(err.to_string().contains(&path.display().to_string()));
    assert!(!err.to_string().ends_with('.'));
}
