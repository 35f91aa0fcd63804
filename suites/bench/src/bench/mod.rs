//! The scenarios of `flux-bench` (run by `cargo xtask bench`), one module each, plus the
//! statistics, the shared setup and the fan-out chart.
//!
//! Every scenario talks to the API server through a fresh [`fault_proxy::Proxy`], so the
//! request counts are exactly the requests of the thing measured; the controller model and the
//! untimed setup use the admin client directly and are not counted.

pub mod chain;
pub mod fanout;
pub mod fluxcli;
pub mod footprint;
pub mod handoff;
pub mod real;
pub mod retire;
pub mod setup;
pub mod shell;
pub mod stats;
pub mod svg;

use std::path::PathBuf;
use std::time::Duration;

/// How the bench runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Repetitions of each scenario.
    pub reps: usize,
    /// Poll interval of every bounded wait (library and shell alike).
    pub interval: Duration,
    /// Namespace counts of the fan-out scenario.
    pub fanout_sizes: Vec<usize>,
    /// The release `flux-handoff` binary, for the footprint scenario.
    pub handoff_bin: Option<PathBuf>,
    /// The `flux` CLI, for its peer scenario.
    pub flux_bin: Option<PathBuf>,
    /// Model phase duration (each of fetch, build, apply, health).
    pub phase: Duration,
    /// How long the model keeps an old controller Pod `Terminating` after a rollout restart
    /// (Flux's manifests give kustomize-controller `terminationGracePeriodSeconds: 10`).
    pub termination_grace: Duration,
}

/// Milliseconds of a duration, as a float.
#[must_use]
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
