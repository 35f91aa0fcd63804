//! Owner fences: the coordination Lease and owner annotations with compare-and-swap.

mod clock;
pub mod decide;
mod error;
mod holder;
mod keys;
pub mod lease_decide;
mod mark;
pub mod pointer;

pub use clock::{Clock, ManualClock, SystemClock};
pub use decide::{
    AcquireDecision, AcquirePlan, Adoption, Held, Refusal, ReleaseDecision, Unclear, adopt,
    decide_acquire, decide_release, held_from_annotations,
};
pub use error::FenceError;
pub use holder::{Epoch, HOLDER_MAX_LEN, Holder, OwnerValue};
pub use keys::{AnnotationKeys, DEFAULT_PREFIX};
pub use lease_decide::{GoneHolder, LeaseConfig, LossReason};
pub use mark::{Mark, MarkAt, PriorRecord, RecordedMark, Restore};
