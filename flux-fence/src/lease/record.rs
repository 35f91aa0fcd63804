//! The chain record's side of the handle: what a held Lease records of the members its holder
//! fences ([`crate::lease_record`]), stamped on every renewal.

use super::LeaseHandle;
use crate::lease_record::RecordedMember;
use crate::{FenceError, ObjectRef};

impl LeaseHandle {
    /// Records `obj` on the Lease under `key` and asserts the Lease: `Ok` means the server
    /// recorded us as holder at our epoch, with `obj` in the record, at a moment after this
    /// call began. Call it before every fence write ([`crate::Fencer`] does).
    ///
    /// # Errors
    /// As [`LeaseHandle::assert`], and [`FenceError::ChainRecorded`] when the Lease carries a
    /// record this holder may not replace.
    pub async fn record(&self, key: &str, obj: &ObjectRef) -> Result<(), FenceError> {
        let m = RecordedMember::of(obj);
        let added = self.pending().add(key, &m);
        let asserted = self.assert().await;
        if added && matches!(asserted, Err(FenceError::ChainRecorded { .. })) {
            // Never recorded, so never fenced: later renewals must not keep failing on it.
            self.pending().forget(&m);
        }
        asserted
    }

    /// Says that every member recorded under `owner` (a record this holder took over, e.g. in
    /// a recovery, or its own) is released or provably not fenced: the release of the Lease
    /// may then clear that record. No I/O.
    pub fn settle_record(&self, key: &str, owner: &str) {
        self.pending().settle(key, owner);
    }

    /// The members this holder recorded, in order.
    #[must_use]
    pub fn recorded(&self) -> Vec<RecordedMember> {
        self.pending().members()
    }
}
