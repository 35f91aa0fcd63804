//! Flux's feature gate `CancelHealthCheckOnNewRevision`, read from the controller Deployment's
//! container arguments (pure).
//!
//! Without the gate, a reconcile that waits on a health check (a Kustomization with `wait` or
//! `healthChecks`, a `HelmRelease`'s install or upgrade) runs to its timeout even after the object
//! was suspended: the acknowledgement of the suspend, and so the pause, waits for it. With the
//! gate, any event that queues the object again — the suspend patch and its `requestedAt` nonce
//! are two — cancels the wait at once:
//!
//! - kustomize-controller v1.9.6 `internal/controller/kustomization_manager.go:144-157` wraps
//!   its reconciler with fluxcd/pkg `runtime/controller` `WrapReconciler` when the gate is on;
//!   `kustomization_controller.go:1101-1109` waits on `GetInterruptContext(ctx)` and returns
//!   when `IsObjectEnqueued`.
//! - helm-controller v1.6.4 `internal/controller/helmrelease_manager.go:130-143` likewise;
//!   `internal/action/wait.go:113,123` and `helmrelease_controller.go:428` ("New reconciliation
//!   triggered, canceling health checks").
//! - fluxcd/pkg runtime v0.110.3 `controller/reconciler.go` (`Reconcile` registers a listener
//!   cancelled when the same object is enqueued again), `controller/builder.go` (`For` sends
//!   the object's own events through it).
//!
//! The flag is `--feature-gates=A=true,B=false` (fluxcd/pkg `runtime/features`, a component-base
//! `MapStringBool`: later flags add to earlier ones, a later value of the same gate wins, values
//! as Go's `strconv.ParseBool`). Default off in both controllers (kc `internal/features/
//! features.go:103-105`, hc `:129-131`).

use std::time::Duration;

use serde_json::Value;

/// The gate's name, as the controllers spell it.
pub const GATE: &str = "CancelHealthCheckOnNewRevision";

/// What the arguments say about the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateState {
    /// `CancelHealthCheckOnNewRevision=true`.
    On,
    /// Set to false explicitly.
    Off,
    /// Not named: the controllers' default, off.
    Default,
    /// Named with a value `strconv.ParseBool` refuses (the controller would not start).
    Invalid,
}

impl GateState {
    /// Whether a suspend cancels an in-flight health check.
    #[must_use]
    pub fn is_on(self) -> bool {
        self == Self::On
    }
}

/// The gate as the container arguments `args` (command and args, in order) set it.
#[must_use]
pub fn gate_state(args: &[String]) -> GateState {
    let mut state = GateState::Default;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = if let Some(v) = arg.strip_prefix("--feature-gates=") {
            v
        } else if arg == "--feature-gates" {
            match it.next() {
                Some(v) => v.as_str(),
                None => break,
            }
        } else {
            continue;
        };
        for pair in value.split(',') {
            let Some((key, v)) = pair.split_once('=') else {
                continue;
            };
            if key.trim() != GATE {
                continue;
            }
            state = match parse_bool(v.trim()) {
                Some(true) => GateState::On,
                Some(false) => GateState::Off,
                None => GateState::Invalid,
            };
        }
    }
    state
}

/// Go's `strconv.ParseBool`.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Every container's `command` then `args` of a Deployment's JSON, in order.
#[must_use]
pub fn container_args(deployment: &Value) -> Vec<String> {
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array);
    containers
        .into_iter()
        .flatten()
        .flat_map(|c| {
            ["command", "args"].into_iter().flat_map(move |k| {
                c.get(k)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
            })
        })
        .map(str::to_string)
        .collect()
}

/// How long an in-flight reconcile of this Flux object may wait on a health check, if it runs
/// one: a Kustomization with `wait` or `healthChecks` (kc-api v1.9.6 `GetTimeout`:
/// `spec.timeout`, else `spec.interval` − 30 s, at least 30 s); a `HelmRelease` (hc-api
/// `GetTimeout`: `spec.timeout`, else 5 min). `None` when it runs none or the durations do not
/// parse.
#[must_use]
pub fn health_wait(obj: &Value) -> Option<Duration> {
    let spec = obj.get("spec")?;
    let dur = |k: &str| {
        spec.get(k)
            .and_then(Value::as_str)
            .and_then(|s| crate::settings::parse_duration(s).ok())
    };
    match obj.get("kind").and_then(Value::as_str)? {
        "Kustomization" => {
            let wait = spec.get("wait").and_then(Value::as_bool).unwrap_or(false);
            let checks = spec
                .get("healthChecks")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty());
            if !(wait || checks) {
                return None;
            }
            let t = match spec.get("timeout") {
                Some(_) => dur("timeout")?,
                None => dur("interval")?.saturating_sub(Duration::from_secs(30)),
            };
            Some(t.max(Duration::from_secs(30)))
        }
        "HelmRelease" => match spec.get("timeout") {
            Some(_) => dur("timeout"),
            None => Some(Duration::from_mins(5)),
        },
        _ => None,
    }
}

/// doctor's words about the gate for `deployment` (e.g. `Deployment flux-system/kustomize-
/// controller`), given its state and the longest health-check wait among the checked objects
/// (`(object, wait)`): what the gate saves, or that it is on.
#[must_use]
pub fn gate_advice(
    deployment: &str,
    state: GateState,
    longest: Option<(&str, Duration)>,
) -> String {
    let head = format!("feature gate {GATE} of {deployment}");
    let saves = match longest {
        Some((obj, wait)) => format!(
            "up to {}s for {obj}, whose reconcile waits that long on a health check",
            wait.as_secs()
        ),
        None => "up to the health-check timeout of each object whose reconcile waits on one \
                 (none of the objects checked does)"
            .into(),
    };
    match state {
        GateState::On => format!(
            "{head}: on; a suspend cancels an in-flight health check, so the acknowledgement \
             does not wait for it"
        ),
        GateState::Off | GateState::Default => format!(
            "{head}: off{}; an acknowledgement waits until an in-flight health check gives up, \
             {saves}; --feature-gates={GATE}=true on the controller saves that wait (or choose \
             --retire restart, docs/bench.md)",
            if state == GateState::Default {
                " (the default)"
            } else {
                ""
            }
        ),
        GateState::Invalid => {
            format!("{head}: its value is not a boolean; the controller would refuse to start")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn gate_state_reads_the_feature_gates_flag_like_the_controllers() {
        let table: &[(&[&str], GateState)] = &[
            (&[], GateState::Default),
            (
                &["--watch-all-namespaces", "--log-level=info"],
                GateState::Default,
            ),
            (
                &["--feature-gates=CancelHealthCheckOnNewRevision=true"],
                GateState::On,
            ),
            (
                &["--feature-gates=OOMWatch=true,CancelHealthCheckOnNewRevision=true"],
                GateState::On,
            ),
            (
                &["--feature-gates", "CancelHealthCheckOnNewRevision=1"],
                GateState::On,
            ),
            (
                &["--feature-gates=CancelHealthCheckOnNewRevision=false"],
                GateState::Off,
            ),
            // A later flag adds to the earlier ones; the later value wins.
            (
                &[
                    "--feature-gates=CancelHealthCheckOnNewRevision=true",
                    "--feature-gates=OOMWatch=true",
                ],
                GateState::On,
            ),
            (
                &[
                    "--feature-gates=CancelHealthCheckOnNewRevision=true",
                    "--feature-gates=CancelHealthCheckOnNewRevision=F",
                ],
                GateState::Off,
            ),
            (
                &["--feature-gates= CancelHealthCheckOnNewRevision = True "],
                GateState::On,
            ),
            (
                &["--feature-gates=CancelHealthCheckOnNewRevision=yes"],
                GateState::Invalid,
            ),
            // Another gate, a prefix of the name, another flag: not this gate.
            (
                &["--feature-gates=CancelHealthCheckOnNewRevisionX=true"],
                GateState::Default,
            ),
            (
                &["--feature-gate=CancelHealthCheckOnNewRevision=true"],
                GateState::Default,
            ),
            (&["--feature-gates"], GateState::Default),
        ];
        for (a, want) in table {
            assert_eq!(gate_state(&args(a)), *want, "{a:?}");
        }
        assert!(GateState::On.is_on() && !GateState::Default.is_on());
    }

    #[test]
    fn container_args_are_every_containers_command_then_args() {
        let d = json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "manager", "command": ["/manager"], "args": ["--a", "--b=1"] },
            { "name": "sidecar", "args": ["--c"] },
        ] } } } });
        assert_eq!(
            container_args(&d),
            args(&["/manager", "--a", "--b=1", "--c"])
        );
        assert!(container_args(&json!({})).is_empty());
    }

    #[test]
    fn health_wait_follows_the_controllers_timeouts() {
        let ks = |spec: Value| json!({ "kind": "Kustomization", "spec": spec });
        let hr = |spec: Value| json!({ "kind": "HelmRelease", "spec": spec });
        let s = Duration::from_secs;
        let table = [
            (ks(json!({ "interval": "10m", "timeout": "35s" })), None),
            (
                ks(json!({ "interval": "10m", "timeout": "35s", "wait": true })),
                Some(s(35)),
            ),
            (ks(json!({ "interval": "10m", "wait": true })), Some(s(570))),
            (
                ks(json!({ "interval": "40s", "healthChecks": [{ "kind": "Deployment" }] })),
                Some(s(30)),
            ),
            (
                ks(json!({ "interval": "10m", "timeout": "20s", "wait": true })),
                Some(s(30)),
            ),
            (
                ks(json!({ "interval": "10m", "timeout": "1m30s", "wait": true })),
                Some(s(90)),
            ),
            (ks(json!({ "interval": "10m", "healthChecks": [] })), None),
            (hr(json!({ "interval": "10m" })), Some(s(300))),
            (
                hr(json!({ "interval": "10m", "timeout": "35s" })),
                Some(s(35)),
            ),
            (json!({ "kind": "OCIRepository", "spec": {} }), None),
            (ks(json!({ "timeout": "soon", "wait": true })), None),
        ];
        for (obj, want) in table {
            assert_eq!(health_wait(&obj), want, "{obj}");
        }
    }

    #[test]
    fn gate_advice_says_whether_it_is_on_and_what_it_saves() {
        let d = "Deployment flux-system/kustomize-controller";
        let on = gate_advice(d, GateState::On, Some(("x", Duration::from_secs(35))));
        assert_eq!(
            on,
            "feature gate CancelHealthCheckOnNewRevision of Deployment \
             flux-system/kustomize-controller: on; a suspend cancels an in-flight health \
             check, so the acknowledgement does not wait for it"
        );
        let off = gate_advice(
            d,
            GateState::Default,
            Some(("Kustomization apps/web", Duration::from_secs(35))),
        );
        assert!(
            off.contains(": off (the default); an acknowledgement waits until an in-flight"),
            "{off}"
        );
        assert!(
            off.contains("up to 35s for Kustomization apps/web"),
            "{off}"
        );
        assert!(
            off.contains("--feature-gates=CancelHealthCheckOnNewRevision=true on the controller"),
            "{off}"
        );
        let explicit = gate_advice(d, GateState::Off, None);
        assert!(explicit.contains(": off; ") && explicit.contains("none of the objects"));
        assert!(gate_advice(d, GateState::Invalid, None).contains("not a boolean"));
    }
}
