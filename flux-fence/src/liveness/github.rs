//! The GitHub Actions liveness source: one `GET` of the holder's exact run attempt,
//! `{api}/repos/{owner}/{repo}/actions/runs/{run_id}/attempts/{attempt_number}`.
//!
//! The token is held as a [`SecretString`]: it goes only into the `Authorization` header of
//! that request (redirects are not followed, so it never reaches another host) and never into
//! an error, a log line, a verdict or `Debug`.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use reqwest::Client;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use secrecy::{ExposeSecret, SecretString};

use super::judge::{CiRun, judge_attempt};
use super::{LivenessSource, Verdict, VerdictFuture};

/// `GITHUB_API_URL` when unset.
pub(crate) const DEFAULT_API_URL: &str = "https://api.github.com";

/// Where and how to ask GitHub.
#[derive(Clone)]
#[non_exhaustive]
pub struct GithubConfig {
    /// The REST API base URL (`GITHUB_API_URL`; GitHub Enterprise: `https://HOST/api/v3`).
    pub(crate) api_url: String,
    /// `owner/name` (`GITHUB_REPOSITORY`): a holder's run is looked up in this repository
    /// only.
    pub repository: String,
    /// A token with `actions: read` on the repository.
    pub token: SecretString,
    /// How long one request may take (default 10 s).
    pub timeout: Duration,
}

impl fmt::Debug for GithubConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GithubConfig")
            .field("api_url", &self.api_url)
            .field("repository", &self.repository)
            .field("token", &"[redacted]")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl GithubConfig {
    /// A configuration; checks `repository` is `owner/name` and `api_url` is https (plain
    /// http only to a loopback host, for tests).
    ///
    /// # Errors
    /// One line naming the bad value (never the token).
    pub fn new(api_url: &str, repository: &str, token: SecretString) -> Result<Self, String> {
        let part_ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        match repository.split_once('/') {
            Some((o, r)) if part_ok(o) && part_ok(r) => {}
            _ => {
                return Err(format!(
                    "GITHUB_REPOSITORY {repository:?} is not owner/name"
                ));
            }
        }
        let api_url = api_url.trim_end_matches('/');
        let loopback = api_url.strip_prefix("http://").is_some_and(|rest| {
            let host = rest.split('/').next().unwrap_or_default();
            let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
            matches!(host, "127.0.0.1" | "localhost" | "[::1]")
        });
        if !(api_url.starts_with("https://") || loopback) {
            return Err(format!(
                "GITHUB_API_URL {api_url:?} is not an https URL (plain http only to loopback: \
                 the token must not cross a network in clear)"
            ));
        }
        if token.expose_secret().trim().is_empty() {
            return Err("the GitHub token is empty".into());
        }
        Ok(Self {
            api_url: api_url.to_string(),
            repository: repository.to_string(),
            token,
            timeout: Duration::from_secs(10),
        })
    }

    /// From the environment of a GitHub Actions job: `GITHUB_API_URL` (default
    /// `DEFAULT_API_URL`), `GITHUB_REPOSITORY`, and the token read from `token_file` when
    /// given, else [`super::TOKEN_ENV`], else `GITHUB_TOKEN`.
    ///
    /// # Errors
    /// One line naming what is missing (never the token).
    pub(crate) fn from_env(token_file: Option<&Path>) -> Result<Self, String> {
        let token = match token_file {
            Some(p) => std::fs::read_to_string(p)
                .map(|t| SecretString::from(t.trim().to_string()))
                .map_err(|e| format!("GitHub token file {}: {e}", p.display()))?,
            None => std::env::var(super::TOKEN_ENV)
                .or_else(|_| std::env::var("GITHUB_TOKEN"))
                .map(SecretString::from)
                .map_err(|_| {
                    "GITHUB_TOKEN is not set (or give a token file); the token needs \
                     `actions: read`"
                        .to_string()
                })?,
        };
        let repository = std::env::var("GITHUB_REPOSITORY")
            .map_err(|_| "GITHUB_REPOSITORY (owner/name) is not set".to_string())?;
        let api_url =
            std::env::var("GITHUB_API_URL").unwrap_or_else(|_| DEFAULT_API_URL.to_string());
        Self::new(&api_url, &repository, token)
    }

    /// Sets the per-request timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Asks the GitHub REST API about a holder's exact run attempt.
#[derive(Debug, Clone)]
pub struct GithubRuns {
    http: Client,
    config: GithubConfig,
}

impl GithubRuns {
    /// Builds the HTTP client (rustls; redirects are not followed).
    ///
    /// # Caveats
    /// A rustls crypto provider must be installed for the process first (ring, as for kube).
    ///
    /// # Errors
    /// One line when the client cannot be built.
    pub fn new(config: GithubConfig) -> Result<Self, String> {
        let http = Client::builder()
            .timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("flux-handoff-fence/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Self { http, config })
    }

    /// The repository asked about.
    #[must_use]
    pub fn repository(&self) -> &str {
        &self.config.repository
    }

    async fn ask(&self, holder: &str) -> Verdict {
        let Some(run) = CiRun::from_holder(holder) else {
            return Verdict::refused(format!(
                "holder {holder} carries no GitHub run reference (gh<run>.<attempt>); nothing \
                 outside the cluster can prove it gone: recover by hand"
            ));
        };
        let repo = &self.config.repository;
        let url = format!(
            "{}/repos/{repo}/actions/runs/{}/attempts/{}",
            self.config.api_url, run.run_id, run.attempt
        );
        let Ok(mut auth) =
            HeaderValue::from_str(&format!("Bearer {}", self.config.token.expose_secret()))
        else {
            return Verdict::refused("the GitHub token is not a valid header value");
        };
        auth.set_sensitive(true);
        let which = format!(
            "GitHub run {} attempt {} in {repo}",
            run.run_id, run.attempt
        );
        let sent = self
            .http
            .get(&url)
            .header(ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header(AUTHORIZATION, auth)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Verdict::refused(format!(
                    "{which}: no answer within {}s; try again later",
                    self.config.timeout.as_secs()
                ));
            }
            Err(e) => {
                return Verdict::refused(format!(
                    "{which} could not be asked: {}; try again later",
                    e.without_url()
                ));
            }
        };
        let status = response.status().as_u16();
        match response.bytes().await {
            Ok(body) => judge_attempt(run, repo, status, &body),
            Err(e) if e.is_timeout() => Verdict::refused(format!(
                "{which}: no full answer within {}s; try again later",
                self.config.timeout.as_secs()
            )),
            Err(e) => Verdict::refused(format!(
                "{which}: the answer was cut short: {}; try again later",
                e.without_url()
            )),
        }
    }
}

impl LivenessSource for GithubRuns {
    fn check<'a>(&'a self, holder: &'a str) -> VerdictFuture<'a> {
        Box::pin(self.ask(holder))
    }
}
