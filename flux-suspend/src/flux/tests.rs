use serde_json::{Value, json};

use super::*;

fn obj(api_version: &str, labels: &Value, annotations: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "metadata": { "namespace": "own", "name": "x", "labels": labels, "annotations": annotations },
    })
}

/// A case of [`owner_of`]: its name, the labels, the owner expected.
type OwnerCase = (&'static str, Value, Option<(OwnerKind, NamespacedName)>);
/// A case of the set's exclusion: name, apiVersion, labels, annotations, the set, skipped.
type SetCase = (
    &'static str,
    &'static str,
    Value,
    Value,
    Option<NamespacedName>,
    bool,
);

fn at(namespace: &str, name: &str) -> NamespacedName {
    NamespacedName {
        namespace: namespace.into(),
        name: name.into(),
    }
}

#[test]
fn owner_of_reads_each_appliers_labels_in_order() {
    use OwnerKind::{HelmRelease, Kustomization, ResourceSet};
    let ks = json!({ PARENT_NAME_LABEL: "apps", PARENT_NAMESPACE_LABEL: "flux-system" });
    let hr = json!({ HELM_NAME_LABEL: "autoscaler", HELM_NAMESPACE_LABEL: "kube-system" });
    let rs = json!({ RESOURCESET_NAME_LABEL: "tenants", RESOURCESET_NAMESPACE_LABEL: "ops" });
    let cases: Vec<OwnerCase> = vec![
        ("no labels", json!({}), None),
        ("other labels", json!({ "app": "web" }), None),
        (
            "kustomize",
            ks.clone(),
            Some((Kustomization, at("flux-system", "apps"))),
        ),
        (
            "helm",
            hr.clone(),
            Some((HelmRelease, at("kube-system", "autoscaler"))),
        ),
        (
            "resourceset",
            rs.clone(),
            Some((ResourceSet, at("ops", "tenants"))),
        ),
        (
            "helm, namespace defaulted to the object's",
            json!({ HELM_NAME_LABEL: "ca" }),
            Some((HelmRelease, at("own", "ca"))),
        ),
        (
            "resourceset, namespace defaulted",
            json!({ RESOURCESET_NAME_LABEL: "t" }),
            Some((ResourceSet, at("own", "t"))),
        ),
        (
            "an empty name is no owner",
            json!({ HELM_NAME_LABEL: "" }),
            None,
        ),
        (
            "only a namespace label is no owner",
            json!({ RESOURCESET_NAMESPACE_LABEL: "ops" }),
            None,
        ),
        (
            "kustomize before helm",
            json!({ PARENT_NAME_LABEL: "apps", HELM_NAME_LABEL: "ca" }),
            Some((Kustomization, at("own", "apps"))),
        ),
        (
            "helm before resourceset",
            json!({ HELM_NAME_LABEL: "ca", RESOURCESET_NAME_LABEL: "t" }),
            Some((HelmRelease, at("own", "ca"))),
        ),
        (
            "an empty kustomize name falls through to helm",
            json!({ PARENT_NAME_LABEL: "", HELM_NAME_LABEL: "ca" }),
            Some((HelmRelease, at("own", "ca"))),
        ),
    ];
    for (case, labels, want) in cases {
        let got = owner_of(&obj("apps/v1", &labels, &json!({})));
        let want = want.map(|(kind, at)| FluxOwner { kind, at });
        assert_eq!(got, want, "{case}");
    }
    // parent_of keeps to the Kustomization's labels.
    assert_eq!(parent_of(&obj("apps/v1", &hr, &json!({}))), None);
    assert_eq!(
        parent_of(&obj("apps/v1", &ks, &json!({}))),
        Some(at("flux-system", "apps"))
    );
    assert_eq!(parent_of(&obj("apps/v1", &rs, &json!({}))), None);
}

#[test]
fn a_set_skips_its_generated_object_only_while_the_operator_annotation_reads_disabled() {
    let rs = json!({ RESOURCESET_NAME_LABEL: "tenants", RESOURCESET_NAMESPACE_LABEL: "ops" });
    let ks_api = "kustomize.toolkit.fluxcd.io/v1";
    let op_api = "fluxcd.controlplane.io/v1";
    let off = json!({ OPERATOR_RECONCILE_ANNOTATION: "disabled" });
    let cases: Vec<SetCase> = vec![
        ("not generated", ks_api, json!({}), json!({}), None, true),
        (
            "generated, not frozen",
            ks_api,
            rs.clone(),
            json!({}),
            Some(at("ops", "tenants")),
            false,
        ),
        (
            "generated, frozen",
            ks_api,
            rs.clone(),
            off.clone(),
            Some(at("ops", "tenants")),
            true,
        ),
        (
            "generated, frozen in another case",
            ks_api,
            rs.clone(),
            json!({ OPERATOR_RECONCILE_ANNOTATION: "Disabled" }),
            Some(at("ops", "tenants")),
            true,
        ),
        (
            "generated, enabled",
            "apps/v1",
            rs.clone(),
            json!({ OPERATOR_RECONCILE_ANNOTATION: "enabled" }),
            Some(at("ops", "tenants")),
            false,
        ),
        (
            "the kustomize annotation does not freeze it in a set",
            ks_api,
            rs.clone(),
            json!({ RECONCILE_ANNOTATION: "disabled" }),
            Some(at("ops", "tenants")),
            false,
        ),
        // An operator object's own pause is the same annotation: nothing to add.
        (
            "a generated ResourceSet",
            op_api,
            rs.clone(),
            json!({}),
            None,
            true,
        ),
    ];
    for (case, api, labels, annotations, want, skips) in cases {
        let o = obj(api, &labels, &annotations);
        assert_eq!(excluded_from_set(&o), want, "{case}");
        assert_eq!(set_skips(&o), skips, "{case}");
    }
}
