//! Autoscalers named before anything is written: a replicas gate holds its Deployment at a
//! count, and a `HorizontalPodAutoscaler` (autoscaling/v2) or a KEDA `ScaledObject`
//! (keda.sh/v1alpha1) targeting the same Deployment would scale it back while the work runs.
//! The preflight lists both kinds in each gated Deployment's namespace and refuses, with the
//! fix, before the Lease or any fence is written, unless `--allow-autoscaler`
//! ([`crate::SessionOptions::allow_autoscaler`]) accepts them knowingly. `doctor` asks the same
//! question ([`check`]).
//!
//! - A KEDA `ScaledObject` pauses itself with its own annotation
//!   `autoscaling.keda.sh/paused-replicas: "N"` (KEDA holds the target at N, its HPA removed) or
//!   `autoscaling.keda.sh/paused: "true"` (KEDA stops scaling at the current count): either
//!   one at the gate's count lets the gate hold, so such an object is not refused.
//! - An HPA cannot be paused and cannot hold 0 (`minReplicas` is at least 1 unless the
//!   `HPAScaleToZero` feature gate is on): it must be removed, or its `scaleTargetRef`
//!   changed, for the pause.
//!
//! A `ScaledObject` list answered 404 means KEDA is not installed (no CRD): nothing to find.
//! A 403 on either list is never skipped: the refusal (or doctor's finding) names the right.
//! Pure decision ([`decide`]) with table tests; the I/O is two list calls per namespace.

use flux_fence::ObjectRef;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use crate::session::{SessionError, SessionOptions};

/// KEDA's annotation that holds its target at a count while set.
pub const KEDA_PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";
/// KEDA's annotation that stops its scaling at the current count while `"true"`.
pub const KEDA_PAUSED: &str = "autoscaling.keda.sh/paused";

/// What one list of an autoscaler kind answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Listing {
    /// The objects of the namespace, as JSON.
    Items(Vec<Value>),
    /// The kind is not served (404: its CRD is not installed).
    NotServed,
    /// The list was forbidden (403): the API server's message.
    Forbidden(String),
}

/// The autoscaler kinds looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// `autoscaling/v2` `HorizontalPodAutoscaler`.
    Hpa,
    /// `keda.sh/v1alpha1` `ScaledObject`.
    Keda,
}

impl Kind {
    /// The right its list needs, as `rbac` and `doctor` spell it.
    #[must_use]
    pub fn right(self) -> &'static str {
        match self {
            Self::Hpa => "list horizontalpodautoscalers.autoscaling",
            Self::Keda => "list scaledobjects.keda.sh",
        }
    }

    fn resource(self) -> ApiResource {
        match self {
            Self::Hpa => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"),
                "horizontalpodautoscalers",
            ),
            Self::Keda => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
                "scaledobjects",
            ),
        }
    }
}

/// What the lists say about one gated Deployment.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Verdict {
    /// No autoscaler would undo the gate's count.
    Clear,
    /// These autoscalers target it (kind and name): the gate is refused unless allowed.
    Found(Vec<(Kind, String)>),
    /// A list was forbidden: the check could not be made.
    Forbidden {
        /// The kind whose list was refused.
        kind: Kind,
        /// The API server's message.
        message: String,
    },
}

/// Whether autoscaler `obj` (its JSON) scales Deployment `name`: its `spec.scaleTargetRef`
/// names it, kind `Deployment` (KEDA's default when the kind is left out) of the `apps` group.
#[must_use]
pub fn targets(obj: &Value, kind: Kind, name: &str) -> bool {
    let Some(target) = obj.pointer("/spec/scaleTargetRef") else {
        return false;
    };
    let field = |k: &str| target.get(k).and_then(Value::as_str);
    let target_kind = match (field("kind"), kind) {
        (Some(k), _) => k,
        (None, Kind::Keda) => "Deployment",
        (None, Kind::Hpa) => return false,
    };
    let apps = field("apiVersion").is_none_or(|v| v.starts_with("apps/"));
    target_kind == "Deployment" && apps && field("name") == Some(name)
}

/// Whether a `ScaledObject` is paused by its own annotations so that it leaves a gate at
/// `want` alone: `paused-replicas` at `want`, or `paused: "true"` with no other count.
#[must_use]
pub fn keda_holds(obj: &Value, want: i32) -> bool {
    let annotation = |k: &str| {
        obj.pointer("/metadata/annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
    };
    match annotation(KEDA_PAUSED_REPLICAS) {
        Some(n) => n.trim().parse::<i32>().ok() == Some(want),
        None => annotation(KEDA_PAUSED).is_some_and(|p| p.eq_ignore_ascii_case("true")),
    }
}

/// Pure: the verdict for Deployment `name` gated at `want`, from the HPA and `ScaledObject`
/// lists of its namespace. A forbidden list wins over what the other found: the check is
/// incomplete.
#[must_use]
pub fn decide(name: &str, want: i32, hpas: &Listing, scaled: &Listing) -> Verdict {
    let mut found = Vec::new();
    for (kind, listing) in [(Kind::Hpa, hpas), (Kind::Keda, scaled)] {
        match listing {
            Listing::Forbidden(message) => {
                return Verdict::Forbidden {
                    kind,
                    message: message.clone(),
                };
            }
            Listing::NotServed => {}
            Listing::Items(items) => {
                for obj in items {
                    let held = kind == Kind::Keda && keda_holds(obj, want);
                    if targets(obj, kind, name) && !held {
                        let n = obj.pointer("/metadata/name").and_then(Value::as_str);
                        found.push((kind, n.unwrap_or_default().to_string()));
                    }
                }
            }
        }
    }
    if found.is_empty() {
        Verdict::Clear
    } else {
        Verdict::Found(found)
    }
}

/// One line: what targets `gate` (gated at `want`) and what to do about each; `None` when the
/// verdict is clear.
#[must_use]
pub fn refusal_line(gate: &ObjectRef, want: i32, verdict: &Verdict) -> Option<String> {
    let ns = &gate.namespace;
    match verdict {
        Verdict::Clear => None,
        Verdict::Forbidden { kind, message } => Some(format!(
            "cannot check {gate} for autoscalers: {} in {ns} is forbidden ({message}); grant \
             it (`flux-handoff rbac` with this target prints the rule), or pass \
             --allow-autoscaler to gate it without the check",
            kind.right()
        )),
        Verdict::Found(found) => {
            let each: Vec<String> = found
                .iter()
                .map(|(kind, name)| match kind {
                    Kind::Hpa => format!(
                        "HorizontalPodAutoscaler {ns}/{name} scales it and cannot be paused \
                         or hold 0 (minReplicas is at least 1 unless the HPAScaleToZero \
                         feature gate is on): remove it or change its scaleTargetRef for the \
                         pause"
                    ),
                    Kind::Keda => format!(
                        "KEDA ScaledObject {ns}/{name} scales it: pause it at the gate's count \
                         first with `kubectl -n {ns} annotate scaledobject {name} \
                         {KEDA_PAUSED_REPLICAS}={want}` (remove the annotation after)"
                    ),
                })
                .collect();
            Some(format!(
                "{gate} is gated at {want} but {}; or pass --allow-autoscaler to gate it anyway",
                each.join("; ")
            ))
        }
    }
}

/// Lists `kind` in `namespace`: 404 is [`Listing::NotServed`], 403 [`Listing::Forbidden`].
///
/// # Errors
/// Any other API error.
pub async fn list(client: &Client, kind: Kind, namespace: &str) -> Result<Listing, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kind.resource());
    match api.list(&ListParams::default()).await {
        Ok(l) => Ok(Listing::Items(
            l.items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .collect(),
        )),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Listing::NotServed),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Listing::Forbidden(s.message)),
        Err(e) => Err(e),
    }
}

/// The verdict for `gate` gated at `want`, read from the cluster (two lists).
///
/// # Errors
/// An API error other than 403 or 404.
pub async fn check(client: &Client, gate: &ObjectRef, want: i32) -> Result<Verdict, kube::Error> {
    // Independent reads: both at once.
    let (hpas, scaled) = futures::try_join!(
        list(client, Kind::Hpa, &gate.namespace),
        list(client, Kind::Keda, &gate.namespace),
    )?;
    Ok(decide(&gate.name, want, &hpas, &scaled))
}

/// The preflight's refusal: each replicas gate of `opts` checked, unless
/// [`SessionOptions::allow_autoscaler`]. A refusal is [`SessionError::Invalid`] (exit 2: the
/// fix is the caller's), nothing written.
pub(crate) async fn refuse_autoscalers(
    client: &Client,
    opts: &SessionOptions,
) -> Result<(), SessionError> {
    if opts.allow_autoscaler {
        return Ok(());
    }
    for t in &opts.targets {
        let Some(want) = t.replicas else { continue };
        let verdict =
            check(client, &t.object, want)
                .await
                .map_err(|source| SessionError::Read {
                    object: Box::new(t.object.clone()),
                    source,
                })?;
        if let Some(line) = refusal_line(&t.object, want, &verdict) {
            return Err(SessionError::Invalid(line));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
