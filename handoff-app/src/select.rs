//! Targets chosen by label selector or by `--all`, as `flux suspend kustomization --all -n
//! apps` and `kubectl get -l team=web` choose them, resolved once into named targets before
//! any write.
//!
//! - [`LabelSelector`] checks a selector as the API server parses it (`key=value`,
//!   `key==value`, `key!=value`, `key`, `!key`, `key in (a,b)`, `key notin (a,b)`, joined by
//!   commas), so a typo is one line and no request; the server then does the matching
//!   (`labelSelector` on the list).
//! - [`select`] lists each kind in each namespace once (the only requests: reads).
//! - [`plan`] (pure) turns what was listed into the targets, in the order to fence them: each
//!   object's dependencies (`spec.dependsOn`) are fenced after it, so the handoff, which
//!   releases the last fenced first, releases them before it and Flux reconciles them first
//!   ([`flux_suspend::flux::order`]). A selected Kustomization that applies another selected
//!   object is paused as that object's parent (fenced first, released last), not as a target.
//!   Nothing selected is [`SelectError::NoMatch`]: the caller exits before any write.
//!
//! ```
//! use handoff_app::select::LabelSelector;
//!
//! let s: LabelSelector = "team=web, tier in (a,b),!legacy".parse().unwrap();
//! assert_eq!(s.as_str(), "team=web,tier in (a,b),!legacy");
//! assert!("team=".parse::<LabelSelector>().is_ok()); // an empty value is a value
//! assert!("team=a=b".parse::<LabelSelector>().is_err());
//! ```

use std::str::FromStr;

use flux_fence::discover::Scope;
use flux_fence::{FenceError, ObjectRef};
use flux_suspend::flux::order::{Node, release_order};
use flux_suspend::object::kustomization;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use crate::names::{is_dns_subdomain, split_namespaced};

mod flags;
pub use flags::{SelectFlags, kinds};

/// Why a selection gave no targets; each Display is one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// The selector does not parse (exit 2: nothing was sent).
    #[error("-l {text:?}: {why}")]
    Selector {
        /// The selector as given.
        text: String,
        /// What is wrong, naming the part.
        why: String,
    },
    /// Nothing matched (exit 2: only reads were sent).
    #[error("no {what} matches {how} in {scope}: nothing to {doing}, nothing written")]
    NoMatch {
        /// The kinds, e.g. `Kustomization` or `paused Kustomization`.
        what: String,
        /// What there is nothing to do: `pause`, `resume`.
        doing: &'static str,
        /// `-l SELECTOR` or `--all`.
        how: String,
        /// The namespaces, or `all namespaces`.
        scope: String,
    },
    /// Three levels selected: a handoff pauses targets and the Kustomizations that apply them.
    #[error(
        "{object} applies {child} and is applied by {parent}, all selected: a handoff pauses \
         targets and the Kustomization that applies each (two levels); narrow the selection"
    )]
    Levels {
        /// The middle object.
        object: String,
        /// A selected object it applies.
        child: String,
        /// The selected object that applies it.
        parent: String,
    },
    /// A list failed (403 as [`FenceError::Forbidden`]).
    #[error(transparent)]
    List(#[from] FenceError),
}

impl SelectError {
    /// Whether this is the caller's input (exit 2), not the API's answer.
    #[must_use]
    pub fn is_usage(&self) -> bool {
        !matches!(self, Self::List(_))
    }
}

/// A label selector, checked; [`LabelSelector::as_str`] is what is sent as `labelSelector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(String);

impl LabelSelector {
    /// The selector, normalised (no blanks around its requirements).
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for LabelSelector {
    type Err = SelectError;

    fn from_str(text: &str) -> Result<Self, SelectError> {
        let bad = |why: String| SelectError::Selector {
            text: text.to_string(),
            why,
        };
        if text.trim().is_empty() {
            return Err(bad(
                "an empty selector; --all selects every object of the kind".into(),
            ));
        }
        let mut out = Vec::new();
        for req in split_top(text).map_err(bad)? {
            out.push(requirement(req.trim()).map_err(bad)?);
        }
        Ok(Self(out.join(",")))
    }
}

/// Splits on the commas outside parentheses.
fn split_top(text: &str) -> Result<Vec<&str>, String> {
    let (mut depth, mut start, mut parts) = (0_i32, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            ')' if depth == 1 => depth = 0,
            '(' | ')' => return Err("unbalanced parentheses".into()),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// One requirement, normalised.
fn requirement(req: &str) -> Result<String, String> {
    if req.is_empty() {
        return Err("an empty requirement (two commas, or one at an end)".into());
    }
    if let Some(open) = req.find('(') {
        let words: Vec<&str> = req[..open].split_whitespace().collect();
        let [key, op @ ("in" | "notin")] = words.as_slice() else {
            return Err(format!(
                "{req:?}: expected `key in (a,b)` or `key notin (a,b)`"
            ));
        };
        let inner = req[open + 1..]
            .strip_suffix(')')
            .ok_or_else(|| format!("{req:?}: nothing may follow the closing parenthesis"))?;
        check_key(key)?;
        let values: Vec<&str> = inner.split(',').map(str::trim).collect();
        for v in &values {
            check_value(v)?;
        }
        return Ok(format!("{key} {op} ({})", values.join(",")));
    }
    if let Some(key) = req.strip_prefix('!') {
        check_key(key.trim())?;
        return Ok(format!("!{}", key.trim()));
    }
    let (key, op, value) = if let Some((k, v)) = req.split_once("!=") {
        (k, "!=", v)
    } else if let Some((k, v)) = req.split_once("==") {
        (k, "==", v)
    } else if let Some((k, v)) = req.split_once('=') {
        (k, "=", v)
    } else {
        if req.contains(['<', '>', ' ']) {
            return Err(format!(
                "{req:?}: use key=value, key!=value, key, !key, key in (a,b) or key notin (a,b)"
            ));
        }
        check_key(req)?;
        return Ok(req.to_string());
    };
    let (key, value) = (key.trim(), value.trim());
    check_key(key)?;
    check_value(value)?;
    Ok(format!("{key}{op}{value}"))
}

/// `[prefix/]name`: a DNS subdomain prefix, a name as [`check_value`] (not empty).
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return Err(format!(
            "{key:?} is not a label key (its prefix is not a DNS subdomain)"
        ));
    }
    if name.is_empty() || !is_label_value(name) {
        return Err(format!(
            "{key:?} is not a label key ([prefix/]name: at most 63 letters, digits, '-', '_', \
             '.', beginning and ending with a letter or digit)"
        ));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), String> {
    if is_label_value(value) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a label value (at most 63 letters, digits, '-', '_', '.', \
             beginning and ending with a letter or digit)"
        ))
    }
}

fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    v.is_empty()
        || (b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric())
}

/// What to select: the kinds, where, and by which selector (`None`: every object, `--all`).
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// The kinds listed, in this order (Kustomizations, `HelmReleases`).
    pub kinds: Vec<ApiResource>,
    /// Where.
    pub scope: Scope,
    /// The label selector, or `None` for every object.
    pub selector: Option<LabelSelector>,
}

impl Selection {
    /// `-l SELECTOR` or `--all`, as the refusal of an empty selection says it.
    #[must_use]
    pub fn how(&self) -> String {
        self.selector
            .as_ref()
            .map_or_else(|| "--all".to_string(), |s| format!("-l {s}"))
    }

    /// [`SelectError::NoMatch`] for this selection: `no {what}{kinds} matches {how} in
    /// {scope}: nothing to {doing}, nothing written`; `what` qualifies the kinds (`paused `).
    #[must_use]
    pub fn no_match(&self, what: &str, doing: &'static str) -> SelectError {
        SelectError::NoMatch {
            what: format!("{what}{}", self.kind_words()),
            doing,
            how: self.how(),
            scope: self.scope_words(),
        }
    }

    fn scope_words(&self) -> String {
        match &self.scope {
            Scope::Namespaces(nss) => nss.join(", "),
            _ => "all namespaces".into(),
        }
    }

    fn kind_words(&self) -> String {
        let kinds: Vec<&str> = self.kinds.iter().map(|k| k.kind.as_str()).collect();
        kinds.join(" or ")
    }
}

/// Lists each kind of `selection` in each of its namespaces (one list each, selected by the
/// server with `labelSelector`); reads only.
///
/// # Errors
///
/// [`SelectError::List`] naming the list that failed.
pub async fn select(
    client: &Client,
    selection: &Selection,
) -> Result<Vec<(ObjectRef, Value)>, SelectError> {
    let params = match &selection.selector {
        Some(s) => ListParams::default().labels(s.as_str()),
        None => ListParams::default(),
    };
    let mut found = Vec::new();
    for ar in &selection.kinds {
        let apis: Vec<(Api<DynamicObject>, String)> = match &selection.scope {
            Scope::Namespaces(nss) => nss
                .iter()
                .map(|ns| (Api::namespaced_with(client.clone(), ns, ar), ns.clone()))
                .collect(),
            _ => vec![(Api::all_with(client.clone(), ar), "all namespaces".into())],
        };
        for (api, scope) in apis {
            let list = api
                .list(&params)
                .await
                .map_err(|e| list_error(ar, &scope, e))?;
            for item in list.items {
                let (Some(ns), Some(name)) = (&item.metadata.namespace, &item.metadata.name) else {
                    continue;
                };
                let object = ObjectRef::new(ar.clone(), ns.clone(), name.clone());
                let value = serde_json::to_value(&item).map_err(|source| FenceError::Json {
                    what: "object",
                    source,
                })?;
                found.push((object, value));
            }
        }
    }
    Ok(found)
}

fn list_error(ar: &ApiResource, scope: &str, e: kube::Error) -> SelectError {
    let resource = match ar.group.as_str() {
        "" => ar.plural.clone(),
        g => format!("{}.{g}", ar.plural),
    };
    let (source, scope) = (Box::new(e), format!("in {scope}"));
    SelectError::List(match source.as_ref() {
        kube::Error::Api(s) if s.code == 403 => FenceError::Forbidden {
            verb: "list",
            resource,
            target: scope,
            source,
        },
        _ => FenceError::Api {
            verb: "list",
            resource,
            target: scope,
            source,
        },
    })
}

/// The targets a selection resolved to.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Plan {
    /// The targets in the order to fence them (each before what it depends on).
    pub targets: Vec<ObjectRef>,
    /// Selected Kustomizations that apply a selected target: paused as its parent.
    pub as_parents: Vec<ObjectRef>,
    /// Where a `dependsOn` cycle among the targets was broken ([`flux_suspend::flux::order`]).
    pub broken_at: Vec<ObjectRef>,
}

/// The targets of what [`select`] found, in the order to fence them; `parent` is `--parent`
/// (`None`: from each object's `kustomize.toolkit.fluxcd.io/name|namespace` labels, as a
/// session reads it; `none`: no parent; else `[namespace/]name` in the object's namespace).
///
/// # Errors
///
/// [`SelectError::NoMatch`] when nothing was found; [`SelectError::Levels`] when a selected
/// object applies another selected object and is applied by a third.
pub fn plan(
    selection: &Selection,
    found: &[(ObjectRef, Value)],
    parent: Option<&str>,
) -> Result<Plan, SelectError> {
    if found.is_empty() {
        return Err(selection.no_match("", "pause"));
    }
    let parents: Vec<Option<ObjectRef>> =
        found.iter().map(|(o, v)| parent_of(o, v, parent)).collect();
    let is_selected = |p: &ObjectRef| found.iter().any(|(o, _)| o == p);
    let mut as_parents: Vec<ObjectRef> = Vec::new();
    for ((child, _), p) in found.iter().zip(&parents) {
        let Some(p) = p.as_ref().filter(|p| is_selected(p)) else {
            continue;
        };
        // A selected parent that is itself applied by a selected object: three levels.
        let at = found.iter().position(|(o, _)| o == p);
        if let Some(grand) = at
            .and_then(|i| parents[i].as_ref())
            .filter(|g| is_selected(g))
        {
            return Err(SelectError::Levels {
                object: p.to_string(),
                child: child.to_string(),
                parent: grand.to_string(),
            });
        }
        if !as_parents.contains(p) {
            as_parents.push(p.clone());
        }
    }
    let nodes: Vec<Node> = found
        .iter()
        .filter(|(o, _)| !as_parents.contains(o))
        .map(|(o, v)| Node::read(o.clone(), v))
        .collect();
    let ordered = release_order(&nodes);
    Ok(Plan {
        targets: ordered.fence(),
        as_parents,
        broken_at: ordered.broken_at,
    })
}

/// The parent a session will find for `object` (as `handoff_app::settings` resolves
/// `--parent` and the session reads labels).
fn parent_of(object: &ObjectRef, value: &Value, flag: Option<&str>) -> Option<ObjectRef> {
    let parent = match flag {
        Some("none") => None,
        Some(text) => split_namespaced(text, &object.namespace)
            .ok()
            .map(|(ns, name)| kustomization(&ns, &name)),
        None => flux_suspend::flux::parent_of(value).map(|p| kustomization(&p.namespace, &p.name)),
    };
    parent.filter(|p| p != object)
}

#[cfg(test)]
mod tests;
