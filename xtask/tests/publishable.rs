//! The library crates can be published and used by applications on any Kubernetes version:
//! read from `cargo metadata` (manifests only, no network), so a change to a Cargo.toml that
//! breaks either shows up in `cargo xtask ci`, not at publish time. The crates the libraries'
//! tests use (testkit, flux-model, fault-proxy) depend on no library: no cycle.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const LIBRARIES: [&str; 4] = ["flux-fence", "flux-suspend", "handoff-app", "ghcr-auth"];
const UNPUBLISHED: [&str; 9] = [
    "embed",
    "testkit",
    "flux-model",
    "fault-proxy",
    "flux-chaos",
    "flux-bench",
    "realflux",
    "flux-demo-setup",
    "xtask",
];
/// The crates the libraries' tests use: none of them may depend on a library, in any kind.
const TEST_SUPPORT: [&str; 3] = ["testkit", "flux-model", "fault-proxy"];

/// Features that pick what only the application may pick: k8s-openapi's Kubernetes version
/// and kube's TLS stack.
fn picks_for_the_application(dep: &str, feature: &str) -> bool {
    match dep {
        "k8s-openapi" => feature.starts_with("v1_") || feature == "earliest" || feature == "latest",
        "kube" | "kube-client" => [
            "rustls-tls",
            "openssl-tls",
            "ring",
            "aws-lc-rs",
            "webpki-roots",
        ]
        .contains(&feature),
        _ => false,
    }
}

fn metadata() -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

fn package<'a>(meta: &'a Value, name: &str) -> &'a Value {
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("package {name} in the workspace"))
}

/// Normal (non-dev, non-build) dependencies of a package.
fn normal_dependencies(pkg: &Value) -> impl Iterator<Item = &Value> {
    pkg["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"].is_null())
}

#[test]
fn libraries_leave_the_kubernetes_version_and_the_tls_stack_to_the_application() {
    let meta = metadata();
    let mut problems = Vec::new();
    for lib in LIBRARIES {
        for dep in normal_dependencies(package(&meta, lib)) {
            let name = dep["name"].as_str().unwrap();
            for feature in dep["features"].as_array().unwrap() {
                let feature = feature.as_str().unwrap();
                if picks_for_the_application(name, feature) {
                    problems.push(format!("{lib} enables {name}/{feature}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn libraries_carry_what_publishing_needs() {
    let meta = metadata();
    let mut problems = Vec::new();
    for lib in LIBRARIES {
        let pkg = package(&meta, lib);
        if pkg["publish"] == serde_json::json!([]) {
            problems.push(format!("{lib}: publish = false"));
        }
        for field in ["description", "license", "repository", "readme"] {
            if pkg[field].as_str().is_none_or(str::is_empty) {
                problems.push(format!("{lib}: no {field}"));
            }
        }
        for field in ["keywords", "categories"] {
            if pkg[field].as_array().is_none_or(Vec::is_empty) {
                problems.push(format!("{lib}: no {field}"));
            }
        }
        // A path dependency on a sibling must name a version, or `cargo package` refuses it.
        for dep in normal_dependencies(pkg) {
            if dep["path"].is_string() && dep["req"] == "*" {
                problems.push(format!("{lib}: {} has no version", dep["name"]));
            }
        }
    }
    for name in UNPUBLISHED {
        if package(&meta, name)["publish"] != serde_json::json!([]) {
            problems.push(format!("{name} must stay publish = false"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_crates_the_libraries_tests_use_depend_on_no_library() {
    let meta = metadata();
    let mut problems = Vec::new();
    for name in TEST_SUPPORT {
        for dep in package(&meta, name)["dependencies"].as_array().unwrap() {
            let dep = dep["name"].as_str().unwrap();
            if LIBRARIES.contains(&dep) || dep == "handoff-cli" {
                problems.push(format!("{name} depends on {dep}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Issue 26, optional weight: without default features no library pulls an HTTP client or a
/// TLS stack of its own (kube's stays the application's pick), read from `cargo tree` over the
/// lockfile (no network).
#[test]
fn weight_no_http_client_or_tls_without_default_features() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut problems = Vec::new();
    for lib in LIBRARIES {
        let out = Command::new(env!("CARGO"))
            .args([
                "tree",
                "-p",
                lib,
                "-e",
                "normal",
                "--no-default-features",
                "--prefix",
                "none",
                "--offline",
            ])
            .current_dir(root)
            .output()
            .expect("cargo tree runs");
        assert!(
            out.status.success(),
            "cargo tree -p {lib} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            if ["reqwest", "rustls", "hyper-rustls", "native-tls", "openssl"].contains(&name) {
                problems.push(format!("{lib} --no-default-features pulls {line}"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
