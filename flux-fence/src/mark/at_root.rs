//! [`Mark`], defined here so that its one public path is the crate root's re-export; its
//! methods stay in `mark.rs`.

use serde_json::Value;

use super::{MarkAt, Restore};

/// A change the fence makes and records so it can undo it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Mark {
    /// Where it writes.
    pub at: MarkAt,
    /// The value it writes (a JSON string for annotations).
    pub value: Value,
    /// How the release undoes it.
    pub restore: Restore,
    /// Refuse the acquire when the object already holds this value (someone else set it),
    /// e.g. a Flux object already suspended by another hand.
    pub exclusive: bool,
    /// Write it only where the object holds no value there: a value someone else set is left
    /// as it is, and this mark is then not part of the fence (not recorded, not released).
    /// E.g. `fluxcd.controlplane.io/suspendedBy`.
    pub if_absent: bool,
}
