//! One handoff event as the JSON a Flux controller posts to notification-controller: pure, so
//! the exact document is table-tested.
//!
//! The shape is `Event` of fluxcd/pkg `apis/event/v1beta1` (`event.go`: `involvedObject`,
//! `severity` info|error, `timestamp`, `message`, `reason`, `metadata`,
//! `reportingController`, `reportingInstance`), in the field order Go's `encoding/json` writes
//! it; the controllers' recorder (fluxcd/pkg `runtime/events/recorder.go`,
//! `AnnotatedEventf`) fills it the same way and POSTs it as `application/json`.
//!
//! What notification-controller keeps (v1.9.3, `internal/server/event_server.go`
//! `cleanupMetadata` and `event_handlers.go` `combineEventMetadata`): only metadata keys
//! prefixed with `event.toolkit.fluxcd.io/` or with the involved object's API group, the
//! prefix stripped before a provider sees them. So the holder and the reason go out as
//! `<group>/holder` and `<group>/reason` (`kustomize.toolkit.fluxcd.io/holder`), and a
//! `generic` provider receives `holder` and `reason`. An `Alert` matches on the involved
//! object's kind, namespace and name (and labels, read from the server by that group), and on
//! the severity: `eventSeverity: info` takes both severities, `error` only the failures.
//! Duplicates (same object and message) are dropped for `--rate-limit-interval` (5 min): every
//! message here names the holder, so two runs never collide.

use std::collections::BTreeMap;
use std::time::SystemTime;

use flux_fence::ObjectRef;
use serde::Serialize;

/// `reportingController` of every event (the `gotk-component` header a `generic` provider
/// forwards).
pub const REPORTING_CONTROLLER: &str = "flux-handoff";

/// Flux's bound on `message` (`+kubebuilder:validation:MaxLength=39000`).
pub const MAX_MESSAGE: usize = 39_000;

/// What happened to the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The pause of a target is proven.
    Paused,
    /// An object was released.
    Resumed,
    /// Someone broke the pause while the work ran.
    PauseBroken,
    /// The cleanup could not release the object.
    CleanupFailed,
    /// A pause is held past its max-hold (`fences --overdue`); nothing was resumed.
    Overdue,
}

impl Kind {
    /// The event's `reason` (`UpperCamelCase`, as the controllers' reasons).
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::Paused => "HandoffPaused",
            Self::Resumed => "HandoffResumed",
            Self::PauseBroken => "HandoffPauseBroken",
            Self::CleanupFailed => "HandoffCleanupFailed",
            Self::Overdue => "HandoffOverdue",
        }
    }

    /// `info` for what went as planned, `error` for what an owner must look at.
    #[must_use]
    pub fn severity(self) -> &'static str {
        match self {
            Self::Paused | Self::Resumed => "info",
            Self::PauseBroken | Self::CleanupFailed | Self::Overdue => "error",
        }
    }
}

/// `involvedObject`: a `corev1.ObjectReference` with the fields we know (Go omits the empty
/// ones: `uid`, `resourceVersion`, `fieldPath`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Involved {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub api_version: String,
}

impl Involved {
    /// The involved object of an event about `o`: a Kustomization or a `HelmRelease`, in the
    /// API version the session used; `None` for anything else (a gate, a Flux Operator
    /// object), which notification-controller's Alerts do not select.
    #[must_use]
    pub fn of(o: &ObjectRef) -> Option<Self> {
        let r = &o.resource;
        let flux = matches!(
            (r.kind.as_str(), r.group.as_str()),
            ("Kustomization", "kustomize.toolkit.fluxcd.io")
                | ("HelmRelease", "helm.toolkit.fluxcd.io")
        );
        flux.then(|| Self {
            kind: r.kind.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
            api_version: r.api_version.clone(),
        })
    }

    /// The API group (`kustomize.toolkit.fluxcd.io`), the metadata keys' prefix.
    #[must_use]
    pub fn group(&self) -> &str {
        self.api_version
            .split_once('/')
            .map_or("", |(group, _)| group)
    }
}

/// One event to send: what, about which object, by which run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice<'a> {
    pub kind: Kind,
    pub object: &'a Involved,
    /// The session's holder (also the `reportingInstance`: the run that reports).
    pub holder: &'a str,
    /// `--reason`, when given.
    pub reason: Option<&'a str>,
    /// What broke, or why the cleanup failed (one line, no credential).
    pub detail: Option<&'a str>,
}

impl Notice<'_> {
    /// The human line: `paused by H for REASON`, `resumed by H`, `pause by H broken: WHAT`,
    /// `cleanup by H failed: WHY`, `pause by H for REASON overdue: HOW LONG`.
    #[must_use]
    pub fn message(&self) -> String {
        let h = self.holder;
        let detail = self.detail.unwrap_or("no detail");
        let mut line = match (self.kind, self.reason) {
            (Kind::Paused, Some(r)) => format!("paused by {h} for {r}"),
            (Kind::Paused, None) => format!("paused by {h}"),
            (Kind::Resumed, _) => format!("resumed by {h}"),
            (Kind::PauseBroken, _) => format!("pause by {h} broken: {detail}"),
            (Kind::CleanupFailed, _) => format!("cleanup by {h} failed: {detail}"),
            (Kind::Overdue, Some(r)) => format!("pause by {h} for {r} overdue: {detail}"),
            (Kind::Overdue, None) => format!("pause by {h} overdue: {detail}"),
        };
        if line.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        line
    }

    /// The event document, stamped `at` (RFC 3339, whole seconds, as `metav1.Time`).
    #[must_use]
    pub fn to_json(&self, at: SystemTime) -> String {
        let group = self.object.group();
        let mut metadata = BTreeMap::new();
        metadata.insert(format!("{group}/holder"), self.holder.to_string());
        if let Some(r) = self.reason {
            metadata.insert(format!("{group}/reason"), r.to_string());
        }
        let doc = Document {
            involved_object: self.object,
            severity: self.kind.severity(),
            timestamp: timestamp(at),
            message: self.message(),
            reason: self.kind.reason(),
            metadata,
            reporting_controller: REPORTING_CONTROLLER,
            reporting_instance: self.holder,
        };
        serde_json::to_string(&doc).unwrap_or_default()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    involved_object: &'a Involved,
    severity: &'static str,
    timestamp: String,
    message: String,
    reason: &'static str,
    metadata: BTreeMap<String, String>,
    reporting_controller: &'static str,
    reporting_instance: &'a str,
}

/// `2026-12-02T03:04:05Z`.
fn timestamp(at: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(at)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use flux_suspend::object;

    use super::*;

    fn ks() -> Involved {
        Involved::of(&object::kustomization("apps", "child")).unwrap()
    }

    #[test]
    fn flux_events_the_involved_object_is_a_flux_object_of_the_session() {
        type Want = Option<(&'static str, &'static str, &'static str, &'static str)>;
        let table: [(ObjectRef, Want); 5] = [
            (
                object::kustomization("flux-system", "apps"),
                Some((
                    "Kustomization",
                    "flux-system",
                    "apps",
                    "kustomize.toolkit.fluxcd.io/v1",
                )),
            ),
            (
                object::helm_release("web", "podinfo"),
                Some(("HelmRelease", "web", "podinfo", "helm.toolkit.fluxcd.io/v2")),
            ),
            (object::deployment("web", "autoscaler"), None),
            (object::resource_set("web", "tenants"), None),
            (object::flux_instance("flux-system", "flux"), None),
        ];
        for (o, want) in table {
            let got = Involved::of(&o);
            let got = got.as_ref().map(|o| {
                (
                    o.kind.as_str(),
                    o.namespace.as_str(),
                    o.name.as_str(),
                    o.api_version.as_str(),
                )
            });
            assert_eq!(got, want, "{o}");
        }
        assert_eq!(ks().group(), "kustomize.toolkit.fluxcd.io");
    }

    #[test]
    fn flux_events_each_kind_has_its_message_reason_and_severity() {
        let o = ks();
        let n = |kind, reason, detail| Notice {
            kind,
            object: &o,
            holder: "gh7.1-abc",
            reason,
            detail,
        };
        let table = [
            (
                n(Kind::Paused, Some("rotate the pull secret"), None),
                "paused by gh7.1-abc for rotate the pull secret",
                "HandoffPaused",
                "info",
            ),
            (
                n(Kind::Paused, None, None),
                "paused by gh7.1-abc",
                "HandoffPaused",
                "info",
            ),
            (
                n(Kind::Resumed, Some("x"), None),
                "resumed by gh7.1-abc",
                "HandoffResumed",
                "info",
            ),
            (
                n(
                    Kind::PauseBroken,
                    None,
                    Some("spec.suspend was set to false by field manager \"kubectl-patch\""),
                ),
                "pause by gh7.1-abc broken: spec.suspend was set to false by field manager \
                 \"kubectl-patch\"",
                "HandoffPauseBroken",
                "error",
            ),
            (
                n(
                    Kind::CleanupFailed,
                    None,
                    Some("the API server did not answer"),
                ),
                "cleanup by gh7.1-abc failed: the API server did not answer",
                "HandoffCleanupFailed",
                "error",
            ),
            (
                n(
                    Kind::Overdue,
                    Some("rotate"),
                    Some("held 2h05m, max-hold 2h; fenced: ks/apps/child"),
                ),
                "pause by gh7.1-abc for rotate overdue: held 2h05m, max-hold 2h; fenced: \
                 ks/apps/child",
                "HandoffOverdue",
                "error",
            ),
        ];
        for (notice, message, reason, severity) in table {
            assert_eq!(notice.message(), message);
            assert_eq!(notice.kind.reason(), reason);
            assert_eq!(notice.kind.severity(), severity);
        }
    }

    #[test]
    fn flux_events_the_paused_event_is_the_exact_flux_document() {
        let o = ks();
        let notice = Notice {
            kind: Kind::Paused,
            object: &o,
            holder: "gh7.1-abc",
            reason: Some("rotate the pull secret"),
            detail: None,
        };
        let at = UNIX_EPOCH + Duration::from_secs(1_796_180_645);
        assert_eq!(
            notice.to_json(at),
            concat!(
                r#"{"involvedObject":{"kind":"Kustomization","namespace":"apps","name":"child","#,
                r#""apiVersion":"kustomize.toolkit.fluxcd.io/v1"},"severity":"info","#,
                r#""timestamp":"2026-12-02T03:04:05Z","#,
                r#""message":"paused by gh7.1-abc for rotate the pull secret","#,
                r#""reason":"HandoffPaused","metadata":{"#,
                r#""kustomize.toolkit.fluxcd.io/holder":"gh7.1-abc","#,
                r#""kustomize.toolkit.fluxcd.io/reason":"rotate the pull secret"},"#,
                r#""reportingController":"flux-handoff","reportingInstance":"gh7.1-abc"}"#
            )
        );
    }

    #[test]
    fn flux_events_without_a_reason_only_the_holder_is_metadata() {
        let o = Involved::of(&object::helm_release("web", "podinfo")).unwrap();
        let notice = Notice {
            kind: Kind::Resumed,
            object: &o,
            holder: "h1",
            reason: None,
            detail: None,
        };
        let doc: serde_json::Value =
            serde_json::from_str(&notice.to_json(UNIX_EPOCH + Duration::from_millis(1500)))
                .unwrap();
        assert_eq!(
            doc["metadata"],
            serde_json::json!({ "helm.toolkit.fluxcd.io/holder": "h1" })
        );
        assert_eq!(doc["timestamp"], "1970-01-01T00:00:01Z");
        assert_eq!(doc["severity"], "info");
        assert_eq!(doc["reason"], "HandoffResumed");
    }

    #[test]
    fn flux_events_a_message_is_cut_at_fluxs_bound_on_a_char_boundary() {
        let o = ks();
        let long = "é".repeat(MAX_MESSAGE);
        let notice = Notice {
            kind: Kind::CleanupFailed,
            object: &o,
            holder: "h1",
            reason: None,
            detail: Some(&long),
        };
        let m = notice.message();
        assert!(
            m.len() <= MAX_MESSAGE && m.len() > MAX_MESSAGE - 2,
            "{}",
            m.len()
        );
        assert!(m.starts_with("cleanup by h1 failed: é"));
    }
}
