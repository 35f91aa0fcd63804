//! The application layer of flux-handoff: what a command-line tool (the `flux-handoff` CLI, or
//! another program that embeds a handoff) needs around the session, and what a library
//! embedder does not.
//!
//! - [`complete`]: the flux CLI's plugin completion (`flux handoff <TAB>`) for a clap command.
//! - [`config`]: the `flux-handoff.toml` file, read bounded, unknown keys refused by line.
//! - [`settings`]: flags over a config file's tables over the defaults, resolved into a
//!   [`flux_suspend::SessionOptions`] before any request.
//! - [`names`]: `[kind/][namespace/]name` as a user types it on a command line.
//! - [`next`]: the command to run next after a failure, and flux-handoff's spelling of the
//!   commands the core libraries name.
//! - [`kubeconfig`]: a client from a kubeconfig, read bounded, with timeouts on every request
//!   and errors that never quote the file.
//! - [`doctor`]: read-only checks of a cluster before a handoff (RBAC, controller gates).
//! - [`notify`]: the session's events as Flux events, posted to notification-controller.
//! - [`render`]: YAML, text safe in a GitHub Actions log, and progress lines.
//! - [`rights`]: the least-privilege RBAC a handoff needs, as manifests.
//! - [`github`]: GitHub Actions workflow commands and the step summary.
//! - [`fences`]: recovery of what a gone holder left fenced, configured for Flux's kinds.
//! - [`select`]: targets chosen by label selector or `--all`, in `dependsOn` order.
//!
//! The core crates (`flux-fence`, `flux-suspend`, `ghcr-auth`) do not depend on this one.
//!
//! ```
//! use handoff_app::names::parse_object;
//!
//! let apps = parse_object("ks/flux-system/apps", "default").unwrap();
//! assert_eq!(apps.to_string(), "Kustomization flux-system/apps");
//! ```

// Without `notify`, the link above to the events sink renders as plain text.
#![cfg_attr(not(feature = "notify"), allow(rustdoc::broken_intra_doc_links))]

pub mod complete;
pub mod config;
pub mod doctor;
pub mod fences;
pub mod github;
pub mod kubeconfig;
pub mod names;
pub mod next;
#[cfg(feature = "notify")]
pub mod notify;
pub mod render;
pub mod rights;
pub mod select;
pub mod settings;
