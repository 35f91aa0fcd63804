//! Controllers installed by Flux Operator. A `FluxInstance` owns the Flux controllers'
//! Deployments and reconciles them back to what it renders: a `--retire restart` stamps the
//! Pod template with a restart annotation, the operator strips it again, and a second rollout
//! follows. `doctor` says so when the controller carries the labels Flux Operator puts on what
//! a `FluxInstance` installs (`app.kubernetes.io/managed-by: flux-operator` with
//! `fluxcd.controlplane.io/name` and `/namespace`, the labels its own `trace` command reads to
//! name the `FluxInstance`: `controlplaneio-fluxcd/flux-operator`, `cmd/cli/trace.go`).

use serde_json::Value;

use super::Finding;
use flux_suspend::Strategy;
use flux_suspend::io::ControllerRef;

/// The label value Flux Operator writes on what a `FluxInstance` installs.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "flux-operator");
/// The `FluxInstance`'s name and namespace, on the same objects.
const INSTANCE_NAME: &str = "fluxcd.controlplane.io/name";
const INSTANCE_NAMESPACE: &str = "fluxcd.controlplane.io/namespace";

/// The `FluxInstance` (`namespace/name`, or `?` for a part not labelled) that manages the
/// Deployment as read, or `None` when Flux Operator does not manage it. Pure.
#[must_use]
pub fn managed_by_operator(deployment: &Value) -> Option<String> {
    let labels = deployment.pointer("/metadata/labels")?;
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    if label(MANAGED_BY.0) != Some(MANAGED_BY.1) {
        return None;
    }
    Some(format!(
        "{}/{}",
        label(INSTANCE_NAMESPACE).unwrap_or("?"),
        label(INSTANCE_NAME).unwrap_or("?")
    ))
}

/// What `doctor` says about controller `c` (Deployment as read) under `strategy`: nothing when
/// Flux Operator does not manage it; a failure with `--retire restart`, which the operator
/// reverts; a note otherwise.
#[must_use]
pub fn finding(c: &ControllerRef, deployment: &Value, strategy: Strategy) -> Option<Finding> {
    let instance = managed_by_operator(deployment)?;
    let check = format!("controller {c} is managed by Flux Operator (FluxInstance {instance})");
    Some(if strategy == Strategy::Restart {
        Finding::fail(
            check,
            "--retire restart is reverted there: the operator strips the restart annotation and \
             rolls the controller out a second time; use --retire ack (the default)",
        )
    } else {
        Finding::ok(format!(
            "{check}: --retire restart would be reverted there; {} needs no change to it",
            strategy_name(strategy)
        ))
    })
}

fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::Restart => "--retire restart",
        Strategy::QuietWindow => "--retire none",
        _ => "--retire ack",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment(labels: &Value) -> Value {
        json!({ "metadata": { "name": "kustomize-controller", "labels": labels } })
    }

    #[test]
    fn operator_kinds_a_controller_is_flux_operators_only_by_its_labels() {
        let cases = [
            (
                "installed by a FluxInstance",
                json!({ "app.kubernetes.io/managed-by": "flux-operator",
                        "fluxcd.controlplane.io/name": "flux",
                        "fluxcd.controlplane.io/namespace": "flux-system" }),
                Some("flux-system/flux"),
            ),
            (
                "managed-by alone",
                json!({ "app.kubernetes.io/managed-by": "flux-operator" }),
                Some("?/?"),
            ),
            (
                "flux bootstrap (kustomize-controller's own labels)",
                json!({ "app.kubernetes.io/part-of": "flux",
                        "kustomize.toolkit.fluxcd.io/name": "flux-system" }),
                None,
            ),
            (
                "managed by Helm",
                json!({ "app.kubernetes.io/managed-by": "Helm" }),
                None,
            ),
            ("no labels", Value::Null, None),
        ];
        for (what, labels, want) in cases {
            assert_eq!(
                managed_by_operator(&deployment(&labels)).as_deref(),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn operator_kinds_restart_under_flux_operator_fails_ack_is_a_note() {
        let c = ControllerRef {
            namespace: "flux-system".into(),
            name: "kustomize-controller".into(),
        };
        let d = deployment(&json!({ "app.kubernetes.io/managed-by": "flux-operator",
            "fluxcd.controlplane.io/name": "flux",
            "fluxcd.controlplane.io/namespace": "flux-system" }));
        let restart = finding(&c, &d, Strategy::Restart).unwrap();
        assert!(!restart.is_ok(), "{restart}");
        assert!(
            restart.to_string().contains("--retire restart is reverted"),
            "{restart}"
        );
        let ack = finding(&c, &d, Strategy::Ack).unwrap();
        assert!(ack.is_ok(), "{ack}");
        assert!(
            ack.to_string().contains("FluxInstance flux-system/flux"),
            "{ack}"
        );
        assert_eq!(
            finding(&c, &deployment(&Value::Null), Strategy::Restart),
            None
        );
    }
}
