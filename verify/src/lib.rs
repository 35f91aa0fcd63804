//! Model check of the handoff protocol, with the production decision functions.
//!
//! A model checker explores every interleaving of the actors of a handoff to a stated bound:
//! two handoff runs (distinct holders) that can crash at any step and lose a write's response
//! before or after the server applied it; `resume --holder` and `fences recover` as a person or
//! another job runs them; one kustomize-controller with serial executions per object, stale
//! reads, the parent applying the child unless `reconcile: disabled`, acknowledgement of a
//! nonce by the next execution and a restart that kills executions; a person writing an
//! annotation, `requestedAt` or `spec.suspend` at any time; and an API server that is
//! linearizable per object, with resourceVersions, uids, RFC 6902 `test` semantics (the real
//! `json-patch` crate applies every patch) and Lease updates on the read resourceVersion.
//!
//! Every decision is the one production makes, called as a function: `decide_acquire`,
//! `lost_write`, `decide_release`, `held_from_annotations`, the Lease decisions (`acquire`, `renew`
//! with `is_stale`, `release`, `park`, `recover`, `resume`), `retire::acknowledged`, the
//! stable-pause `Judge` and the step order of `pause_steps`. Model state stays small and
//! hashable (interned strings, small counters); the JSON objects and `Lease`s those functions
//! take are rendered from it for each step ([`world`]).
//!
//! # Why stateright
//!
//! [stateright](https://docs.rs/stateright) is a maintained, pure-Rust explicit-state model
//! checker: the model is ordinary Rust, so it calls the production crates directly (a TLA+ or
//! P model would re-implement the decisions and check the re-implementation). It explores
//! breadth-first on several threads with a fingerprint set, returns a shortest counterexample
//! path per property, and builds offline with this workspace's toolchain (Rust 1.95). Its
//! `always` properties are exact on the explored graph; liveness is stated here as an `always`
//! property over the final state of a bounded, fair schedule (see `docs/verify.md`), because its
//! `eventually` check can miss a counterexample when a path revisits a state.
//!
//! # Bounds and reductions
//!
//! [`Bounds`] gives each fault kind a budget and each trace a total fault budget; the full
//! bound holds every actor at once with one fault per trace. Sound reductions
//! (resourceVersion renaming, dead variables, merged local steps, pruned tool no-ops; see the
//! `reduce` module and `docs/verify.md`) are applied in `next_state`, so the breadth-first
//! search keeps shortest counterexamples; `tests/reduce.rs` checks them against the unreduced
//! model.
//!
//! # Mutants
//!
//! [`Mutant`] lists known-bad variants of the decisions; `cargo xtask verify` checks that each
//! yields a counterexample, which proves the checker can fail.

mod env;
mod model;
mod props;
mod reduce;
mod run;
mod spec;
mod state;
mod tools;
mod trace;
pub mod world;

use std::time::{Duration, Instant};

use stateright::{Checker, Model};

pub use spec::{Action, Bounds, Handoff, Mutant};
pub use state::State;

/// The result of one exploration.
#[derive(Debug)]
pub struct Outcome {
    /// Unique states explored.
    pub states: usize,
    /// Longest path explored.
    pub depth: usize,
    pub elapsed: Duration,
    /// Properties violated, each with its counterexample (readable lines, one per step).
    pub violations: Vec<(&'static str, Vec<String>)>,
}

/// The names of the properties, in order.
#[must_use]
pub fn property_names() -> Vec<&'static str> {
    props::all().iter().map(|p| p.name).collect()
}

/// Explores the model to `bounds` with `threads` worker threads. With a mutant, stops at the
/// first counterexample.
#[must_use]
pub fn check(bounds: Bounds, mutant: Option<Mutant>, threads: usize) -> Outcome {
    let start = Instant::now();
    let model = Handoff::new(bounds, mutant);
    let mut builder = model.clone().checker().threads(threads);
    if let Some(max) = std::env::var("VERIFY_MAX_STATES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        // Development only: stop early to measure a bound's rate.
        builder = builder.target_state_count(max);
    }
    if mutant.is_some() {
        builder = builder.finish_when(stateright::HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs();
    let progress = std::env::var_os("VERIFY_PROGRESS").is_some();
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(200));
        if progress && start.elapsed().as_millis() % 10_000 < 200 {
            eprintln!(
                "verify: {} states, depth {} after {:.0}s",
                checker.unique_state_count(),
                checker.max_depth(),
                start.elapsed().as_secs_f64()
            );
        }
    }
    let checker = checker.join();
    let found = checker.discoveries();
    let never_reached = model
        .properties()
        .into_iter()
        .filter(|p| !p.expectation.discovery_is_failure() && !found.contains_key(p.name))
        .map(|p| (p.name, vec!["no explored state satisfies it".to_string()]))
        .collect::<Vec<_>>();
    let mut violations: Vec<(&'static str, Vec<String>)> = found
        .into_iter()
        .filter(|(name, _)| {
            model
                .properties()
                .iter()
                .any(|p| p.name == *name && p.expectation.discovery_is_failure())
        })
        .map(|(name, path)| {
            // Each state comes with the action taken from it (none for the last).
            let lines = path
                .into_vec()
                .into_iter()
                .filter_map(|(state, action)| model.format_step(&state, action?))
                .collect();
            (name, lines)
        })
        .chain(
            if mutant.is_some() {
                None
            } else {
                Some(never_reached)
            }
            .into_iter()
            .flatten(),
        )
        .collect();
    violations.sort_by_key(|(n, _)| *n);
    Outcome {
        states: checker.unique_state_count(),
        depth: checker.max_depth(),
        elapsed: start.elapsed(),
        violations,
    }
}
