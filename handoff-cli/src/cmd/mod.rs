//! One file per subcommand; each returns its exit code or a [`crate::failure::Failure`].

pub mod checkup;
pub mod doctor;
pub mod dry_run;
pub mod fences;
pub mod ghcr;
pub mod pause;
pub mod rbac;
pub mod resume;
pub mod run;
