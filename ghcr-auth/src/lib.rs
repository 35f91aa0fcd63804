//! GHCR credential validation, registry proof and Secret reassertion for flux-handoff.
//!
//! ```no_run
//! use std::time::Duration;
//! use ghcr_auth::image::ImageRef;
//! use ghcr_auth::plan::SecretTarget;
//! use ghcr_auth::reassert::{Consumers, Reasserter, TargetSpec};
//! use ghcr_auth::registry::{ProverOptions, RegistryProver};
//! use ghcr_auth::source::{SourceProof, SourceRef, prove_source};
//! use ghcr_auth::mask_in_github_actions;
//! use ghcr_auth::credential::CredentialFormat;
//! use ghcr_auth::credential::CredentialSource;
//! use ghcr_auth::credential::DockerConfig;
//!
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! // 1. Read (never from argv) and validate; mask before any output in GitHub Actions.
//! let config = DockerConfig::load(
//!     &CredentialSource::Env("GHCR_TOKEN".into()),
//!     &CredentialFormat::Token { registry: "ghcr.io".into(), username: "ci-bot".into() },
//! )?;
//! mask_in_github_actions(&config, &mut std::io::stdout())?;
//!
//! // 2. Prove it against the registry before touching the cluster.
//! let image: ImageRef = "ghcr.io/acme/app:1.4.2".parse()?;
//! let outcome = RegistryProver::new(ProverOptions::default())?.prove(&config, &image).await?;
//! if !outcome.is_proven() {
//!     eprintln!("registry refused the credential: {outcome}");
//!     std::process::exit(4);
//! }
//!
//! // 3. Reassert it: consumer namespaces first, Flux's own Secret last, each write a CAS.
//! let spec = TargetSpec::new("ghcr-pull", Consumers::Selector("ghcr-pull=enabled".into()))
//!     .with_root(SecretTarget::new("flux-system", "ghcr-auth"));
//! let report = Reasserter::new(client.clone()).reassert(&config, &spec).await?;
//! print!("{report}");
//!
//! // 4. Prove Flux itself pulls with it.
//! let source = SourceRef::oci_repository("flux-system", "apps");
//! let proof = prove_source(&client, &source, &ghcr_auth::reassert::NoGate, Duration::from_secs(120), Duration::from_secs(2)).await?;
//! assert!(matches!(proof, SourceProof::Ready { .. }));
//! # Ok(()) }
//! ```
//!
//! # Flow
//!
//! 1. **Read** the credential from an environment variable, a file or stdin
//!    ([`credential::CredentialSource`]; there is no argv variant) as a Docker config or a bare token, and
//!    **validate** it ([`credential::DockerConfig::parse`]): one `auths` entry per registry, `auth`
//!    consistent with username/password, no repeated keys, no control characters. It lives as
//!    `SecretString`s; Debug shows registries only.
//! 2. **Mask** it in GitHub Actions, and only there ([`mask_in_github_actions`]): the
//!    token, its base64 forms and the whole config, before any other output. [`Redactor`]
//!    scrubs text from elsewhere as defence in depth.
//! 3. **Prove** it against the registry ([`registry::RegistryProver`]): an anonymous manifest
//!    request draws the challenge; Basic auth or the Bearer token exchange; a manifest fetch
//!    that must return 200. 401, 403 and 404 come back as distinct values (GHCR answers 404 for
//!    unauthorised reads). No cluster call happens before this.
//! 4. **Plan** each Secret ([`plan::plan`], pure): create if absent, nothing if it already
//!    holds the credential (normalised comparison), else a JSON Patch that `test`s uid,
//!    resourceVersion and type; refuse Secrets of another type or immutable ones.
//! 5. **Reassert** ([`reassert::Reasserter`]): consumers first, at most
//!    [`reassert::FANOUT_CONCURRENCY`] at a time, the root Secret last and only after every
//!    consumer succeeded; a caller gate (the handoff Lease assertion) before every write; one
//!    CAS write, judged from the server's answer to it. The first failure stops new writes;
//!    writes in flight finish and are reported; the rest are `NotAttempted`. A lost race is
//!    [`reassert::SecretOutcome::Moved`], never an overwrite.
//! 6. **Prove Flux pulls** ([`source::prove_source`]): request a reconcile of the source with a
//!    fresh `requestedAt` nonce and wait for `Ready=True` acknowledging that nonce.
//!
//! A command line or another tool can take these steps as the flux-handoff CLI does:
//! [`credential_input`], [`route_spec`] and [`source_refs`] resolve its flags over its config
//! ([`GhcrSettings`]) before any I/O,
//! [`check_credential`] runs steps 1–3, and [`route::FanoutRun`] steps 5–6 along the one
//! [`fanout::Route`] (the plain route's Secrets, or staged keys and External Secrets too; inside
//! a proven pause, with the Lease as the gate). They report to a [`Progress`] and fail with a [`FlowError`]
//! whose [`ErrorClass`] maps to an exit code.
//!
//! # Guarantees
//!
//! - No credential material reaches Debug, Display, errors, logs, annotations or Events; a leak
//!   test renders every output of a full run and checks every form.
//! - Every cluster write is a compare-and-swap on what was read; expected outcomes are values,
//!   `Err` means something broke.
//!
//! # Features
//!
//! - `registry` (default): the registry proof, [`registry::RegistryProver`] and
//!   [`check_credential`], and with them reqwest over rustls. Without it the crate depends on no
//!   HTTP client and no TLS stack of its own: reading, validating, masking, planning and
//!   reasserting, and the Flux source proof, go through kube alone. The pure parts of
//!   [`registry`] (challenge parsing, status classification) stay.
//!
//! # Caveats
//!
//! With `registry`, install a rustls crypto provider (ring) at process start: the registry
//! client is built without one, like kube.

// Without `registry`, the links above to the registry client render as plain text.
#![cfg_attr(not(feature = "registry"), allow(rustdoc::broken_intra_doc_links))]

pub mod credential;
mod error;
pub mod eso;
pub mod fanout;
mod flow;
pub mod image;
pub mod input;
mod json_keys;
mod mask;
mod outcome;
pub mod plan;
pub mod reassert;
pub mod registry;
pub mod route;
pub mod selector;
pub mod source;
mod spec;
pub mod stage;

// The root holds the flow, its errors, its settings and the masks: each item has one path.
// The parts are reached through their modules (`credential::DockerConfig`, `plan::...`).
pub use error::{BoxError, CredentialProblem, GhcrError};
#[cfg(feature = "registry")]
pub use flow::check as check_credential;
pub use flow::{ErrorClass, FlowError, Progress};
pub use mask::{
    GITHUB_ACTIONS_ENV, MaskCommands, Redactor, is_github_actions, mask_in_github_actions,
};
pub use spec::{
    CredentialInput, GhcrSettings, InputError, credential_input, route_spec, secret_spec,
    source_refs,
};

/// The README's program is compiled as a doc test, so the example a user copies builds.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeProgram;
