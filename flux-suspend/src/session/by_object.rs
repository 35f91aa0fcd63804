//! Resuming by object, as `flux resume ks apps` does: the holder whose pause to resume is read
//! from the named objects' fences ([`holder_of`]), then [`super::resume_holder`] resumes that
//! holder's whole pause — every fence of its chain, targets before parents, and its Lease —
//! with the same refusals (a live holder is refused, nothing changed). One object of a chain
//! cannot be released alone: its parent or child would stay fenced with no Lease behind it.

use flux_fence::discover::{self, FoundState};
use flux_fence::{AnnotationKeys, FenceError, Holder, ObjectRef};
use kube::Client;
use kube::api::{Api, DynamicObject};

use super::ResumeError;

/// What one named object's fence says, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectFence {
    /// The object does not exist.
    Missing,
    /// The object carries no fence: nothing holds it.
    Unfenced,
    /// The fence annotations do not parse (`fences` lists it; `fences release` handles it).
    Malformed(String),
    /// Fenced by this holder.
    Held(Holder),
}

impl std::fmt::Display for ObjectFence {
    /// What the read showed, as the reason of a refusal: `it does not exist`, ...
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => f.write_str("it does not exist"),
            Self::Unfenced => write!(
                f,
                "it is not paused by {} (no fence)",
                flux_fence::api::FIELD_MANAGER
            ),
            Self::Malformed(p) => write!(f, "its fence does not parse ({p})"),
            Self::Held(h) => write!(f, "it is fenced by {h}"),
        }
    }
}

/// The one holder fencing every named object, or the refusal (nothing was changed): an
/// object missing, unfenced or malformed, or objects fenced by different holders.
///
/// # Errors
///
/// [`ResumeError::NotFenced`] or [`ResumeError::Holders`]; [`ResumeError::NoObject`] for an
/// empty list.
pub fn decide_holder(found: &[(ObjectRef, ObjectFence)]) -> Result<Holder, ResumeError> {
    let mut holders: Vec<(Holder, Vec<ObjectRef>)> = Vec::new();
    for (object, fence) in found {
        let ObjectFence::Held(h) = fence else {
            return Err(ResumeError::NotFenced {
                object: Box::new(object.clone()),
                found: fence.clone(),
            });
        };
        match holders.iter_mut().find(|(x, _)| x == h) {
            Some((_, objects)) => objects.push(object.clone()),
            None => holders.push((h.clone(), vec![object.clone()])),
        }
    }
    match holders.as_slice() {
        [] => Err(ResumeError::NoObject),
        [(h, _)] => Ok(h.clone()),
        _ => Err(ResumeError::Holders { holders }),
    }
}

/// Reads each object (one GET, no write) and says which holder fences them all
/// ([`decide_holder`]).
///
/// # Errors
///
/// A refusal of [`decide_holder`], or [`ResumeError::Fence`] when an object cannot be read
/// (403 as [`FenceError::Forbidden`]).
pub async fn holder_of(
    client: &Client,
    keys: &AnnotationKeys,
    objects: &[ObjectRef],
) -> Result<Holder, ResumeError> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut found = Vec::new();
    for o in objects {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &o.namespace, &o.resource);
        let obj = api.get_opt(&o.name).await.map_err(|e| read_error(o, e))?;
        let fence = match obj {
            None => ObjectFence::Missing,
            Some(obj) => {
                let value = serde_json::to_value(&obj).map_err(|e| FenceError::Json {
                    what: "object",
                    source: e,
                })?;
                match discover::inspect(&value, &o.resource, keys, now).map(|f| f.state) {
                    None => ObjectFence::Unfenced,
                    Some(FoundState::Fence { owner, .. }) => ObjectFence::Held(owner.holder),
                    Some(FoundState::Malformed { problem, .. }) => ObjectFence::Malformed(problem),
                    Some(_) => ObjectFence::Malformed("unknown fence state".into()),
                }
            }
        };
        found.push((o.clone(), fence));
    }
    decide_holder(&found)
}

fn read_error(o: &ObjectRef, e: kube::Error) -> ResumeError {
    let resource = match o.resource.group.as_str() {
        "" => o.resource.plural.clone(),
        g => format!("{}.{g}", o.resource.plural),
    };
    let target = format!("{}/{}", o.namespace, o.name);
    let source = Box::new(e);
    ResumeError::Fence(match source.as_ref() {
        kube::Error::Api(s) if s.code == 403 => FenceError::Forbidden {
            verb: "get",
            resource,
            target,
            source,
        },
        _ => FenceError::Api {
            verb: "get",
            resource,
            target,
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn h(s: &str) -> Holder {
        Holder::from_str(s).unwrap()
    }

    #[test]
    fn flux_habits_the_holder_of_named_objects_is_the_one_on_their_fences() {
        let ks = |name: &str| crate::object::kustomization("a", name);
        let held = |o: &str, x: &str| (ks(o), ObjectFence::Held(h(x)));
        let one = decide_holder(&[held("x", "h1"), held("y", "h1")]).unwrap();
        assert_eq!(one, h("h1"));
        let cases: [(Vec<(ObjectRef, ObjectFence)>, &str); 5] = [
            (vec![], "no object named"),
            (
                vec![(ks("x"), ObjectFence::Missing)],
                "Kustomization a/x: it does not exist; nothing was changed",
            ),
            (
                vec![held("x", "h1"), (ks("y"), ObjectFence::Unfenced)],
                "Kustomization a/y: it is not paused by FIELD_MANAGER (no fence); nothing was \
                 changed",
            ),
            (
                vec![(ks("x"), ObjectFence::Malformed("bad epoch".into()))],
                "Kustomization a/x: its fence does not parse (bad epoch); nothing was changed",
            ),
            (
                vec![held("x", "h1"), held("y", "h2"), held("z", "h1")],
                "fenced by different holders: h1 (Kustomization a/x, Kustomization a/z), h2 \
                 (Kustomization a/y); resume each holder by itself (`resume --holder H`); \
                 nothing was changed",
            ),
        ];
        for (found, line) in cases {
            let e = decide_holder(&found).unwrap_err();
            // The tool names itself by its field manager, as on the server.
            let line = line.replace("FIELD_MANAGER", flux_fence::api::FIELD_MANAGER);
            assert_eq!(e.to_string(), line);
            assert!(e.nothing_changed(), "{line}");
        }
        // The refusal carries its facts: which object, which holders fence what.
        let Err(ResumeError::Holders { holders }) =
            decide_holder(&[held("x", "h1"), held("y", "h2")])
        else {
            panic!("two holders")
        };
        assert_eq!(
            holders,
            vec![(h("h1"), vec![ks("x")]), (h("h2"), vec![ks("y")])]
        );
    }
}
