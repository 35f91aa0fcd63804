//! Test support shared by the tier-2/3 tests of ghcr-auth.
// Each test binary uses a different subset of the helpers.
#![allow(dead_code, unused_imports)]

pub mod registry;
pub mod source_model;
pub mod stub;

/// Installs the ring provider (reqwest is built without one) once per process.
pub fn crypto() {
    testkit::install_crypto();
}
