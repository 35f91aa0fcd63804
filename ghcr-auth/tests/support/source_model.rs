//! The `OCIRepository` source-controller model lives in testkit (shared with handoff-cli and the
//! demo); it pulls with its own HTTP client, independent of this crate's prover.

pub use flux_model::source_model::{SourceModel, oci_repository, oci_repository_resource};
