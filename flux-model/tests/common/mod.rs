//! What the model's test files share.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

/// A merge patch of `name` by a writer of its own (`test-writer`), as a person or another
/// tool would make it; the object as the server holds it afterwards.
pub async fn patch(api: &Api<DynamicObject>, name: &str, body: Value) -> DynamicObject {
    let pp = PatchParams {
        field_manager: Some("test-writer".into()),
        ..PatchParams::default()
    };
    api.patch(name, &pp, &Patch::Merge(body)).await.unwrap()
}
