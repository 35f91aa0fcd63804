//! Why another party's hold stopped a session before it changed anything: a typed reason, so a
//! caller can tell "someone ran `flux suspend`" from "another handoff holds it" without reading
//! text. The text is the [`Display`](std::fmt::Display) of each variant only.

use std::fmt;
use std::time::Duration;

use flux_fence::ObjectRef;
use flux_fence::lease::RecordedMember;
use flux_fence::mark::MarkAt;
use serde_json::Value;

/// Why a member of the chain, or the Lease, was refused to this session.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Refusal {
    /// Another holder's fence is on the object (`holder`: its owner annotation as read).
    FencedBy {
        /// The owner annotation value found.
        holder: String,
    },
    /// An exclusive mark is already set by someone else: for `/spec/suspend`, a `flux suspend`
    /// (a person's, or another tool's) outside any fence.
    MarkTaken {
        /// The mark, e.g. `field /spec/suspend`.
        at: MarkAt,
        /// The field manager that set it, when the object's managed fields name one.
        field_manager: Option<String>,
    },
    /// This holder's fence is there, but with other marks.
    OursDiffers,
    /// The Lease's chain record names another holder's fences that are still held.
    RecordsHeldFences {
        /// The recorded holder.
        holder: String,
        /// Its fences still held.
        held: Vec<ObjectRef>,
        /// Recorded members of a kind this version cannot read (each may still be held).
        unreadable: Vec<RecordedMember>,
        /// The Lease, `namespace/name`.
        lease: String,
    },
    /// The Lease's chain record could not be read or checked.
    RecordUnclear(String),
    /// The Lease is held by a parked pause (a person's `pause`), which lasts until it is
    /// resumed: never expired, never for `fences recover`, never waited for.
    LeaseParked {
        /// The parked pause's holder.
        holder: String,
        /// The Lease, `namespace/name`, when it is not the default one.
        lease: Option<String>,
        /// What is known of the pause: its reason, since when.
        pause: Box<ParkedPause>,
    },
    /// The Lease was still held after waiting the whole `--wait-lease` budget.
    LeaseStillHeld {
        /// The live holder.
        holder: String,
        /// Since when, `YYYY-MM-DDTHH:MM:SSZ`, when the Lease says.
        since: Option<String>,
        /// How long this session waited.
        waited: Duration,
    },
    /// Another party changed the Lease on every acquire attempt.
    LeaseContended,
    /// The Lease's holder was not proved finished, so nothing of it is recovered.
    NotProvedFinished {
        /// The holder.
        holder: String,
        /// Why not, one line.
        why: String,
    },
    /// Taking the Lease over from a finished holder lost a race: it may be live.
    TakeoverLost {
        /// The holder it was to be taken from.
        gone: String,
        /// Why, one line.
        why: String,
    },
    /// Recovery answered something this session does not act on.
    UnexpectedRecovery,
}

/// What a refusal by a parked pause knows of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParkedPause {
    /// The reason recorded on its fences (`pause --reason`), on one line.
    pub reason: Option<String>,
    /// Since when it holds the Lease, `YYYY-MM-DDTHH:MM:SSZ`, when known.
    pub since: Option<String>,
    /// How long that was when refused (by this machine's clock).
    pub age: Option<Duration>,
}

impl Refusal {
    /// The refusal for `refusal` of the fence's decision core, with the field manager of the
    /// refused mark taken from `read`'s managed fields when it is there.
    #[must_use]
    pub fn of_fence(refusal: flux_fence::decide::Refusal, read: Option<&Value>) -> Self {
        use flux_fence::decide::Refusal as R;
        match refusal {
            R::Owned { holder } => Self::FencedBy { holder },
            R::AlreadyMarked { at } => {
                let field_manager = read.and_then(|r| field_manager(r, &at));
                Self::MarkTaken { at, field_manager }
            }
            _ => Self::OursDiffers,
        }
    }

    /// Whether another holder's fence (rather than a foreign mark or the Lease) refused it.
    #[must_use]
    pub fn is_fence(&self) -> bool {
        matches!(self, Self::FencedBy { .. })
    }

    /// Whether the Lease (its holder, record, or a race on it) refused it.
    #[must_use]
    pub fn is_lease(&self) -> bool {
        matches!(
            self,
            Self::RecordsHeldFences { .. }
                | Self::RecordUnclear(_)
                | Self::LeaseParked { .. }
                | Self::LeaseStillHeld { .. }
                | Self::LeaseContended
                | Self::NotProvedFinished { .. }
                | Self::TakeoverLost { .. }
                | Self::UnexpectedRecovery
        )
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FencedBy { holder } => write!(f, "fenced by {holder}"),
            Self::MarkTaken { at, .. } => write!(f, "{at} already set by someone else"),
            Self::OursDiffers => f.write_str("already fenced by this holder with other marks"),
            Self::RecordsHeldFences {
                holder,
                held,
                unreadable,
                lease,
            } => write!(
                f,
                "it records fences of {holder} that are still held ({}) under Lease {lease}, \
                 released once that holder is provably gone",
                held.iter()
                    .map(flux_fence::recovery::short_ref)
                    .chain(unreadable.iter().map(ToString::to_string))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::RecordUnclear(why) => f.write_str(why),
            Self::LeaseParked { holder, pause, .. } => {
                write!(f, "it is held by a parked pause of {holder}")?;
                if let Some(s) = &pause.since {
                    write!(f, " since {s}")?;
                }
                if let Some(a) = pause.age {
                    write!(f, " ({} ago)", flux_fence::recovery::age(a))?;
                }
                match &pause.reason {
                    Some(r) => write!(f, ", reason: {r}")?,
                    None => f.write_str(", no reason recorded")?,
                }
                f.write_str("; a deliberate pause lasts until it is resumed (not waited for)")
            }
            Self::LeaseStillHeld {
                holder,
                since,
                waited,
            } => write!(
                f,
                "held by {holder}{}; still held after waiting {} (--wait-lease)",
                since
                    .as_ref()
                    .map(|s| format!(" since {s}"))
                    .unwrap_or_default(),
                humantime::format_duration(*waited)
            ),
            Self::LeaseContended => {
                f.write_str("another party changed it on every attempt; try again")
            }
            Self::NotProvedFinished { holder, why } => {
                write!(f, "held by {holder}, not proved finished: {why}")
            }
            Self::TakeoverLost { gone, why } => write!(
                f,
                "not taken over from {gone}: {why}; it may be live, so nothing was recovered"
            ),
            Self::UnexpectedRecovery => {
                f.write_str("unexpected recovery outcome; nothing more was done")
            }
        }
    }
}

/// The field manager whose managed fields own `at` on `read` (the last one listed, when several
/// do). Only a field mark has one; an annotation mark answers `None` too when nobody owns it.
#[must_use]
pub fn field_manager(read: &Value, at: &MarkAt) -> Option<String> {
    let pointer = at.pointer();
    let mut path = String::from("/fieldsV1");
    for part in pointer.split('/').skip(1) {
        // Already JSON-Pointer escaped; the managed-fields key is `f:` and the unescaped name,
        // which escapes the same way.
        path.push_str("/f:");
        path.push_str(part);
    }
    read.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .rev()
        .find(|m| m.pointer(&path).is_some())
        .and_then(|m| m.get("manager")?.as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text(r: &Refusal) -> String {
        r.to_string()
    }

    #[test]
    fn refusal_display_keeps_every_line() {
        let field = MarkAt::Field("/spec/suspend".into());
        let cases = [
            (
                Refusal::FencedBy {
                    holder: "gh1.1-abc".into(),
                },
                "fenced by gh1.1-abc",
            ),
            (
                Refusal::MarkTaken {
                    at: field.clone(),
                    field_manager: Some("flux".into()),
                },
                "field /spec/suspend already set by someone else",
            ),
            (
                Refusal::OursDiffers,
                "already fenced by this holder with other marks",
            ),
            (
                Refusal::RecordsHeldFences {
                    holder: "h".into(),
                    held: vec![
                        crate::object::kustomization("a", "b"),
                        crate::object::helm_release("a", "c"),
                    ],
                    unreadable: vec![flux_fence::lease::RecordedMember::of(
                        &flux_fence::ObjectRef::new(
                            kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                                "example.com",
                                "v1",
                                "Widget",
                            )),
                            "a",
                            "d",
                        ),
                    )],
                    lease: "flux-system/flux-handoff".into(),
                },
                "it records fences of h that are still held (ks/a/b, hr/a/c, Widget a/d) under \
                 Lease flux-system/flux-handoff, released once that holder is provably gone",
            ),
            (Refusal::RecordUnclear("bad record".into()), "bad record"),
            (
                Refusal::LeaseStillHeld {
                    holder: "h".into(),
                    since: Some("2026-12-02T04:00:00Z".into()),
                    waited: Duration::from_secs(90),
                },
                "held by h since 2026-12-02T04:00:00Z; still held after waiting 1m 30s \
                 (--wait-lease)",
            ),
            (
                Refusal::LeaseStillHeld {
                    holder: "h".into(),
                    since: None,
                    waited: Duration::from_secs(5),
                },
                "held by h; still held after waiting 5s (--wait-lease)",
            ),
            (
                Refusal::LeaseContended,
                "another party changed it on every attempt; try again",
            ),
            (
                Refusal::NotProvedFinished {
                    holder: "h".into(),
                    why: "no evidence".into(),
                },
                "held by h, not proved finished: no evidence",
            ),
            (
                Refusal::TakeoverLost {
                    gone: "h".into(),
                    why: "409".into(),
                },
                "not taken over from h: 409; it may be live, so nothing was recovered",
            ),
            (
                Refusal::UnexpectedRecovery,
                "unexpected recovery outcome; nothing more was done",
            ),
        ];
        for (r, want) in cases {
            assert_eq!(text(&r), want, "{r:?}");
        }
    }

    #[test]
    fn refusal_by_a_parked_pause_names_it_and_never_calls_it_expired() {
        let cases = [
            (
                Refusal::LeaseParked {
                    holder: "h".into(),
                    lease: Some("t/l".into()),
                    pause: Box::new(ParkedPause {
                        reason: Some("maint".into()),
                        since: Some("2026-12-02T04:00:00Z".into()),
                        age: Some(Duration::from_secs(185)),
                    }),
                },
                "it is held by a parked pause of h since 2026-12-02T04:00:00Z (3m05s ago), reason: \
                 maint; a deliberate pause lasts until it is resumed (not waited for)",
            ),
            (
                Refusal::LeaseParked {
                    holder: "h".into(),
                    lease: None,
                    pause: Box::default(),
                },
                "it is held by a parked pause of h, no reason recorded; a deliberate pause lasts until \
                 it is resumed (not waited for)",
            ),
        ];
        for (r, want) in cases {
            assert_eq!(text(&r), want, "{r:?}");
            assert!(
                !want.contains("expired") && !want.contains("recover"),
                "{want}"
            );
        }
    }

    #[test]
    fn refusal_of_fence_tells_a_foreign_suspend_from_a_holder() {
        use flux_fence::decide::Refusal as R;
        let read = json!({"metadata": {"managedFields": [
            {"manager": "kubectl", "fieldsV1": {"f:metadata": {"f:labels": {}}}},
            {"manager": "flux", "fieldsV1": {"f:spec": {"f:suspend": {}}}},
            {"manager": "kustomize-controller", "fieldsV1": {"f:status": {}}},
        ]}});
        let at = MarkAt::Field("/spec/suspend".into());
        assert_eq!(
            Refusal::of_fence(R::AlreadyMarked { at: at.clone() }, Some(&read)),
            Refusal::MarkTaken {
                at: at.clone(),
                field_manager: Some("flux".into())
            }
        );
        assert_eq!(
            Refusal::of_fence(R::AlreadyMarked { at: at.clone() }, None),
            Refusal::MarkTaken {
                at,
                field_manager: None
            }
        );
        let fenced = Refusal::of_fence(R::Owned { holder: "h".into() }, Some(&read));
        assert!(fenced.is_fence() && !fenced.is_lease(), "{fenced:?}");
        assert!(Refusal::LeaseContended.is_lease());
    }

    #[test]
    fn refusal_field_manager_reads_managed_fields() {
        let at = MarkAt::Field("/spec/suspend".into());
        let cases = [
            (json!({}), None),
            (json!({"metadata": {"managedFields": []}}), None),
            (
                json!({"metadata": {"managedFields": [
                    {"manager": "a", "fieldsV1": {"f:spec": {"f:interval": {}}}},
                ]}}),
                None,
            ),
            (
                json!({"metadata": {"managedFields": [
                    {"manager": "a", "fieldsV1": {"f:spec": {"f:suspend": {}}}},
                    {"manager": "b", "fieldsV1": {"f:spec": {"f:suspend": {}}}},
                ]}}),
                Some("b"),
            ),
        ];
        for (read, want) in cases {
            assert_eq!(field_manager(&read, &at).as_deref(), want, "{read}");
        }
    }
}
