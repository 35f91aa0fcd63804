//! `flux handoff` as a Flux CLI plugin (issue 27, item 3), through the real flux CLI (v2.9,
//! built from Go modules by `cargo xtask flux-cli`, cached; or `FLUX_HANDOFF_FLUX_CLI`): a
//! catalog served on loopback holding the manifest `cargo xtask dist index` writes, `flux
//! plugin install handoff` into a temporary `FLUXCD_PLUGINS`, `flux plugin list`, `flux handoff
//! fences` and a handoff against the local control plane, and completion of `-t` through
//! `flux __complete`, which the flux CLI delegates to the plugin (Cobra's protocol).
//!
//! What the flux CLI does, read in github.com/fluxcd/flux2/v2@v2.9.5: the catalog is
//! `$FLUXCD_PLUGIN_CATALOG` + `<name>.yaml` (internal/plugin/catalog.go), the plugin directory
//! `$FLUXCD_PLUGINS` (internal/plugin/discovery.go), `install` checks the archive's `sha256:`
//! and extracts the file named by `bin` (internal/plugin/install.go), `list` prints the version
//! of the install receipt (`cmd/flux/plugin_list.go`), and a plugin command completes by running
//! `<plugin> __complete <args> <word>` (internal/plugin/completion.go, cmd/flux/plugin.go).
//!
//! The `catalog_` tests (issue 38, item 5): Flux's own plugin catalog (fluxcd/plugins) wants
//! `<bin>_<version>_checksums.txt` beside the archives and an entry that passes its rules;
//! `flux plugin search` reads `<catalog>/catalog.yaml` (internal/plugin/catalog.go
//! `FetchCatalog`), served here from the repository's `deploy/flux-plugin/catalog.yaml` the way
//! the catalog's release serves it beside each `<name>.yaml`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::release::{Release, VERSION, sums_name};
use common::runner_checks::{assert_restored, specs};
use common::*;

/// The flux CLI: `FLUX_HANDOFF_FLUX_CLI`, else built (once, cached) by `cargo xtask flux-cli`.
fn flux_cli() -> PathBuf {
    if let Some(p) = std::env::var_os("FLUX_HANDOFF_FLUX_CLI").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let out = Command::new(env!("CARGO"))
        .args(["xtask", "flux-cli"])
        .current_dir(common::runner::repo_root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("running cargo xtask flux-cli");
    assert!(out.status.success(), "cargo xtask flux-cli failed");
    let text = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(text.lines().last().expect("a path").trim())
}

/// `cargo xtask <args>` in the workspace.
fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO"))
        .arg("xtask")
        .args(args)
        .current_dir(common::runner::repo_root())
        .output()
        .unwrap()
}

/// `cargo xtask dist index` over the archives in `dir`, under `base` (default: the release's
/// GitHub URL).
fn dist_index(dir: &Path, base: Option<&str>) {
    let dir = dir.display().to_string();
    let mut args = vec!["dist", "index", "--dir", dir.as_str()];
    if let Some(b) = base {
        args.extend(["--base-url", b]);
    }
    let out = xtask(&args);
    assert!(
        out.status.success(),
        "cargo xtask dist index: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A catalog on loopback: the release archive and the manifest xtask writes for it.
fn catalog() -> Release {
    let release = Release::new(false);
    dist_index(&release.dir, Some(&release.url));
    release
}

struct Flux {
    bin: PathBuf,
    plugins: PathBuf,
    home: PathBuf,
    catalog: String,
}

impl Flux {
    fn new(catalog: &Release) -> Self {
        let dir = std::env::temp_dir().join(format!("fh-fluxplugin-{}", testkit::random_suffix(8)));
        let (plugins, home) = (dir.join("plugins"), dir.join("home"));
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        Self {
            bin: flux_cli(),
            plugins,
            home,
            catalog: format!("{}/", catalog.url),
        }
    }

    async fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("FLUXCD_PLUGINS", &self.plugins)
            .env("FLUXCD_PLUGIN_CATALOG", &self.catalog)
            .env("HOME", &self.home)
            .env_remove("GITHUB_ACTIONS")
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::null());
        tokio::task::spawn_blocking(move || c.output().unwrap())
            .await
            .unwrap()
    }
}

impl Drop for Flux {
    fn drop(&mut self) {
        if let Some(d) = self.plugins.parent() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn ok(what: &str, out: &Output) -> String {
    assert_eq!(code(out), 0, "{what}:\n{}{}", stdout(out), stderr(out));
    stdout(out)
}

fn kubeconfig(c: &Cluster) -> String {
    c.kubeconfig.display().to_string()
}

async fn installed(flux: &Flux) {
    let out = flux.run(&["plugin", "install", "handoff"]).await;
    eprintln!("{}{}", stdout(&out), stderr(&out));
    ok("flux plugin install handoff", &out);
    assert!(Path::new(&flux.plugins).join("flux-handoff").is_file());
}

/// `flux plugin list` shows handoff at this version; returns `flux handoff --version`.
async fn listed_and_runs(flux: &Flux) -> String {
    let list = ok("flux plugin list", &flux.run(&["plugin", "list"]).await);
    eprintln!("{list}");
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().take(2).eq(["handoff", VERSION])),
        "{list}"
    );
    ok(
        "flux handoff --version",
        &flux.run(&["handoff", "--version"]).await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_plugin_installs_from_a_loopback_catalog_and_runs_a_handoff() {
    let c = Cluster::seeded("fp-run").await;
    let before = specs(&c).await;
    let release = catalog();
    let flux = Flux::new(&release);
    installed(&flux).await;
    assert!(
        release
            .requests()
            .contains(&format!("/flux-handoff_{VERSION}_linux_amd64.tar.gz")),
        "{:?}",
        release.requests()
    );
    let version = listed_and_runs(&flux).await;
    assert!(version.contains("(commit "), "{version}");

    let kc = kubeconfig(&c);
    let ns = c.ns.name.clone();
    let fences = flux
        .run(&["handoff", "--kubeconfig", &kc, "-n", &ns, "fences"])
        .await;
    eprintln!("{}{}", stdout(&fences), stderr(&fences));
    ok("flux handoff fences", &fences);
    let lease = format!("{ns}/flux-handoff");
    let controller = format!("{ns}/kustomize-controller");
    let run = flux
        .run(&[
            "handoff",
            "--kubeconfig",
            &kc,
            "-n",
            &ns,
            "--interval",
            "200ms",
            "run",
            "--target",
            TARGET,
            "--lease",
            &lease,
            "--controller",
            &controller,
            "--",
            "bash",
            "-c",
            "test -n \"$FLUX_HANDOFF_PROOF\"",
        ])
        .await;
    eprintln!("{}", stderr(&run));
    ok("flux handoff run", &run);
    assert!(stderr(&run).contains("pause proven"), "{}", stderr(&run));
    assert_restored(&c, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_plugin_completes_targets_from_the_cluster_through_the_flux_cli() {
    let c = Cluster::seeded("fp-complete").await;
    let release = catalog();
    let flux = Flux::new(&release);
    installed(&flux).await;
    let (kc, ns) = (kubeconfig(&c), c.ns.name.clone());
    let out = flux
        .run(&[
            "__complete",
            "handoff",
            "--kubeconfig",
            &kc,
            "-n",
            &ns,
            "pause",
            "-t",
            "",
        ])
        .await;
    let text = ok("flux __complete handoff ... pause -t", &out);
    eprintln!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    for name in [PARENT, TARGET, "apps"] {
        assert!(lines.contains(&name), "{name} not offered: {lines:?}");
    }
    assert_eq!(lines.last(), Some(&":4"), "{lines:?}");
    // Subcommands and flags come from the plugin too.
    let subs = ok(
        "flux __complete handoff ''",
        &flux.run(&["__complete", "handoff", ""]).await,
    );
    for s in ["pause", "resume", "run", "fences"] {
        assert!(
            subs.lines().any(|l| l.split('\t').next() == Some(s)),
            "{s}: {subs}"
        );
    }
    let flags = ok(
        "flux __complete handoff pause --wa",
        &flux.run(&["__complete", "handoff", "pause", "--wa"]).await,
    );
    assert!(
        flags.lines().any(|l| l.starts_with("--wait-lease")),
        "{flags}"
    );
}

/// The release's archive alone in a directory (the fixture's checksums files removed).
fn archive_only() -> Release {
    let release = Release::new(false);
    for f in [sums_name(), "checksums.txt".into()] {
        std::fs::remove_file(release.dir.join(f)).unwrap();
    }
    release
}

#[test]
fn catalog_dist_writes_the_checksums_file_the_catalog_names() {
    let release = archive_only();
    dist_index(&release.dir, None);
    let named = release.dir.join(sums_name());
    let sums =
        std::fs::read_to_string(&named).unwrap_or_else(|e| panic!("{}: {e}", named.display()));
    assert!(
        sums.ends_with(&format!("  flux-handoff_{VERSION}_linux_amd64.tar.gz\n")),
        "{sums}"
    );
    let check = Command::new("sha256sum")
        .args(["-c", &sums_name()])
        .current_dir(&release.dir)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        stdout(&check),
        stderr(&check)
    );
    assert!(stdout(&check).contains(": OK"), "{}", stdout(&check));
    // The older name, kept for compatibility, holds the same lines.
    let older = std::fs::read_to_string(release.dir.join("checksums.txt")).unwrap();
    assert_eq!(older, sums);
}

#[test]
fn catalog_the_entry_validates_with_the_manifest_dist_writes() {
    let release = archive_only();
    dist_index(&release.dir, None);
    let manifest = release.dir.join("handoff.yaml");
    let m = manifest.display().to_string();
    let out = xtask(&["catalog", "--manifest", &m]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("catalog: ok"), "{}", stdout(&out));
    // A manifest under another name has no entry in the catalog: refused, the rule named.
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replacen("name: handoff", "name: handover", 1),
    )
    .unwrap();
    let out = xtask(&["catalog", "--manifest", &m]);
    assert_ne!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("not in the catalog"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_flux_finds_and_installs_handoff_from_the_committed_entry_on_loopback() {
    // Everything served but the archive is what this repository writes or keeps.
    let release = archive_only();
    dist_index(&release.dir, Some(&release.url));
    let entry = common::runner::repo_root().join("deploy/flux-plugin/catalog.yaml");
    std::fs::copy(&entry, release.dir.join("catalog.yaml"))
        .unwrap_or_else(|e| panic!("{}: {e}", entry.display()));
    // The manifest's checksum is the line of the checksums file the catalog's updater reads.
    let sums = std::fs::read_to_string(release.dir.join(sums_name())).unwrap();
    let hex = sums.split_whitespace().next().unwrap().to_string();
    let manifest = std::fs::read_to_string(release.dir.join("handoff.yaml")).unwrap();
    assert!(
        manifest.contains(&format!("checksum: sha256:{hex}")),
        "{manifest}"
    );
    let flux = Flux::new(&release);
    let search = ok(
        "flux plugin search handoff",
        &flux.run(&["plugin", "search", "handoff"]).await,
    );
    eprintln!("{search}");
    assert!(
        search
            .lines()
            .any(|l| l.starts_with("handoff") && l.contains("prove the pause")),
        "{search}"
    );
    installed(&flux).await;
    let version = listed_and_runs(&flux).await;
    assert!(version.contains(VERSION), "{version}");
    let requests = release.requests();
    for path in [
        "/catalog.yaml".to_string(),
        "/handoff.yaml".to_string(),
        format!("/flux-handoff_{VERSION}_linux_amd64.tar.gz"),
    ] {
        assert!(requests.contains(&path), "{path} not in {requests:?}");
    }
}
