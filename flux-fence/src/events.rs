//! core/v1 Events on fenced objects, so `kubectl describe` shows who fenced and released them.
//! Best effort: a failure (e.g. 403) is logged and never fails the fence.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta};

use crate::{ObjectRef, OwnerValue};

/// Event reason when a fence is taken.
pub(crate) const REASON_FENCED: &str = "HandoffFenced";
/// Event reason when a fence is released.
pub(crate) const REASON_RELEASED: &str = "HandoffReleased";
/// Event reason when a gone holder's fence is released by a recovery (the message names the
/// holder and the evidence).
pub const REASON_RECOVERED: &str = "HandoffRecovered";
/// The reporting component of the Events.
pub const COMPONENT: &str = "flux-handoff";

#[derive(Debug, Clone, Copy)]
pub(crate) enum EventKind {
    Fenced,
    Released,
    Recovered,
}

/// `<verb> <holder;epoch>[: <reason>]`. The reason is caller text, validated to be short and
/// free of control characters; the caller promises it holds no secret.
pub(crate) fn message(verb: &str, owner: &OwnerValue, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("{verb} {owner}: {r}"),
        None => format!("{verb} {owner}"),
    }
}

pub(crate) async fn record(
    client: &Client,
    obj: &ObjectRef,
    uid: &str,
    kind: EventKind,
    message: &str,
) {
    let reason = match kind {
        EventKind::Fenced => REASON_FENCED,
        EventKind::Released => REASON_RELEASED,
        EventKind::Recovered => REASON_RECOVERED,
    };
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", obj.name)),
            namespace: Some(obj.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(obj.resource.api_version.clone()),
            kind: Some(obj.resource.kind.clone()),
            name: Some(obj.name.clone()),
            namespace: Some(obj.namespace.clone()),
            uid: Some(uid.to_string()),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some("Normal".to_string()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        reporting_component: Some(COMPONENT.to_string()),
        reporting_instance: Some(COMPONENT.to_string()),
        source: Some(EventSource {
            component: Some(COMPONENT.to_string()),
            host: None,
        }),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &obj.namespace);
    if let Err(e) = api.create(&crate::api::post_params(), &event).await {
        tracing::warn!(object = %obj, reason, error = %e, "recording Event failed; the fence is unaffected");
    }
}
