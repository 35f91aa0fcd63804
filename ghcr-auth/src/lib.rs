//! GHCR credential validation, registry proof and Secret reassertion.
