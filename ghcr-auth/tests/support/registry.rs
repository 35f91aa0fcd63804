//! The local registry lives in testkit (shared with handoff-cli and the demo).

pub use testkit::registry::LocalRegistry;
