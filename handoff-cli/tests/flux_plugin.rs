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

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::release::{Release, VERSION};
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

/// A catalog on loopback: the release archive and the manifest xtask writes for it.
fn catalog() -> Release {
    let release = Release::new(false);
    let out = Command::new(env!("CARGO"))
        .args(["xtask", "dist", "index", "--dir"])
        .arg(&release.dir)
        .args(["--base-url", &release.url])
        .current_dir(common::runner::repo_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo xtask dist index: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let list = ok("flux plugin list", &flux.run(&["plugin", "list"]).await);
    eprintln!("{list}");
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().take(2).eq(["handoff", VERSION])),
        "{list}"
    );
    let version = ok(
        "flux handoff --version",
        &flux.run(&["handoff", "--version"]).await,
    );
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
