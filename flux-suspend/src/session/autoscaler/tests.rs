use serde_json::json;

use super::*;

fn hpa(name: &str, target: Value) -> Value {
    let mut v = json!({ "metadata": { "name": name }, "spec": { "minReplicas": 1 } });
    v["spec"]["scaleTargetRef"] = target;
    v
}

fn keda(name: &str, target: Value, annotations: Value) -> Value {
    let mut v = json!({ "metadata": { "name": name }, "spec": {} });
    v["metadata"]["annotations"] = annotations;
    v["spec"]["scaleTargetRef"] = target;
    v
}

fn dep(name: &str) -> Value {
    json!({ "apiVersion": "apps/v1", "kind": "Deployment", "name": name })
}

#[test]
fn autoscaler_targets_only_the_gated_deployment() {
    let table = [
        (hpa("a", dep("ca")), Kind::Hpa, true),
        (hpa("a", dep("other")), Kind::Hpa, false),
        // A StatefulSet of the same name is another object.
        (
            hpa(
                "a",
                json!({ "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ca" }),
            ),
            Kind::Hpa,
            false,
        ),
        // An HPA must name the kind; KEDA defaults it to Deployment (apps/v1).
        (hpa("a", json!({ "name": "ca" })), Kind::Hpa, false),
        (
            keda("k", json!({ "name": "ca" }), json!({})),
            Kind::Keda,
            true,
        ),
        (
            keda(
                "k",
                json!({ "kind": "Deployment", "name": "ca" }),
                json!({}),
            ),
            Kind::Keda,
            true,
        ),
        // Another group's Deployment kind (a custom resource) is not ours.
        (
            keda(
                "k",
                json!({ "apiVersion": "example.com/v1", "kind": "Deployment", "name": "ca" }),
                json!({}),
            ),
            Kind::Keda,
            false,
        ),
        (
            json!({ "metadata": { "name": "x" }, "spec": {} }),
            Kind::Keda,
            false,
        ),
    ];
    for (obj, kind, want) in table {
        assert_eq!(targets(&obj, kind, "ca"), want, "{obj}");
    }
}

#[test]
fn autoscaler_keda_paused_at_the_gate_count_holds_it() {
    let at = |a: Value| keda("k", json!({ "name": "ca" }), a);
    let table = [
        (json!({}), 0, false),
        (json!({ KEDA_PAUSED_REPLICAS: "0" }), 0, true),
        (json!({ KEDA_PAUSED_REPLICAS: " 0 " }), 0, true),
        // Paused at another count: KEDA would scale the gate to it.
        (json!({ KEDA_PAUSED_REPLICAS: "2" }), 0, false),
        (json!({ KEDA_PAUSED_REPLICAS: "two" }), 0, false),
        (json!({ KEDA_PAUSED: "true" }), 0, true),
        (json!({ KEDA_PAUSED: "false" }), 0, false),
        // A count wins over `paused`.
        (
            json!({ KEDA_PAUSED: "true", KEDA_PAUSED_REPLICAS: "3" }),
            0,
            false,
        ),
        (json!({ KEDA_PAUSED_REPLICAS: "3" }), 3, true),
    ];
    for (annotations, want, holds) in table {
        assert_eq!(
            keda_holds(&at(annotations.clone()), want),
            holds,
            "{annotations}"
        );
    }
}

#[test]
fn autoscaler_verdict_names_each_one_and_a_forbidden_list() {
    let none = Listing::Items(vec![]);
    let h = Listing::Items(vec![hpa("web-hpa", dep("ca")), hpa("x", dep("other"))]);
    let k = Listing::Items(vec![keda("web-keda", json!({ "name": "ca" }), json!({}))]);
    let paused = Listing::Items(vec![keda(
        "web-keda",
        json!({ "name": "ca" }),
        json!({ KEDA_PAUSED_REPLICAS: "0" }),
    )]);
    let forbidden = Listing::Forbidden("cannot list".into());
    let found = |v: &[(Kind, &str)]| {
        Verdict::Found(v.iter().map(|(k, n)| (*k, (*n).to_string())).collect())
    };
    let table = [
        (&none, &none, Verdict::Clear),
        (&none, &Listing::NotServed, Verdict::Clear),
        (&h, &Listing::NotServed, found(&[(Kind::Hpa, "web-hpa")])),
        (&none, &k, found(&[(Kind::Keda, "web-keda")])),
        (
            &h,
            &k,
            found(&[(Kind::Hpa, "web-hpa"), (Kind::Keda, "web-keda")]),
        ),
        (&none, &paused, Verdict::Clear),
        (
            &forbidden,
            &k,
            Verdict::Forbidden {
                kind: Kind::Hpa,
                message: "cannot list".into(),
            },
        ),
        (
            &h,
            &forbidden,
            Verdict::Forbidden {
                kind: Kind::Keda,
                message: "cannot list".into(),
            },
        ),
    ];
    for (i, (hpas, scaled, want)) in table.into_iter().enumerate() {
        assert_eq!(decide("ca", 0, hpas, scaled), want, "case {i}");
    }
}

#[test]
fn autoscaler_refusal_is_one_line_with_the_fix() {
    let gate = crate::object::deployment("kube-system", "ca");
    assert_eq!(refusal_line(&gate, 0, &Verdict::Clear), None);
    let both = Verdict::Found(vec![
        (Kind::Hpa, "ca-hpa".into()),
        (Kind::Keda, "ca-keda".into()),
    ]);
    let line = refusal_line(&gate, 0, &both).unwrap();
    assert!(!line.contains('\n'), "{line}");
    for want in [
        "Deployment kube-system/ca is gated at 0 but HorizontalPodAutoscaler kube-system/ca-hpa",
        "HPAScaleToZero",
        "remove it or change its scaleTargetRef",
        "kubectl -n kube-system annotate scaledobject ca-keda autoscaling.keda.sh/paused-replicas=0",
        "--allow-autoscaler",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
    let forbidden = Verdict::Forbidden {
        kind: Kind::Keda,
        message: "no".into(),
    };
    let line = refusal_line(&gate, 0, &forbidden).unwrap();
    assert!(
        line.contains("list scaledobjects.keda.sh in kube-system is forbidden (no)"),
        "{line}"
    );
}
