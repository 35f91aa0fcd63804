//! The catalog rules, each with a case that passes and one that fails.

use super::*;

const REPO: &str = "https://github.com/flux-handoff/flux-handoff";

/// The manifest dist writes for three platforms of release `version`.
fn dist_manifest(version: &str) -> String {
    let platforms: Vec<dist::Platform> =
        [("darwin", "arm64"), ("linux", "amd64"), ("linux", "arm64")]
            .into_iter()
            .map(|(os, arch)| dist::Platform {
                os: os.into(),
                arch: arch.into(),
                url: format!(
                    "{REPO}/releases/download/v{version}/flux-handoff_{version}_{os}_{arch}.tar.gz"
                ),
                checksum: format!("sha256:{}", dist::sha256_hex(os.as_bytes())),
            })
            .collect();
    dist::manifest(version, REPO, &platforms)
}

fn catalog_text() -> String {
    format!(
        "apiVersion: cli.fluxcd.io/v1beta1\nkind: PluginCatalog\nplugins:\n  - name: handoff\n    \
         description: {}\n    homepage: {REPO}\n    source: {REPO}\n    license: Apache-2.0\n",
        dist::DESCRIPTION
    )
}

fn parsed(text: &str) -> Node {
    yaml::parse(text).unwrap_or_else(|e| panic!("{e:#}\n{text}"))
}

/// The problems of `text` after replacing `from` by `to` (which must occur).
fn problems_after(
    text: &str,
    from: &str,
    to: &str,
    check: fn(&Node) -> Vec<String>,
) -> Vec<String> {
    assert!(text.contains(from), "{from:?} not in\n{text}");
    check(&parsed(&text.replacen(from, to, 1)))
}

/// Each case `(from, to, rule)`: the document with `from` replaced by `to` has a problem of
/// `rule`. Returns the rules seen.
fn failing_cases<'a>(
    good: &str,
    cases: &[(&str, &str, &'a str)],
    check: fn(&Node) -> Vec<String>,
) -> Vec<&'a str> {
    let mut covered = Vec::new();
    for (from, to, rule) in cases {
        let p = problems_after(good, from, to, check);
        assert!(
            p.iter().any(|m| m.starts_with(&format!("{rule}:"))),
            "{from:?} -> {to:?}: want {rule}, got {p:?}"
        );
        covered.push(*rule);
    }
    covered
}

#[test]
fn catalog_committed_entry_validates_against_the_rules_and_the_workspace() {
    let root = paths::root();
    let catalog = read(&root.join(CATALOG)).unwrap();
    assert_eq!(check_catalog(&catalog), Vec::<String>::new());
    assert_eq!(
        check_workspace(&catalog, &root).unwrap(),
        Vec::<String>::new()
    );
    // The entry is the one these tests build too.
    assert_eq!(catalog, parsed(&catalog_text()));
}

#[test]
fn catalog_the_manifest_dist_writes_validates_and_pairs_with_the_entry() {
    for version in ["0.1.0", "1.2.3-rc.1"] {
        let plugin = parsed(&dist_manifest(version));
        assert_eq!(check_plugin(&plugin), Vec::<String>::new(), "{version}");
        assert_eq!(
            check_pair(&parsed(&catalog_text()), &plugin),
            Vec::<String>::new()
        );
    }
}

#[test]
fn catalog_each_catalog_rule_has_a_failing_case() {
    let good = catalog_text();
    let cases: &[(&str, &str, &str)] = &[
        ("cli.fluxcd.io/v1beta1", "cli.fluxcd.io/v1", "apiVersion"),
        ("kind: PluginCatalog", "kind: Plugin", "kind"),
        ("    license: Apache-2.0\n", "", "required"),
        (
            "    license: Apache-2.0\n",
            "    license: Apache-2.0\n    bin: x\n",
            "unknown field",
        ),
        ("name: handoff", "name: Handoff", "name"),
        ("name: handoff", "name: 9lives", "name"),
        ("name: handoff", "name: suspend", "reserved"),
        ("name: handoff", "name: tree", "reserved"),
        ("homepage: https://", "homepage: http://", "https"),
        ("source: https://github.com", "source: https://", "https"),
        ("license: Apache-2.0", "license: Apache 2.0", "license"),
        ("license: Apache-2.0", "license: ''", "license"),
        (
            "    license: Apache-2.0\n",
            "    license: Apache-2.0\n  - name: handoff\n    description: d\n    homepage: https://a\n    \
             source: https://a\n    license: MIT\n",
            "duplicate",
        ),
    ];
    let covered = failing_cases(&good, cases, check_catalog);
    let empty = check_catalog(&parsed(
        "apiVersion: cli.fluxcd.io/v1beta1\nkind: PluginCatalog\nplugins: x\n",
    ));
    assert!(
        empty.iter().any(|m| m.starts_with("required:")),
        "{empty:?}"
    );
    assert!(
        RULES[..9].iter().all(|r| covered.contains(r)),
        "{covered:?}"
    );
}

#[test]
fn catalog_each_manifest_rule_has_a_failing_case() {
    let good = dist_manifest("0.1.0");
    let cases: &[(&str, &str, &str)] = &[
        (
            "apiVersion: cli.fluxcd.io/v1beta1",
            "apiVersion: v1",
            "apiVersion",
        ),
        ("kind: Plugin", "kind: PluginCatalog", "kind"),
        ("bin: flux-handoff\n", "", "required"),
        (
            "bin: flux-handoff\n",
            "bin: flux-handoff\nlicense: Apache-2.0\n",
            "unknown field",
        ),
        (
            "        checksum:",
            "        extractPath: bin/flux-handoff\n        checksum:",
            "unknown field",
        ),
        ("name: handoff", "name: hand_off", "name"),
        ("bin: flux-handoff", "bin: Flux-Handoff", "name"),
        ("name: handoff", "name: plugin", "reserved"),
        ("homepage: https://", "homepage: ftp://", "https"),
        ("url: https://", "url: http://", "https"),
        ("version: 0.1.0", "version: v0.1.0", "version"),
        ("version: 0.1.0", "version: 0.1", "version"),
        ("os: linux", "os: freebsd", "os"),
        ("arch: amd64", "arch: x86_64", "arch"),
        ("checksum: sha256:", "checksum: sha512:", "checksum"),
        ("checksum: sha256:", "checksum: sha256:AB", "checksum"),
        ("_linux_amd64.tar.gz", "_linux_amd64.zip", "archive name"),
        (
            "_linux_amd64.tar.gz",
            "_linux_x86_64.tar.gz",
            "archive name",
        ),
    ];
    let covered = failing_cases(&good, cases, check_plugin);
    let no_versions = check_plugin(&parsed(
        "apiVersion: cli.fluxcd.io/v1beta1\nkind: Plugin\nname: handoff\nversions: none\n",
    ));
    assert!(
        no_versions
            .iter()
            .any(|m| m.contains("versions is not a non-empty list")),
        "{no_versions:?}"
    );
    for rule in ["version", "os", "arch", "checksum", "archive name"] {
        assert!(covered.contains(&rule), "{rule}");
    }
}

#[test]
fn catalog_the_entry_and_the_manifest_must_name_the_same_plugin() {
    let catalog = parsed(&catalog_text());
    let other = parsed(&dist_manifest("0.1.0").replacen("name: handoff", "name: handover", 1));
    let p = check_pair(&catalog, &other);
    assert!(p[0].starts_with("not in the catalog:"), "{p:?}");
    let moved = dist_manifest("0.1.0").replacen(
        "source: https://github.com/flux-handoff",
        "source: https://example.org/x",
        1,
    );
    let p = check_pair(&catalog, &parsed(&moved));
    assert!(p.iter().any(|m| m.contains("source")), "{p:?}");
}

#[test]
fn catalog_the_entry_must_say_what_the_workspace_says() {
    let catalog = parsed(&catalog_text());
    let ok = workspace_rules(&catalog, REPO, "Apache-2.0", Some("Apache-2.0"));
    assert_eq!(ok, Vec::<String>::new());
    for (repo, license, file) in [
        (
            "https://github.com/acme/other",
            "Apache-2.0",
            Some("Apache-2.0"),
        ),
        (REPO, "MIT", Some("MIT")),
        (REPO, "Apache-2.0", None),
    ] {
        let p = workspace_rules(&catalog, repo, license, file);
        assert!(
            p.iter().any(|m| m.starts_with("workspace:")),
            "{repo} {license}: {p:?}"
        );
    }
    let renamed = parsed(&catalog_text().replacen("name: handoff", "name: pausing", 1));
    let p = workspace_rules(&renamed, REPO, "Apache-2.0", Some("Apache-2.0"));
    assert!(p[0].contains("no `handoff` entry"), "{p:?}");
    assert_eq!(
        license_of("                                 Apache License\n   Version 2.0, January 2004"),
        Some("Apache-2.0")
    );
    assert_eq!(license_of("GNU GENERAL PUBLIC LICENSE"), None);
}

#[test]
fn catalog_every_named_rule_is_tested() {
    // The rule words the failures start with; each appears in a case above, as a table's
    // rule or as the start of an expected message.
    let tested = include_str!("tests.rs");
    for rule in RULES {
        let quoted = format!("\"{rule}\"");
        let message = format!("\"{rule}:");
        assert!(
            tested.contains(&quoted) || tested.contains(&message),
            "rule {rule} has no case"
        );
    }
}
