//! GHCR credential validation, registry proof and Secret reassertion.
//!
//! (crate docs are completed below)

pub mod credential;
pub mod error;
pub mod image;
pub mod input;
mod json_keys;
pub mod mask;
pub mod plan;
pub mod reassert;
pub mod registry;
pub mod source;

pub use credential::{CredentialFormat, CredentialSource, DockerConfig, RegistryAuth};
pub use error::{CredentialProblem, GhcrError};
pub use mask::{MaskCommands, Redactor};
