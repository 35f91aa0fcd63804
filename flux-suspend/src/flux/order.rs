//! The order in which several targets are fenced and released, from their `spec.dependsOn`.
//!
//! Flux reconciles an object only once everything it depends on is Ready. Releasing a
//! dependency before the objects that depend on it lets Flux reconcile in that order at once,
//! instead of the dependents waiting a retry interval for a dependency still suspended. So
//! [`Ordered::release`] lists each object after every object of the set it depends on, and
//! [`Ordered::fence`] is the same list reversed: a handoff releases its targets in the reverse
//! of the order it fenced them, so fencing in [`Ordered::fence`] order releases in
//! [`Ordered::release`] order.
//!
//! Pure: the caller hands in what it read ([`Node::read`] takes an object's JSON).
//!
//! - **A dependency outside the set** (not selected, or another kind) has no place in the
//!   order: it is not released by this handoff, so nothing waits for it here. Flux waits for
//!   it as it always does.
//! - **A cycle** (`a` depends on `b`, `b` on `a`) has no order that satisfies it; Flux itself
//!   never reconciles its members (each waits for the other to be Ready). The order is broken
//!   at the member given first in the input, which is then released as if its dependencies
//!   inside the cycle were released; [`Ordered::broken_at`] names each such member, so a
//!   caller can say so. A dependency of an object on itself is ignored.
//! - Objects with no order between them keep the order they were given in, so the result is
//!   the same for the same input (a listing's order, names as typed).
//! - An object given twice counts once, with the dependencies of both entries.
//!
//! ```
//! use flux_suspend::flux::order::{Node, release_order};
//! use flux_suspend::object::kustomization;
//!
//! let infra = kustomization("flux-system", "infrastructure");
//! let apps = kustomization("flux-system", "apps");
//! let nodes = [Node::new(apps.clone(), vec![infra.clone()]), Node::new(infra.clone(), vec![])];
//! let ordered = release_order(&nodes);
//! assert_eq!(ordered.release, [infra.clone(), apps.clone()]);
//! assert_eq!(ordered.fence(), [apps, infra]);
//! ```

use flux_fence::ObjectRef;
use kube::api::ApiResource;
use serde_json::Value;

/// One object and the objects it depends on.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Node {
    /// The object.
    pub object: ObjectRef,
    /// Its `spec.dependsOn`, each of the object's own kind, namespaces defaulted to its own.
    pub depends_on: Vec<ObjectRef>,
}

impl Node {
    /// `object`, depending on `depends_on`.
    #[must_use]
    pub fn new(object: ObjectRef, depends_on: Vec<ObjectRef>) -> Self {
        Self { object, depends_on }
    }

    /// `object` with the `spec.dependsOn` of `obj` (its JSON as read): entries name objects
    /// of the same kind as `object` (Kustomizations depend on Kustomizations, `HelmReleases`
    /// on `HelmReleases`), in `object`'s namespace unless they name one.
    #[must_use]
    pub fn read(object: ObjectRef, obj: &Value) -> Self {
        let own = object.namespace.clone();
        let resource: ApiResource = object.resource.clone();
        let depends_on = depends_on_in(obj, &own)
            .into_iter()
            .map(|(ns, name)| ObjectRef::new(resource.clone(), ns, name))
            .collect();
        Self { object, depends_on }
    }
}

/// `spec.dependsOn` as (namespace, name), the namespace defaulting to `own_ns` (the object's,
/// whatever its JSON says: a listing's items may omit it).
fn depends_on_in(obj: &Value, own_ns: &str) -> Vec<(String, String)> {
    let Some(deps) = obj.pointer("/spec/dependsOn").and_then(Value::as_array) else {
        return Vec::new();
    };
    deps.iter()
        .filter_map(|d| {
            let name = d.get("name")?.as_str().filter(|n| !n.is_empty())?;
            let ns = d
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(own_ns);
            Some((ns.to_string(), name.to_string()))
        })
        .collect()
}

/// Objects in dependency order; see the [module](self).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Ordered {
    /// Each object after every object of the set it depends on (cycles broken).
    pub release: Vec<ObjectRef>,
    /// The members at which a cycle was broken, in the order they were placed.
    pub broken_at: Vec<ObjectRef>,
}

impl Ordered {
    /// The order to fence in: [`Ordered::release`] reversed, so that a handoff, which releases
    /// the last fenced first, releases in [`Ordered::release`] order.
    #[must_use]
    pub fn fence(&self) -> Vec<ObjectRef> {
        self.release.iter().rev().cloned().collect()
    }

    /// Where `object` comes in [`Ordered::fence`] (`usize::MAX` for an object not in the set,
    /// which sorts it last): `guards.sort_by_key(|g| ordered.fence_rank(g.object()))` puts
    /// fences a caller holds in the order to hand to a handoff.
    #[must_use]
    pub fn fence_rank(&self, object: &ObjectRef) -> usize {
        self.release
            .iter()
            .rev()
            .position(|o| o == object)
            .unwrap_or(usize::MAX)
    }
}

/// Orders `nodes` so that each comes after every node it depends on; see the
/// [module](self) for dependencies outside the set, cycles and ties.
#[must_use]
pub fn release_order(nodes: &[Node]) -> Ordered {
    // One entry per object, dependencies merged, only those inside the set and not itself.
    let mut objects: Vec<ObjectRef> = Vec::new();
    let mut deps: Vec<Vec<usize>> = Vec::new();
    for n in nodes {
        if !objects.contains(&n.object) {
            objects.push(n.object.clone());
            deps.push(Vec::new());
        }
    }
    let index = |o: &ObjectRef| objects.iter().position(|x| x == o);
    for n in nodes {
        let Some(at) = index(&n.object) else { continue };
        for d in &n.depends_on {
            if let Some(i) = index(d)
                && i != at
                && !deps[at].contains(&i)
            {
                deps[at].push(i);
            }
        }
    }
    let mut placed = vec![false; objects.len()];
    let mut out = Ordered::default();
    while out.release.len() < objects.len() {
        let ready = (0..objects.len()).find(|&i| !placed[i] && deps[i].iter().all(|&d| placed[d]));
        let next = if let Some(i) = ready {
            i
        } else {
            // Every object left waits on another one left: a cycle, or behind one. Break it
            // at the first one on a cycle (one always is; the first left otherwise).
            let left = |i: &usize| !placed[*i];
            let i = (0..objects.len())
                .filter(left)
                .find(|&i| on_cycle(i, &deps, &placed))
                .or_else(|| (0..objects.len()).find(left))
                .unwrap_or_default();
            out.broken_at.push(objects[i].clone());
            i
        };
        placed[next] = true;
        out.release.push(objects[next].clone());
    }
    out
}

/// Whether `start` reaches itself through dependencies not yet placed.
fn on_cycle(start: usize, deps: &[Vec<usize>], placed: &[bool]) -> bool {
    let mut seen = vec![false; deps.len()];
    let mut stack: Vec<usize> = deps[start]
        .iter()
        .copied()
        .filter(|&d| !placed[d])
        .collect();
    while let Some(i) = stack.pop() {
        if i == start {
            return true;
        }
        if !std::mem::replace(&mut seen[i], true) {
            stack.extend(deps[i].iter().copied().filter(|&d| !placed[d]));
        }
    }
    false
}

#[cfg(test)]
mod tests;
