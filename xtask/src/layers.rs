//! `cargo xtask layers`: no import circle between the files of any workspace crate's `src/`.
//!
//! Every member of the workspace (`members` of the root `Cargo.toml`) is read: the library
//! (`src/lib.rs` and every file under `src/` but `src/main.rs` and `src/bin/`), or, for a crate
//! without one, its binary (`src/main.rs` and the rest of `src/` but `src/bin/`). A binary
//! beside a library reaches it by the crate's name, as any client does, so it is not read;
//! nor are the one-file binaries of `src/bin/`. Each file is a node (its module path: `cmd/fences/mod.rs` is `cmd::fences`); each
//! `crate::a::b` path written in it, outside comments and string literals, is an arrow to the
//! file of the longest module prefix of that path (`crate::cli::Global` → `cli`,
//! `crate::cmd::fences::evidence::Evidence` → `cmd::fences::evidence`). `use crate::{a, b::c}`
//! groups are followed. `#[cfg(test)] mod` blocks are left out: a unit test may drive the whole
//! command line from the top (`Cli::try_parse_from`) without that being a layer's arrow.
//! `super::a::b` paths are arrows too, resolved from the file's own module (in
//! `cmd/doctor.rs`, `super::rbac::x` is `cmd::rbac`), so two commands of one directory cannot
//! import each other unseen; `self::` paths stay inside their file. The check fails naming one
//! circle, in order, so the layers stay one-way:
//! `main` → `cli` → `cmd/*` → `args`, `session`, `settings`, `output`, … (see
//! docs/design/architecture.md, "Layers of handoff-cli").

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Reads every workspace crate's `src/`, prints `layers: crates=N files=N arrows=M`, and fails
/// naming every crate with a circle, one circle each.
pub fn run() -> anyhow::Result<()> {
    let root = crate::paths::root();
    let (mut files, mut arrows, mut circles) = (0, 0, Vec::new());
    let members = members(&std::fs::read_to_string(root.join("Cargo.toml"))?);
    for member in &members {
        let src = root.join(member).join("src");
        let lib = src.join("lib.rs").exists();
        let mut read = Vec::new();
        collect(&src, &src, lib, &mut read)?;
        let graph = graph(&read);
        files += graph.len();
        arrows += graph.values().map(BTreeSet::len).sum::<usize>();
        if let Some(cycle) = find_cycle(&graph) {
            circles.push(format!("{member}/src: {}", cycle.join(" -> ")));
        }
    }
    println!(
        "layers: crates={} files={files} arrows={arrows}",
        members.len()
    );
    if circles.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("layers: import circles:\n  {}", circles.join("\n  "))
    }
}

/// The workspace's members, as the root manifest lists them (`members = ["a", "b/c"]`).
pub fn members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members") else {
        return Vec::new();
    };
    let rest = &manifest[start..];
    let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) else {
        return Vec::new();
    };
    rest[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Every `.rs` file under `dir` as (module, source), but `src/bin/` and, when the crate has a
/// library (`lib`), its `src/main.rs`.
fn collect(
    root: &Path,
    dir: &Path,
    lib: bool,
    out: &mut Vec<(String, String)>,
) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::path);
    for entry in entries {
        let path = entry.path();
        let rel = path
            .strip_prefix(root)?
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "bin" || (lib && rel == "main.rs") {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, lib, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((module_of(&rel), std::fs::read_to_string(&path)?));
        }
    }
    Ok(())
}

/// The module path of a file relative to `src/`: `main.rs` → `crate`, `cli.rs` → `cli`,
/// `cmd/fences/mod.rs` → `cmd::fences`.
pub fn module_of(rel: &str) -> String {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let parts: Vec<&str> = stem
        .split('/')
        .filter(|p| !matches!(*p, "mod" | "main" | "lib"))
        .collect();
    if parts.is_empty() {
        "crate".to_string()
    } else {
        parts.join("::")
    }
}

/// The file-level graph: each module to the set of modules its `crate::` paths reach
/// (itself left out).
pub fn graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let known: BTreeSet<&str> = files.iter().map(|(m, _)| m.as_str()).collect();
    let mut graph = BTreeMap::new();
    for (module, source) in files {
        let mut targets = BTreeSet::new();
        let code = without_tests(&code_only(source));
        let relative = super_paths(&code)
            .into_iter()
            .filter_map(|(up, path)| resolve_super(module, up, &path));
        for path in crate_paths(&code).into_iter().chain(relative) {
            let segs: Vec<&str> = path.split("::").collect();
            let target = (1..=segs.len())
                .rev()
                .map(|n| segs[..n].join("::"))
                .find(|m| known.contains(m.as_str()));
            if let Some(t) = target.filter(|t| t != module) {
                targets.insert(t);
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// Depth-first walk from `node`; the circle when it meets a node still on `path`.
fn visit<'a>(
    node: &'a str,
    graph: &'a BTreeMap<String, BTreeSet<String>>,
    state: &mut BTreeMap<&'a str, u8>,
    path: &mut Vec<&'a str>,
) -> Option<Vec<String>> {
    state.insert(node, 1);
    path.push(node);
    for next in graph.get(node).into_iter().flatten() {
        match state.get(next.as_str()).copied().unwrap_or(0) {
            1 => {
                let start = path.iter().position(|n| *n == next.as_str())?;
                let mut cycle: Vec<String> =
                    path[start..].iter().map(ToString::to_string).collect();
                cycle.push(next.clone());
                return Some(cycle);
            }
            0 => {
                if let Some(c) = visit(next, graph, state, path) {
                    return Some(c);
                }
            }
            _ => {}
        }
    }
    path.pop();
    state.insert(node, 2);
    None
}

/// The first circle found (depth first, in name order), as `a -> b -> ... -> a`.
pub fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // 0 = unseen, 1 = on the current path, 2 = done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    let mut path: Vec<&str> = Vec::new();
    for node in graph.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(node, graph, &mut state, &mut path)
        {
            return Some(c);
        }
    }
    None
}

/// The source with comments and the insides of string literals blanked, so doc text that
/// names ``[`crate::notify`]`` is not an arrow.
pub fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_before(&chars, i) {
            // Raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && matches!(next, Some('"' | '\\')) {
            // A char literal holding a quote or an escape: '"', '\'', '\n'.
            let mut j = i + 2;
            if next == Some('\\') {
                j += 1;
            }
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            i = j + 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` (already [`code_only`]) without its `#[cfg(test)] mod NAME { ... }` blocks.
pub fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let is_mod = after.trim_start().starts_with("mod ");
        let open = after.find(['{', ';']);
        match open {
            Some(o) if is_mod && after.as_bytes()[o] == b'{' => {
                let mut depth = 0usize;
                let mut end = after.len();
                for (i, c) in after[o..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => {
                out.push_str("#[cfg(test)]");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// Every module path written after `crate::`, groups expanded: `use crate::{a, b::{c, d}}`
/// gives `a`, `b::c`, `b::d`.
pub fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        rest = tree(rest, String::new(), &mut found);
    }
    found
}

/// Every path written after `super::` (once or more), groups expanded, with how many levels it
/// goes up: `use super::{a, b::c}` gives `(1, a)`, `(1, b::c)`; `super::super::x` `(2, x)`.
pub fn super_paths(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("super::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "super::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut up = 1;
        while let Some(after) = rest.trim_start().strip_prefix("super::") {
            up += 1;
            rest = after;
        }
        let mut paths = Vec::new();
        rest = tree(rest, String::new(), &mut paths);
        found.extend(paths.into_iter().map(|p| (up, p)));
    }
    found
}

/// `path`, written `up` levels of `super::` above the file of `module`, as a path from the
/// crate root; `None` above the root.
pub fn resolve_super(module: &str, up: usize, path: &str) -> Option<String> {
    let mut segs: Vec<&str> = if module == "crate" {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    for _ in 0..up {
        segs.pop()?;
    }
    segs.push(path);
    Some(segs.join("::"))
}

/// Reads one use tree (`a::b`, `a::{b, c::d}`) after a prefix; returns what follows it.
fn tree<'a>(mut s: &'a str, prefix: String, found: &mut Vec<String>) -> &'a str {
    let mut path = prefix;
    loop {
        s = s.trim_start();
        if let Some(inner) = s.strip_prefix('{') {
            s = inner;
            loop {
                s = s.trim_start();
                if let Some(after) = s.strip_prefix('}') {
                    return after;
                }
                if s.is_empty() {
                    return s;
                }
                s = tree(s, path.clone(), found);
                s = s.trim_start();
                if let Some(after) = s.strip_prefix(',') {
                    s = after;
                }
            }
        }
        let len = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        if len == 0 {
            if !path.is_empty() {
                found.push(path);
            }
            return s;
        }
        let seg = &s[..len];
        if seg != "self" {
            if !path.is_empty() {
                path.push_str("::");
            }
            path.push_str(seg);
        }
        s = &s[len..];
        let Some(after) = s.strip_prefix("::") else {
            found.push(path);
            return s;
        };
        s = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(rel, src)| (module_of(rel), src.to_string()))
            .collect()
    }

    #[test]
    fn layers_every_workspace_member_is_read() {
        let manifest = "[workspace]\nresolver = \"3\"\nmembers = [\"flux-fence\", \"suites/chaos\",\n  \"verify\"]\n\n[workspace.package]\nedition = \"2024\"\n";
        assert_eq!(members(manifest), ["flux-fence", "suites/chaos", "verify"]);
        assert!(members("[package]\nname = \"x\"\n").is_empty());
        // The real manifest: every crate of the workspace, the libraries first.
        let real = std::fs::read_to_string(crate::paths::root().join("Cargo.toml")).unwrap();
        let m = members(&real);
        for c in [
            "flux-fence",
            "flux-suspend",
            "ghcr-auth",
            "handoff-cli",
            "verify",
            "xtask",
        ] {
            assert!(m.iter().any(|x| x == c), "{c} not in {m:?}");
        }
    }

    #[test]
    fn layers_module_of_files() {
        for (rel, want) in [
            ("main.rs", "crate"),
            ("cli.rs", "cli"),
            ("cmd/mod.rs", "cmd"),
            ("cmd/fences/evidence.rs", "cmd::fences::evidence"),
            ("output/yaml.rs", "output::yaml"),
        ] {
            assert_eq!(module_of(rel), want, "{rel}");
        }
    }

    #[test]
    fn layers_paths_follow_groups_and_skip_text() {
        let code = code_only(
            "use crate::{exit, failure::{Failure, chain}, cmd::fences::evidence};\n\
             /// [`crate::notify`] in a doc\n\
             // crate::cli in a comment\n\
             let s = \"crate::session\"; let r = r#\"crate::settings\"#; let q = '\"';\n\
             fn f() -> crate::output::Output { my_crate::x() }\n",
        );
        assert_eq!(
            crate_paths(&code),
            [
                "exit",
                "failure::Failure",
                "failure::chain",
                "cmd::fences::evidence",
                "output::Output"
            ]
        );
    }

    #[test]
    fn layers_test_modules_are_no_arrows() {
        let code = code_only(
            "use crate::exit;\n#[cfg(test)]\nmod tests {\n    fn f() { crate::cli::Cli::x(); }\n}\n\
             #[cfg(test)]\nuse crate::output;\nfn g() -> crate::failure::Failure {}\n",
        );
        assert_eq!(
            crate_paths(&without_tests(&code)),
            ["exit", "output", "failure::Failure"]
        );
    }

    #[test]
    fn layers_graph_resolves_longest_module() {
        let g = graph(&files(&[
            ("main.rs", "use crate::cli::Cli; mod cli; mod cmd;"),
            ("cli.rs", "Ghcr(crate::cmd::ghcr::GhcrArgs)"),
            ("cmd/mod.rs", ""),
            (
                "cmd/ghcr/mod.rs",
                "use crate::cmd::ghcr::x; use crate::args::Global;",
            ),
            ("args.rs", ""),
        ]));
        let arrows = |m: &str| g[m].iter().cloned().collect::<Vec<_>>();
        assert_eq!(arrows("crate"), ["cli"]);
        assert_eq!(arrows("cli"), ["cmd::ghcr"]);
        assert_eq!(arrows("cmd::ghcr"), ["args"], "its own paths are no arrow");
        assert_eq!(find_cycle(&g), None);
    }

    #[test]
    fn layers_super_paths_are_arrows_from_the_files_own_module() {
        let code = code_only(
            "use super::ghcr::{FanoutArgs, route};\nlet c = super::rbac::plan(); \
             use super::super::exit; let s = self::x; fn f() -> my_super::y {}\n",
        );
        assert_eq!(
            super_paths(&code),
            [
                (1, "ghcr::FanoutArgs".to_string()),
                (1, "ghcr::route".to_string()),
                (1, "rbac::plan".to_string()),
                (2, "exit".to_string())
            ]
        );
        assert_eq!(
            resolve_super("cmd::doctor", 1, "rbac::plan").as_deref(),
            Some("cmd::rbac::plan")
        );
        assert_eq!(
            resolve_super("cmd::fences::evidence", 2, "exit").as_deref(),
            Some("cmd::exit")
        );
        assert_eq!(resolve_super("cli", 1, "exit").as_deref(), Some("exit"));
        assert_eq!(resolve_super("crate", 1, "x"), None);
        // Two commands of one directory importing each other through `super::`: a circle.
        let g = graph(&files(&[
            ("cmd/mod.rs", ""),
            ("cmd/doctor.rs", "let p = super::rbac::ghcr_plan();"),
            ("cmd/rbac.rs", "let c = super::doctor::checkup();"),
        ]));
        assert_eq!(
            find_cycle(&g).map(|c| c.join(" -> ")).as_deref(),
            Some("cmd::doctor -> cmd::rbac -> cmd::doctor")
        );
    }

    #[test]
    fn layers_cycle_is_named_in_order() {
        let g = graph(&files(&[
            ("main.rs", "use crate::cli::Cli;"),
            ("cli.rs", "crate::cmd::pause::PauseArgs"),
            ("cmd/pause.rs", "use crate::session;"),
            ("session.rs", "use crate::cli::HolderArg;"),
            ("output.rs", ""),
        ]));
        assert_eq!(
            find_cycle(&g).map(|c| c.join(" -> ")).as_deref(),
            Some("cli -> cmd::pause -> session -> cli")
        );
    }
}
