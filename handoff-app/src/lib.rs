//! The application layer of flux-handoff: what a command-line tool (the `flux-handoff` CLI, or
//! another program that embeds a handoff) needs around the session, and what a library
//! embedder does not.
//!
//! - [`settings`]: flags over a config file's tables over the defaults, resolved into a
//!   [`flux_suspend::SessionOptions`] before any request.
//! - [`names`]: `[kind/][namespace/]name` as a user types it on a command line.
//! - [`kubeconfig`]: a client from a kubeconfig, read bounded, with timeouts on every request
//!   and errors that never quote the file.
//! - [`doctor`]: read-only checks of a cluster before a handoff (RBAC, controller gates).
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

pub mod doctor;
pub mod fences;
pub mod github;
pub mod kubeconfig;
pub mod names;
pub mod rights;
pub mod select;
pub mod settings;
