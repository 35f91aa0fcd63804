//! `cargo xtask docpaths`: every repository path the design docs name still exists, so the map
//! a newcomer starts from (docs/design/) cannot point at a file that moved or went away.
//!
//! A path is a backticked span in `docs/design/*.md` that starts with a top-level entry of the
//! repository (`flux-fence/`, `handoff-cli/`, `docs/`, ...) and holds no space or wildcard:
//! `` `flux-fence/src/engine.rs` ``, `` `handoff-cli/src/cmd/` ``, ending in a file name with an
//! extension or a `/`, or of three parts or more (`flux-fence/github` is a feature). A
//! trailing `:LINE` or `#anchor` is dropped. Paths relative to a crate (`src/…`) are not
//! checked.

use std::path::Path;

/// The docs whose paths are checked, relative to the workspace root.
pub const CHECKED: &str = "docs/design";

/// Checks every `.md` file under [`CHECKED`]; prints `docpaths: files=N paths=M` and fails
/// naming each path that does not exist.
pub fn run() -> anyhow::Result<()> {
    let root = crate::paths::root();
    let tops = top_entries(&root)?;
    let mut docs: Vec<_> = std::fs::read_dir(root.join(CHECKED))?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let (mut checked, mut missing) = (0, Vec::new());
    for doc in &docs {
        let text = std::fs::read_to_string(doc)?;
        for path in paths(&text, &tops) {
            checked += 1;
            if !root.join(&path).exists() {
                let name = doc.file_name().unwrap_or_default().to_string_lossy();
                missing.push(format!("{CHECKED}/{name}: {path}"));
            }
        }
    }
    println!("docpaths: files={} paths={checked}", docs.len());
    if missing.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "docpaths: the design docs name {} path(s) that do not exist:\n  {}",
            missing.len(),
            missing.join("\n  ")
        )
    }
}

/// The names of the repository's top-level directories (hidden ones and `target` left out).
fn top_entries(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut tops = Vec::new();
    for e in std::fs::read_dir(root)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        if e.path().is_dir() && !name.starts_with('.') && name != "target" {
            tops.push(name);
        }
    }
    Ok(tops)
}

/// The repository paths named in backticks in `text`: spans starting with `TOP/` for one of
/// `tops`, without spaces or wildcards, `:LINE` and `#anchor` dropped.
pub fn paths(text: &str, tops: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || span.contains(char::is_whitespace) || span.contains(['*', '<', '{', '…'])
        {
            continue;
        }
        let Some((top, _)) = span.split_once('/') else {
            continue;
        };
        if !tops.iter().any(|t| t == top) {
            continue;
        }
        let path = span.split(['#', ':']).next().unwrap_or(span);
        // `crate/feature` (`flux-fence/github`) is no path: a path ends in a file name with an
        // extension or a `/`, or has three or more parts.
        let last = path.rsplit('/').next().unwrap_or_default();
        if !(last.contains('.') || path.ends_with('/') || path.matches('/').count() >= 2) {
            continue;
        }
        found.push(path.to_string());
    }
    found
}

#[cfg(test)]
mod tests {
    use super::paths;

    #[test]
    fn docpaths_names_repository_paths_in_backticks_only() {
        let tops = ["flux-fence".to_string(), "docs".to_string()];
        let text = "The engine (`flux-fence/src/engine.rs`), its tests \
                    (`flux-fence/src/engine_tests.rs:12`), `docs/chaos.md#soak`, \
                    `flux_fence::engine`, `src/lib.rs`, `flux-fence/src/*.rs`, \
                    `flux-fence/tests/{a,b}.rs`, `kubectl get ks`, `other/x.rs`, \
                    flux-fence/not-in-backticks.rs, `flux-fence/src/`, `flux-fence/github`, \
                    `docs/design/x`";
        assert_eq!(
            paths(text, &tops),
            [
                "flux-fence/src/engine.rs",
                "flux-fence/src/engine_tests.rs",
                "docs/chaos.md",
                "flux-fence/src/",
                "docs/design/x"
            ]
        );
    }
}
