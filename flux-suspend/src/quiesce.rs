//! Quiescing a target before it is fenced: the one place where status conditions may be
//! printed, because nothing about the target is fenced yet and they explain a pre-existing
//! state.

use std::fmt;

use serde_json::Value;

use crate::flux::{self, Condition, NamespacedName};

/// Why a target is not quiet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blocker {
    /// The target itself reports `Reconciling=True`.
    Reconciling {
        ready: Option<Condition>,
        reconciling: Condition,
    },
    /// An object the target depends on is not Ready.
    DependencyNotReady {
        object: NamespacedName,
        ready: Option<Condition>,
    },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cond = |f: &mut fmt::Formatter<'_>, c: &Condition| {
            write!(
                f,
                "{}={} ({}: {})",
                c.type_,
                c.status,
                c.reason,
                one_line(&c.message)
            )
        };
        match self {
            Blocker::Reconciling { ready, reconciling } => {
                f.write_str("target ")?;
                cond(f, reconciling)?;
                if let Some(r) = ready {
                    f.write_str(", ")?;
                    cond(f, r)?;
                }
                Ok(())
            }
            Blocker::DependencyNotReady { object, ready } => {
                write!(f, "dependency {object} not ready")?;
                if let Some(r) = ready {
                    f.write_str(": ")?;
                    cond(f, r)?;
                }
                Ok(())
            }
        }
    }
}

/// Condition messages are untrusted text: keep them on one line and bounded.
fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() > 200 {
        let cut: String = flat.chars().take(200).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// Whether the target is quiet: no `Reconciling=True` and every dependency Ready. `deps` are
/// the dependencies as read (`None`: could not be read).
#[must_use]
pub fn blockers(target: &Value, deps: &[(NamespacedName, Option<Value>)]) -> Vec<Blocker> {
    let conds = flux::conditions(target);
    let mut out = Vec::new();
    if let Some(rec) = flux::condition(&conds, "Reconciling").filter(|c| c.status == "True") {
        out.push(Blocker::Reconciling {
            ready: flux::condition(&conds, "Ready").cloned(),
            reconciling: rec.clone(),
        });
    }
    for (name, dep) in deps {
        let ready = dep.as_ref().and_then(|d| {
            let conds = flux::conditions(d);
            flux::condition(&conds, "Ready").cloned()
        });
        if ready.as_ref().is_none_or(|r| r.status != "True") {
            out.push(Blocker::DependencyNotReady {
                object: name.clone(),
                ready,
            });
        }
    }
    out
}
