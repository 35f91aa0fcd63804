//! [`AnnotationKeys`], defined here so that its one public path is the crate root's
//! re-export; its methods stay in `keys.rs`.

/// The keys of the owner, prior and reason annotations under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnnotationKeys {
    /// `<prefix>/owner`: `holder;epoch`.
    pub owner: String,
    /// `<prefix>/prior`: compact JSON recording the fence time and each mark's prior value.
    pub prior: String,
    /// `<prefix>/reason`: free text from the caller.
    pub reason: String,
    /// `<prefix>/parked` on the Lease: the holder that deliberately left it held (a pause
    /// meant to outlive its process), so recovery does not mistake it for a crashed run.
    pub parked: String,
    /// `<prefix>/duration` on the Lease: the holder's own lease duration in whole seconds,
    /// written by the holder with its `leaseDurationSeconds` on every acquire, take-over,
    /// recovery and renewal. Readers that judge the holder's liveness wait for the longer of
    /// the two ([`crate::lease::holder_duration`]), so an edited
    /// `leaseDurationSeconds` can only lengthen a wait, never shorten it.
    pub duration: String,
    /// `<prefix>/fenced`: a label (value `FENCED_LABEL_VALUE`) written and removed in the
    /// same CAS patch as the owner annotation, so fences are listed with a server-side label
    /// selector instead of reading every object.
    pub(crate) fenced_label: String,
    /// `<prefix>/lease` on a fenced object: the Lease (`namespace/name`) the fence was taken
    /// under, written as a mark of the fence, so recovery judges a fence by its own Lease.
    pub lease: String,
    /// `<prefix>/chain` on the Lease: the record of every object its holder has fenced or is
    /// about to fence (`crate::lease::ChainRecord`), written with the Lease's CAS before each fence.
    pub chain: String,
    /// `<prefix>/max-hold` on the Lease and on each fence: how long the holder means to hold
    /// its pause (a human duration such as `2h`), written with the holder's duration on every
    /// write of the Lease and as a mark of each fence (removed on release). Listings name a
    /// pause held longer as overdue ([`crate::recovery::overdue`]); nothing is ever released
    /// because of it.
    pub max_hold: String,
}
