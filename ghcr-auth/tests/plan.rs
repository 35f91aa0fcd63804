//! Tier 1: the reassertion decision (`plan`) and target ordering, without a cluster.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ghcr_auth::credential::DockerConfig;
use ghcr_auth::credential::{SECRET_KEY, SECRET_TYPE};
use ghcr_auth::plan::{
    Drift, Refusal, SecretPlan, SecretTarget, TargetRole, holds, order_targets, plan,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use proptest::prelude::*;
use secrecy::{ExposeSecret, SecretString};
use serde_json::json;

const TOKEN: &str = "ghp_desiredTOKEN0123456789abcdefghijkl";

fn desired() -> DockerConfig {
    DockerConfig::from_token("ghcr.io", "octocat", SecretString::from(TOKEN)).unwrap()
}

fn target() -> SecretTarget {
    SecretTarget::new("apps", "ghcr-auth")
}

fn secret(type_: &str, data: Option<&str>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("ghcr-auth".into()),
            namespace: Some("apps".into()),
            uid: Some("uid-1".into()),
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        },
        type_: Some(type_.into()),
        data: data
            .map(|d| BTreeMap::from([(SECRET_KEY.to_string(), ByteString(d.as_bytes().to_vec()))])),
        ..Secret::default()
    }
}

fn apply(patch: &json_patch::Patch, s: &Secret) -> Result<Secret, json_patch::PatchError> {
    let mut doc = serde_json::to_value(s).unwrap();
    json_patch::patch(&mut doc, patch)?;
    Ok(serde_json::from_value(doc).unwrap())
}

#[test]
fn absent_secret_is_created_with_the_rendered_config() {
    let SecretPlan::Create(s) = plan(&target(), &desired(), None) else {
        panic!("expected Create")
    };
    assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE));
    assert_eq!(s.metadata.namespace.as_deref(), Some("apps"));
    assert!(holds(&s, &desired()));
}

#[test]
fn semantically_equal_config_in_another_format_is_unchanged() {
    let auth = STANDARD.encode(format!("octocat:{TOKEN}"));
    let pretty =
        format!("{{\n  \"auths\": {{ \"https://ghcr.io\": {{ \"auth\": \"{auth}\" }} }}\n}}");
    let observed = secret(SECRET_TYPE, Some(&pretty));
    assert!(matches!(
        plan(&target(), &desired(), Some(&observed)),
        SecretPlan::Unchanged { resource_version } if resource_version == "42"
    ));
}

#[test]
fn different_credential_is_replaced_by_a_cas_patch_that_yields_the_desired_config() {
    let old =
        DockerConfig::from_token("ghcr.io", "octocat", SecretString::from("old-token")).unwrap();
    let observed = secret(SECRET_TYPE, Some(old.render().expose_secret()));
    let SecretPlan::Replace { drift, patch } = plan(&target(), &desired(), Some(&observed)) else {
        panic!("expected Replace")
    };
    assert_eq!(drift, Drift::DifferentCredential);
    let ops = serde_json::to_value(&patch).unwrap();
    assert_eq!(
        ops[0],
        json!({"op": "test", "path": "/metadata/uid", "value": "uid-1"})
    );
    assert_eq!(
        ops[1],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
    );
    assert_eq!(
        ops[2],
        json!({"op": "test", "path": "/type", "value": SECRET_TYPE})
    );
    let after = apply(&patch, &observed).unwrap();
    assert!(holds(&after, &desired()));
}

#[test]
fn replace_patch_does_not_apply_to_a_moved_or_recreated_secret() {
    let observed = secret(SECRET_TYPE, Some("{}"));
    let SecretPlan::Replace { patch, .. } = plan(&target(), &desired(), Some(&observed)) else {
        panic!("expected Replace")
    };
    let mut moved = observed.clone();
    moved.metadata.resource_version = Some("43".into());
    assert!(apply(&patch, &moved).is_err());
    let mut recreated = observed;
    recreated.metadata.uid = Some("uid-2".into());
    assert!(apply(&patch, &recreated).is_err());
}

#[test]
fn missing_key_and_missing_data_are_drift_and_patch_creates_the_map() {
    let mut observed = secret(SECRET_TYPE, None);
    let SecretPlan::Replace { drift, patch } = plan(&target(), &desired(), Some(&observed)) else {
        panic!("expected Replace")
    };
    assert_eq!(drift, Drift::MissingKey);
    assert!(holds(&apply(&patch, &observed).unwrap(), &desired()));
    observed.data = Some(BTreeMap::from([(
        "other".to_string(),
        ByteString(b"x".to_vec()),
    )]));
    let SecretPlan::Replace { patch, .. } = plan(&target(), &desired(), Some(&observed)) else {
        panic!("expected Replace")
    };
    let after = apply(&patch, &observed).unwrap();
    assert!(holds(&after, &desired()));
    assert_eq!(after.data.unwrap()["other"].0, b"x", "other keys survive");
}

#[test]
fn unparseable_content_is_drift() {
    let observed = secret(SECRET_TYPE, Some("not json"));
    assert!(matches!(
        plan(&target(), &desired(), Some(&observed)),
        SecretPlan::Replace {
            drift: Drift::Unparseable,
            ..
        }
    ));
}

#[test]
fn secret_of_another_type_is_refused() {
    let observed = secret("Opaque", Some("{}"));
    assert_eq!(
        format!("{:?}", plan(&target(), &desired(), Some(&observed))),
        format!(
            "{:?}",
            SecretPlan::Refuse(Refusal::WrongType {
                found: "Opaque".into()
            })
        )
    );
}

#[test]
fn immutable_secret_is_refused() {
    let mut observed = secret(SECRET_TYPE, Some("{}"));
    observed.immutable = Some(true);
    assert!(matches!(
        plan(&target(), &desired(), Some(&observed)),
        SecretPlan::Refuse(Refusal::Immutable)
    ));
}

#[test]
fn debug_of_every_plan_hides_the_secret() {
    let observed = secret(SECRET_TYPE, Some("{}"));
    for p in [
        plan(&target(), &desired(), None),
        plan(&target(), &desired(), Some(&observed)),
    ] {
        let shown = format!("{p:?}");
        assert!(
            !shown.contains(TOKEN) && !shown.contains(&STANDARD.encode(TOKEN)),
            "{shown}"
        );
    }
}

#[test]
fn consumers_come_first_and_root_last_exactly_once() {
    let a = SecretTarget::new("a", "s");
    let b = SecretTarget::new("b", "s");
    let root = SecretTarget::new("flux-system", "s");
    let order = order_targets(
        &[b.clone(), root.clone(), a.clone(), b.clone()],
        Some(&root),
    );
    assert_eq!(
        order,
        vec![
            (TargetRole::Consumer, b),
            (TargetRole::Consumer, a),
            (TargetRole::Root, root)
        ]
    );
}

proptest! {
    #[test]
    fn replace_patch_applies_only_to_the_resource_version_it_read(
        read_rv in 1u64..1_000_000,
        other_rv in 1u64..1_000_000,
    ) {
        let mut observed = secret(SECRET_TYPE, Some("{}"));
        observed.metadata.resource_version = Some(read_rv.to_string());
        let SecretPlan::Replace { patch, .. } = plan(&target(), &desired(), Some(&observed)) else {
            panic!("expected Replace")
        };
        let mut now = observed.clone();
        now.metadata.resource_version = Some(other_rv.to_string());
        prop_assert_eq!(apply(&patch, &now).is_ok(), read_rv == other_rv);
    }
}
