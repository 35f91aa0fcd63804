//! What `-l SELECTOR`/`--all`, `--kind`, `--in` and `-A` ask for, checked before any request:
//! the front end passes the values as given, and gets a [`Selection`] or one line to print.

use flux_fence::discover::Scope;
use kube::api::ApiResource;

use super::{LabelSelector, Selection};

/// The selection flags as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SelectFlags {
    /// `-l`: a label selector.
    pub selector: Option<String>,
    /// `--all`: every object of the kinds, in the scope.
    pub all: bool,
    /// `--kind`: the kinds selected (none: Kustomizations).
    pub kinds: Vec<String>,
    /// `--in`: namespaces besides the default one.
    pub namespaces: Vec<String>,
    /// `-A`: every namespace.
    pub all_namespaces: bool,
}

impl SelectFlags {
    /// Whether `-l` or `--all` was given.
    #[must_use]
    pub fn selects(&self) -> bool {
        self.selector.is_some() || self.all
    }

    /// What the flags select, in `namespace` and each `--in` (or everywhere with `-A`):
    /// `None` when they select nothing (targets are named, or come from the config file).
    /// `named` is the first target named, if any: names and a selector together are refused,
    /// as `kubectl` refuses names with -l. Errors are one line, for exit code 2.
    ///
    /// # Errors
    /// A flag that needs -l or --all without it, both names and a selection, a selector or
    /// kind or namespace that does not parse.
    pub fn selection(
        &self,
        namespace: &str,
        named: Option<&str>,
    ) -> Result<Option<Selection>, String> {
        if !self.selects() {
            if !self.kinds.is_empty() || !self.namespaces.is_empty() || self.all_namespaces {
                return Err(
                    "--kind, --in and -A say what -l or --all select: give -l SELECTOR or --all"
                        .into(),
                );
            }
            return Ok(None);
        }
        let how = self.selector.as_deref().map_or("--all", |_| "-l");
        if let Some(t) = named {
            return Err(format!(
                "{how} selects the targets: name targets ({t:?}) or select them, not both"
            ));
        }
        let selector = match &self.selector {
            Some(text) => Some(text.parse::<LabelSelector>().map_err(|e| e.to_string())?),
            None => None,
        };
        let kinds = kinds(&self.kinds)?;
        let scope = if self.all_namespaces {
            Scope::All
        } else {
            let base = [namespace.to_string()];
            Scope::namespaces(base.iter().chain(&self.namespaces))
                .map_err(|ns| format!("--in {ns:?}: not a namespace name"))?
        };
        Ok(Some(Selection {
            kinds,
            scope,
            selector,
        }))
    }
}

/// `--kind`: each kind once, in the order given; none is Kustomizations (as `flux suspend
/// kustomization`).
///
/// # Errors
/// A kind a selector does not take, as one line.
pub fn kinds(given: &[String]) -> Result<Vec<ApiResource>, String> {
    let mut kinds = Vec::new();
    for k in given {
        let ar = crate::names::kind_resource(k)
            .filter(|ar| !flux_suspend::object::is_operator_kind(ar))
            .ok_or_else(|| {
                format!("--kind {k:?}: not a kind a selector takes (ks, hr; name rset and fi)")
            })?;
        if !kinds.contains(&ar) {
            kinds.push(ar);
        }
    }
    if kinds.is_empty() {
        kinds.push(flux_suspend::object::kustomization_resource());
    }
    Ok(kinds)
}

impl Selection {
    /// One stand-in target per selected kind (`Kind/namespace/selected`), so that every other
    /// setting is resolved and checked before the selection is listed; the listed targets
    /// take their place.
    #[must_use]
    pub fn stand_ins(&self) -> Vec<String> {
        let ns = match &self.scope {
            Scope::Namespaces(nss) => nss.first().cloned().unwrap_or_default(),
            _ => "default".into(),
        };
        let kinds = self.kinds.iter();
        kinds.map(|k| format!("{}/{ns}/selected", k.kind)).collect()
    }
}
