//! Registry proof: the OCI distribution auth flow and a manifest fetch that must return 200.
//!
//! The decisions (which challenge, what a status means) are pure functions here and in
//! [`challenge`]; [`RegistryProver`] only sends the requests they call for.

pub mod challenge;

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

#[cfg(feature = "registry")]
use reqwest::header::{ACCEPT, WWW_AUTHENTICATE};
#[cfg(feature = "registry")]
use reqwest::{Client, RequestBuilder, StatusCode};
#[cfg(feature = "registry")]
use secrecy::ExposeSecret;
use secrecy::SecretString;
#[cfg(feature = "registry")]
use tracing::debug;

#[cfg(feature = "registry")]
use crate::credential::{DockerConfig, RegistryAuth};
#[cfg(feature = "registry")]
use crate::error::GhcrError;
#[cfg(feature = "registry")]
use crate::image::ImageRef;
pub use challenge::{Challenge, parse_challenge};

/// Per-request timeout of registry calls (the overall deadline is the caller's).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Manifest media types asked for: OCI index and manifest, Docker list and manifest.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// Which request of the proof an outcome belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProofStep {
    /// The first, anonymous manifest request that should draw a challenge.
    Challenge,
    /// The token exchange at the Bearer realm.
    Token,
    /// The authenticated manifest fetch.
    Manifest,
}

impl fmt::Display for ProofStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Challenge => "challenge",
            Self::Token => "token exchange",
            Self::Manifest => "manifest",
        })
    }
}

/// What the registry said about the credential. Only [`ProofOutcome::Proven`] proves it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a refused credential is a value: check is_proven"]
#[non_exhaustive]
pub enum ProofOutcome {
    /// The authenticated manifest fetch returned 200.
    Proven {
        /// `Docker-Content-Digest` of the manifest, when the registry sent it.
        digest: Option<String>,
    },
    /// 401: the registry does not accept the credential.
    Unauthorized {
        /// Where.
        step: ProofStep,
    },
    /// 403: the credential is valid but may not read this repository.
    Forbidden {
        /// Where.
        step: ProofStep,
    },
    /// 404 on the manifest: it does not exist, or (GHCR) the credential may not see it.
    NotFound,
    /// The Docker config has no entry for the image's registry.
    NoCredential,
    /// The registry answered the anonymous request without asking for a credential, so the
    /// credential was not exercised.
    NoChallenge {
        /// The status of the anonymous request.
        status: u16,
    },
    /// The registry asked for an auth scheme other than Basic or Bearer.
    UnsupportedChallenge,
    /// The Bearer realm is not HTTPS (or loopback HTTP when allowed): the credential is not sent.
    UntrustedRealm,
    /// The token endpoint answered 200 without a token.
    TokenMalformed,
    /// Any other status.
    Unexpected {
        /// Where.
        step: ProofStep,
        /// The HTTP status.
        status: u16,
    },
}

impl ProofOutcome {
    /// Whether the credential is proven.
    #[must_use]
    pub fn is_proven(&self) -> bool {
        matches!(self, Self::Proven { .. })
    }
}

impl fmt::Display for ProofOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Proven { .. } => f.write_str("proven (manifest 200)"),
            Self::Unauthorized { step } => write!(f, "unauthorized (401 at {step})"),
            Self::Forbidden { step } => write!(f, "forbidden (403 at {step})"),
            Self::NotFound => f.write_str("not found or not visible to this credential (404)"),
            Self::NoCredential => f.write_str("no credential for this registry"),
            Self::NoChallenge { status } => {
                write!(
                    f,
                    "registry did not ask for a credential (anonymous {status})"
                )
            }
            Self::UnsupportedChallenge => f.write_str("unsupported auth scheme"),
            Self::UntrustedRealm => f.write_str("token realm is not HTTPS; credential not sent"),
            Self::TokenMalformed => f.write_str("token endpoint returned no token"),
            Self::Unexpected { step, status } => write!(f, "unexpected status {status} at {step}"),
        }
    }
}

/// Classifies a non-200 status at `step` (pure). `None` for 200.
#[must_use]
pub fn classify(step: ProofStep, status: u16) -> Option<ProofOutcome> {
    Some(match status {
        200 => return None,
        401 => ProofOutcome::Unauthorized { step },
        403 => ProofOutcome::Forbidden { step },
        404 if step == ProofStep::Manifest => ProofOutcome::NotFound,
        _ => ProofOutcome::Unexpected { step, status },
    })
}

/// Whether plain HTTP to `host` may be used: only loopback hosts, and only when allowed.
#[must_use]
pub fn is_loopback_host(host_port: &str) -> bool {
    let host = if let Some(rest) = host_port.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host_port.rsplit_once(':').map_or(host_port, |(h, _)| h)
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Options of a [`RegistryProver`]: [`ProverOptions::default`] and the `with_` methods; it
/// may grow fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProverOptions {
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// Use plain HTTP for loopback registries and realms (local test registries). Never for
    /// any other host.
    pub allow_insecure_loopback: bool,
}

impl Default for ProverOptions {
    fn default() -> Self {
        Self {
            request_timeout: REQUEST_TIMEOUT,
            allow_insecure_loopback: false,
        }
    }
}

impl ProverOptions {
    /// The timeout of each request to a registry or token realm.
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Plain HTTP for loopback registries and realms (local test registries); never for any
    /// other host.
    #[must_use]
    pub fn with_insecure_loopback(mut self, allow: bool) -> Self {
        self.allow_insecure_loopback = allow;
        self
    }
}

/// Proves a credential against registries (feature `registry`).
#[cfg(feature = "registry")]
#[derive(Debug, Clone)]
pub struct RegistryProver {
    http: Client,
    options: ProverOptions,
}

#[cfg(feature = "registry")]
impl RegistryProver {
    /// Builds the HTTP client (rustls; redirects are not followed, so a credential is never
    /// forwarded to another host).
    ///
    /// # Caveats
    /// A rustls crypto provider must be installed for the process first (the ring provider,
    /// as for kube).
    ///
    /// # Errors
    /// [`GhcrError::HttpClient`] when the client cannot be built.
    pub fn new(options: ProverOptions) -> Result<Self, GhcrError> {
        let http = Client::builder()
            .timeout(options.request_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!(
                "flux-handoff-ghcr-auth/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(GhcrError::HttpClient)?;
        Ok(Self { http, options })
    }

    /// Proves `config` can read `image`: an anonymous manifest request draws the challenge,
    /// then Basic auth or the Bearer token exchange, then the authenticated manifest fetch.
    ///
    /// # Guarantees
    /// - Touches no cluster; the credential goes only to the image's registry and the realm it
    ///   names (HTTPS, or loopback HTTP when allowed); redirects are not followed.
    /// - 401, 403 and 404 come back as distinct [`ProofOutcome`] values naming the step.
    /// - No credential or token appears in the outcome, errors or logs.
    ///
    /// # Errors
    /// [`GhcrError::Registry`] when a request fails in transport (no status to judge).
    pub async fn prove(
        &self,
        config: &DockerConfig,
        image: &ImageRef,
    ) -> Result<ProofOutcome, GhcrError> {
        let Some(auth) = config.credential_for(image.registry()) else {
            return Ok(ProofOutcome::NoCredential);
        };
        let url = format!(
            "{}://{}/v2/{}/manifests/{}",
            self.scheme(image.registry()),
            image.registry(),
            image.repository(),
            image.reference()
        );
        let anonymous = self
            .send(
                image,
                ProofStep::Challenge,
                self.http.get(&url).header(ACCEPT, MANIFEST_ACCEPT),
            )
            .await?;
        if anonymous.status() != StatusCode::UNAUTHORIZED {
            return Ok(ProofOutcome::NoChallenge {
                status: anonymous.status().as_u16(),
            });
        }
        let challenge = anonymous
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(parse_challenge)
            .min_by_key(|c| match c {
                Challenge::Bearer { .. } => 0,
                Challenge::Basic => 1,
                Challenge::Unsupported => 2,
            });
        let request = self.http.get(&url).header(ACCEPT, MANIFEST_ACCEPT);
        let request = match challenge {
            Some(Challenge::Basic) => {
                request.basic_auth(auth.username(), Some(auth.password().expose_secret()))
            }
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let scope =
                    scope.unwrap_or_else(|| format!("repository:{}:pull", image.repository()));
                match self
                    .token(image, auth, &realm, service.as_deref(), &scope)
                    .await?
                {
                    Ok(token) => request.bearer_auth(token.expose_secret()),
                    Err(outcome) => return Ok(outcome),
                }
            }
            Some(Challenge::Unsupported) | None => return Ok(ProofOutcome::UnsupportedChallenge),
        };
        let response = self.send(image, ProofStep::Manifest, request).await?;
        let status = response.status().as_u16();
        debug!(image = %image, status, "manifest fetch");
        if let Some(outcome) = classify(ProofStep::Manifest, status) {
            return Ok(outcome);
        }
        let digest = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(ProofOutcome::Proven { digest })
    }

    /// [`RegistryProver::prove`] for each image in turn.
    ///
    /// # Errors
    /// The first transport error.
    pub async fn prove_all(
        &self,
        config: &DockerConfig,
        images: &[ImageRef],
    ) -> Result<Vec<(ImageRef, ProofOutcome)>, GhcrError> {
        let mut out = Vec::with_capacity(images.len());
        for image in images {
            out.push((image.clone(), self.prove(config, image).await?));
        }
        Ok(out)
    }

    async fn token(
        &self,
        image: &ImageRef,
        auth: &RegistryAuth,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<Result<SecretString, ProofOutcome>, GhcrError> {
        let Ok(mut realm_url) = reqwest::Url::parse(realm) else {
            return Ok(Err(ProofOutcome::UntrustedRealm));
        };
        let trusted = realm_url.scheme() == "https"
            || (realm_url.scheme() == "http"
                && self.options.allow_insecure_loopback
                && realm_url.host_str().is_some_and(is_loopback_host));
        if !trusted {
            return Ok(Err(ProofOutcome::UntrustedRealm));
        }
        {
            let mut pairs = realm_url.query_pairs_mut();
            pairs.append_pair("scope", scope);
            if let Some(service) = service {
                pairs.append_pair("service", service);
            }
        }
        let request = self
            .http
            .get(realm_url)
            .basic_auth(auth.username(), Some(auth.password().expose_secret()));
        let response = self.send(image, ProofStep::Token, request).await?;
        let status = response.status().as_u16();
        debug!(image = %image, status, "token exchange");
        if let Some(outcome) = classify(ProofStep::Token, status) {
            return Ok(Err(outcome));
        }
        let body = response
            .bytes()
            .await
            .map_err(|source| GhcrError::Registry {
                step: "token exchange",
                registry: image.registry().to_string(),
                source,
            })?;
        Ok(parse_token(&body).ok_or(ProofOutcome::TokenMalformed))
    }

    async fn send(
        &self,
        image: &ImageRef,
        step: ProofStep,
        request: RequestBuilder,
    ) -> Result<reqwest::Response, GhcrError> {
        request.send().await.map_err(|source| GhcrError::Registry {
            step: match step {
                ProofStep::Challenge => "challenge",
                ProofStep::Token => "token exchange",
                ProofStep::Manifest => "manifest",
            },
            registry: image.registry().to_string(),
            source: source.without_url(),
        })
    }

    fn scheme(&self, registry: &str) -> &'static str {
        if self.options.allow_insecure_loopback && is_loopback_host(registry) {
            "http"
        } else {
            "https"
        }
    }
}

/// Extracts `token` (or `access_token`) from a token endpoint's JSON body (pure).
#[must_use]
pub fn parse_token(body: &[u8]) -> Option<SecretString> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    ["token", "access_token"]
        .iter()
        .find_map(|k| {
            value
                .get(k)
                .and_then(|v| v.as_str())
                .filter(|t| !t.is_empty())
        })
        .map(SecretString::from)
}
