//! `cargo xtask catalog [--manifest FILE]`: the repository's entry for Flux's own plugin
//! catalog (github.com/fluxcd/plugins), `deploy/flux-plugin/catalog.yaml`, and the Plugin
//! manifest `cargo xtask dist` writes (`dist/handoff.yaml`, or FILE), checked against the
//! catalog's onboarding rules: its `cli.fluxcd.io/v1beta1` schemas (`PluginCatalog` and
//! `Plugin`: required fields, no others, names, bare semver versions, https URLs, `sha256:`
//! checksums, darwin/linux/windows and amd64/arm64), its reserved names (the flux CLI's own
//! commands), archives named `<bin>_<version>_<os>_<arch>.tar.gz` (`.zip` on windows), and
//! the catalog name equal to the manifest's. The entry must also say what this workspace
//! says: the `repository` URL of Cargo.toml as homepage and source, its `license` (an SPDX
//! identifier that LICENSE's text matches) and dist's description.
//!
//! The rules are written here from the catalog's published schemas and CI, not copied; the
//! files are read with the small YAML reader of `catalog/yaml.rs`.

mod yaml;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::{dist, paths};
use yaml::Node;

/// The `apiVersion` of both kinds.
const API_VERSION: &str = "cli.fluxcd.io/v1beta1";

/// The flux CLI's own commands: no plugin may take these names (fluxcd/plugins CI).
const RESERVED: &[&str] = &[
    "bootstrap",
    "build",
    "check",
    "completion",
    "create",
    "debug",
    "delete",
    "diff",
    "envsubst",
    "events",
    "export",
    "get",
    "help",
    "install",
    "list",
    "logs",
    "migrate",
    "plugin",
    "pull",
    "push",
    "reconcile",
    "resume",
    "stats",
    "suspend",
    "tag",
    "trace",
    "tree",
    "uninstall",
    "version",
];

/// The committed catalog entry, relative to the workspace root.
pub const CATALOG: &str = "deploy/flux-plugin/catalog.yaml";

/// `cargo xtask catalog [--manifest FILE]`.
pub fn run(flags: &[&str]) -> anyhow::Result<()> {
    let manifest_flag = match flags {
        [] => None,
        ["--manifest", file] => Some(PathBuf::from(file)),
        _ => bail!("usage: cargo xtask catalog [--manifest FILE]"),
    };
    let root = paths::root();
    let catalog = read(&root.join(CATALOG))?;
    let mut problems = check_catalog(&catalog);
    problems.extend(check_workspace(&catalog, &root)?);
    let (what, plugin) = manifest_to_check(manifest_flag, &root)?;
    problems.extend(check_plugin(&plugin));
    problems.extend(check_pair(&catalog, &plugin));
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("catalog: {p}");
        }
        bail!("{} problem(s) in {CATALOG} and {what}", problems.len());
    }
    println!(
        "catalog: ok {CATALOG} and {what}: plugin={} rules={}",
        dist::PLUGIN,
        RULES.len()
    );
    Ok(())
}

/// The manifest to check and how to name it: FILE, else `dist/handoff.yaml` when there, else
/// the shape dist writes (one sample platform: no archive was built here).
fn manifest_to_check(file: Option<PathBuf>, root: &Path) -> anyhow::Result<(String, Node)> {
    let default = root.join("dist").join(format!("{}.yaml", dist::PLUGIN));
    if let Some(file) = file.or_else(|| default.is_file().then_some(default)) {
        return Ok((file.display().to_string(), read(&file)?));
    }
    let version = dist::version(root)?;
    let repo = dist::repository(root)?;
    let sample = dist::Platform {
        os: "linux".into(),
        arch: "amd64".into(),
        url: format!(
            "{repo}/releases/download/v{version}/{}_{version}_linux_amd64.tar.gz",
            dist::BIN
        ),
        checksum: format!("sha256:{}", dist::sha256_hex(b"")),
    };
    let text = dist::manifest(&version, &repo, &[sample]);
    let what = "the manifest dist writes (a sample platform)";
    Ok((what.into(), yaml::parse(&text)?))
}

/// The rules, as the failures name them (the `catalog_` tests have a failing case for each).
pub const RULES: &[&str] = &[
    "apiVersion",
    "kind",
    "required",
    "unknown field",
    "name",
    "reserved",
    "duplicate",
    "https",
    "license",
    "version",
    "os",
    "arch",
    "checksum",
    "archive name",
    "not in the catalog",
    "workspace",
];

fn read(path: &Path) -> anyhow::Result<Node> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    yaml::parse(&text).with_context(|| format!("reading {}", path.display()))
}

/// The `PluginCatalog`'s problems, each naming its rule and place.
pub fn check_catalog(doc: &Node) -> Vec<String> {
    let mut p = Vec::new();
    kind(doc, "PluginCatalog", &mut p);
    fields(doc, "", &["apiVersion", "kind", "plugins"], &mut p);
    let entries = list(doc, "plugins", "", &mut p);
    let mut seen = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let at = format!("plugins[{i}]");
        let required = ["name", "description", "homepage", "source", "license"];
        fields(e, &at, &required, &mut p);
        let name = text(e, "name");
        name_rule(name, &format!("{at}.name"), true, &mut p);
        if seen.contains(&name) {
            p.push(format!("duplicate: {at}.name {name:?} is listed twice"));
        }
        seen.push(name);
        nonempty(e, "description", &at, &mut p);
        for key in ["homepage", "source"] {
            https(text(e, key), &format!("{at}.{key}"), &mut p);
        }
        let license = text(e, "license");
        if !is_spdx_id(license) {
            p.push(format!(
                "license: {at}.license {license:?} is not an SPDX identifier"
            ));
        }
    }
    p
}

/// The Plugin manifest's problems.
pub fn check_plugin(doc: &Node) -> Vec<String> {
    let mut p = Vec::new();
    kind(doc, "Plugin", &mut p);
    let required = [
        "apiVersion",
        "kind",
        "name",
        "description",
        "homepage",
        "source",
        "bin",
        "versions",
    ];
    fields(doc, "", &required, &mut p);
    name_rule(text(doc, "name"), "name", true, &mut p);
    let bin = text(doc, "bin");
    name_rule(bin, "bin", false, &mut p);
    nonempty(doc, "description", "", &mut p);
    for key in ["homepage", "source"] {
        https(text(doc, key), key, &mut p);
    }
    for (i, v) in list(doc, "versions", "", &mut p).iter().enumerate() {
        let at = format!("versions[{i}]");
        fields(v, &at, &["version", "platforms"], &mut p);
        let version = text(v, "version");
        if !is_bare_semver(version) {
            p.push(format!(
                "version: {at}.version {version:?} is not a bare semver (no `v`)"
            ));
        }
        for (j, pf) in list(v, "platforms", &at, &mut p).iter().enumerate() {
            let at = format!("{at}.platforms[{j}]");
            fields(pf, &at, &["os", "arch", "url", "checksum"], &mut p);
            let (os, arch) = (text(pf, "os"), text(pf, "arch"));
            if !["darwin", "linux", "windows"].contains(&os) {
                p.push(format!(
                    "os: {at}.os {os:?} is not darwin, linux or windows"
                ));
            }
            if !["amd64", "arm64"].contains(&arch) {
                p.push(format!("arch: {at}.arch {arch:?} is not amd64 or arm64"));
            }
            let url = text(pf, "url");
            https(url, &format!("{at}.url"), &mut p);
            let ext = if os == "windows" { "zip" } else { "tar.gz" };
            let want = format!("{bin}_{version}_{os}_{arch}.{ext}");
            if url.rsplit('/').next() != Some(want.as_str()) {
                p.push(format!("archive name: {at}.url does not end in /{want}"));
            }
            let sum = text(pf, "checksum");
            let hex = sum.strip_prefix("sha256:").unwrap_or_default();
            let lower_hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
            if hex.len() != 64 || !hex.chars().all(lower_hex) {
                p.push(format!(
                    "checksum: {at}.checksum {sum:?} is not sha256:<64 lowercase hex>"
                ));
            }
        }
    }
    p
}

/// The manifest's plugin must be in the catalog, under the same homepage and source.
pub fn check_pair(catalog: &Node, plugin: &Node) -> Vec<String> {
    let name = text(plugin, "name");
    let Some(Node::List(entries)) = catalog.get("plugins") else {
        return vec![format!(
            "not in the catalog: no plugins to find {name:?} in"
        )];
    };
    let Some(entry) = entries.iter().find(|e| text(e, "name") == name) else {
        return vec![format!(
            "not in the catalog: the manifest's name {name:?} has no entry"
        )];
    };
    let mut p = Vec::new();
    for key in ["homepage", "source"] {
        if text(entry, key) != text(plugin, key) {
            p.push(format!(
                "not in the catalog: the entry's {key} is not the manifest's"
            ));
        }
    }
    p
}

/// The `handoff` entry says what the workspace says: repository, license, description.
pub fn check_workspace(catalog: &Node, root: &Path) -> anyhow::Result<Vec<String>> {
    let repo = dist::repository(root)?;
    let cargo = fs::read_to_string(root.join("Cargo.toml"))?;
    let license = cargo
        .lines()
        .find_map(|l| l.strip_prefix("license = \""))
        .and_then(|v| v.strip_suffix('"'))
        .context("no license in Cargo.toml")?;
    let license_text = fs::read_to_string(root.join("LICENSE"))?;
    Ok(workspace_rules(
        catalog,
        &repo,
        license,
        license_of(&license_text),
    ))
}

/// `check_workspace` on given values (the tests' entry point).
fn workspace_rules(catalog: &Node, repo: &str, license: &str, file: Option<&str>) -> Vec<String> {
    let mut p = Vec::new();
    if file != Some(license) {
        p.push(format!(
            "workspace: LICENSE's text is not {license} (Cargo.toml's license)"
        ));
    }
    let entries = match catalog.get("plugins") {
        Some(Node::List(e)) => e.as_slice(),
        _ => &[],
    };
    let Some(entry) = entries.iter().find(|e| text(e, "name") == dist::PLUGIN) else {
        p.push(format!("workspace: no `{}` entry", dist::PLUGIN));
        return p;
    };
    for (key, want) in [
        ("homepage", repo),
        ("source", repo),
        ("license", license),
        ("description", dist::DESCRIPTION),
    ] {
        let got = text(entry, key);
        if got.trim_end_matches('/') != want {
            p.push(format!("workspace: {key} {got:?} is not {want:?}"));
        }
    }
    p
}

/// The SPDX identifier of a license text this project could carry, when recognised.
fn license_of(text: &str) -> Option<&'static str> {
    let head: String = text
        .split_whitespace()
        .take(12)
        .collect::<Vec<_>>()
        .join(" ");
    if head.starts_with("Apache License Version 2.0") {
        Some("Apache-2.0")
    } else if head.starts_with("MIT License") {
        Some("MIT")
    } else {
        None
    }
}

/// An SPDX short identifier: letters, digits, `.`, `-` (and a trailing `+`), a letter first.
fn is_spdx_id(id: &str) -> bool {
    let body = id.strip_suffix('+').unwrap_or(id);
    body.starts_with(|c: char| c.is_ascii_alphabetic())
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// `MAJOR.MINOR.PATCH` with an optional `-pre` (the catalog's version pattern).
fn is_bare_semver(v: &str) -> bool {
    let (core, pre) = match v.split_once('-') {
        Some((c, pre)) => (c, Some(pre)),
        None => (v, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        && pre.is_none_or(|p| !p.is_empty())
}

fn kind(doc: &Node, want: &str, p: &mut Vec<String>) {
    if text(doc, "apiVersion") != API_VERSION {
        p.push(format!("apiVersion: not {API_VERSION}"));
    }
    if text(doc, "kind") != want {
        p.push(format!("kind: {:?} is not {want}", text(doc, "kind")));
    }
}

/// Every `required` key present, and no other key (the schemas allow no others).
fn fields(node: &Node, at: &str, required: &[&str], p: &mut Vec<String>) {
    let Node::Map(entries) = node else {
        p.push(format!("required: {} is not a mapping", place(at)));
        return;
    };
    for key in required {
        if node.get(key).is_none() {
            p.push(format!("required: {} has no {key}", place(at)));
        }
    }
    for (key, _) in entries {
        if !required.contains(&key.as_str()) {
            p.push(format!("unknown field: {} has {key}", place(at)));
        }
    }
}

fn place(at: &str) -> &str {
    if at.is_empty() { "the document" } else { at }
}

/// The non-empty list under `key`, else a problem and nothing.
fn list<'a>(node: &'a Node, key: &str, at: &str, p: &mut Vec<String>) -> &'a [Node] {
    match node.get(key) {
        Some(Node::List(items)) if !items.is_empty() => items,
        Some(_) => {
            p.push(format!(
                "required: {} {key} is not a non-empty list",
                place(at)
            ));
            &[]
        }
        None => &[],
    }
}

/// The scalar under `key`, or "" (its absence is the `required` rule's to report).
fn text<'a>(node: &'a Node, key: &str) -> &'a str {
    node.get(key).and_then(Node::text).unwrap_or_default()
}

fn nonempty(node: &Node, key: &str, at: &str, p: &mut Vec<String>) {
    if node.get(key).is_some() && text(node, key).trim().is_empty() {
        p.push(format!("required: {} {key} is empty", place(at)));
    }
}

/// `^[a-z][a-z0-9-]*$`, and for a plugin name none of the flux CLI's own commands.
fn name_rule(name: &str, at: &str, plugin: bool, p: &mut Vec<String>) {
    let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        p.push(format!("name: {at} {name:?} is not [a-z][a-z0-9-]*"));
    }
    if plugin && RESERVED.contains(&name) {
        p.push(format!("reserved: {at} {name:?} is a flux command"));
    }
}

/// An https URL with a host and no whitespace.
fn https(url: &str, at: &str, p: &mut Vec<String>) {
    let host = url
        .strip_prefix("https://")
        .map(|r| r.split('/').next().unwrap_or_default());
    if host.is_none_or(str::is_empty) || url.contains(char::is_whitespace) {
        p.push(format!("https: {at} {url:?} is not an https URL"));
    }
}

#[cfg(test)]
mod tests;
