//! The action installs a verified binary (issue 27, item 2), in the emulated runner
//! (tests/common/runner.rs) against a release served on loopback: the archive for the runner's
//! platform is downloaded, checked against its checksums file, kept in the tool cache and a
//! private copy of it run, and the post step runs the same copy, checked again; a tampered
//! archive or a missing platform is one `::error::` and nothing runs. A tool-cache hit is
//! checked against the release's sums again, and a tampered cache entry fails closed; the sums
//! the action ships for its own version are the ones `cargo xtask dist --action-sums` writes.
mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::release::{Release, VERSION};
use common::{runner, runner_checks as checks};

use checks::*;
use common::*;
use runner::Job;

/// A job on a Linux X64 runner (unless `env` says otherwise) with a tool cache of its own.
fn job(cache: &Path, env: &[(&str, &str)]) -> Job {
    let cache = cache.display().to_string();
    let mut all: Vec<(&str, &str)> = vec![
        ("RUNNER_OS", "Linux"),
        ("RUNNER_ARCH", "X64"),
        ("RUNNER_TOOL_CACHE", &cache),
    ];
    all.retain(|(k, _)| !env.iter().any(|(e, _)| e == k));
    all.extend_from_slice(env);
    Job::new(&all)
}

/// A kubeconfig whose API server is a loopback listener recording when it was first
/// connected to (the first API request); nothing is ever answered.
fn api_listener(dir: &Path) -> (PathBuf, Arc<Mutex<Option<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let first = Arc::new(Mutex::new(None));
    let seen = first.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            seen.lock().unwrap().get_or_insert_with(Instant::now);
            held.push(conn);
        }
    });
    let kc = dir.join("kubeconfig-listener");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: l\n  cluster:\n    server: https://{addr}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: l\n  context:\n    cluster: l\n    user: u\ncurrent-context: l\nusers:\n- name: u\n  user:\n    token: not-a-secret\n"
        ),
    )
    .unwrap();
    (kc, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_action_installs_from_a_loopback_release_and_runs_a_handoff() {
    let c = Cluster::seeded("ia-run").await;
    let before = specs(&c).await;
    let release = Release::new(false);
    let cache = std::env::temp_dir().join(format!("fh-toolcache-{}", testkit::random_suffix(8)));
    let (args, kc) = (flux_args(&c).join("\n"), c.kubeconfig.display().to_string());
    let inputs = [
        ("command", "pause"),
        ("args", args.as_str()),
        ("kubeconfig", kc.as_str()),
        ("download-url", release.url.as_str()),
    ];
    let mut first = job(&cache, &[]);
    let main = finish(first.action_main(&inputs)).await;
    first.keep_state(&main);
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 0, "{}", main.log);
    let cached = cache
        .join("flux-handoff")
        .join(VERSION)
        .join("amd64")
        .join("flux-handoff");
    // What runs is a private copy of the verified bytes under RUNNER_TEMP, its sum saved.
    let bin = PathBuf::from(first.state.get("binary").expect("the binary in the state"));
    assert!(bin.starts_with(&first.temp), "{}", bin.display());
    assert_eq!(
        std::fs::read(&bin).unwrap(),
        std::fs::read(&cached).unwrap()
    );
    assert!(
        first.state.contains_key("binary_sha256"),
        "{:?}",
        first.state
    );
    assert!(main.log.contains("verified"), "{}", main.log);
    assert_eq!(
        release.requests(),
        [
            format!("/flux-handoff_{VERSION}_checksums.txt"),
            format!("/flux-handoff_{VERSION}_linux_amd64.tar.gz")
        ]
    );
    assert!(
        suspended(&c.get(TARGET).await),
        "the installed binary paused"
    );
    // The post step releases with the same binary.
    let post = finish(first.action_post(&inputs)).await;
    eprintln!("--- post step log ---\n{}", post.log);
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(
        post.log.contains(&format!("$ {} resume", bin.display())),
        "{}",
        post.log
    );
    assert_restored(&c, &before).await;

    // The next job on this runner finds it in the tool cache: no download of the archive, but
    // the release's checksums are read again (one small request; this checkout ships no sums
    // for its version), the cached archive checked against them.
    let mut second = job(&cache, &[]);
    let inputs = [
        ("command", "run"),
        ("args", args.as_str()),
        ("kubeconfig", kc.as_str()),
        ("download-url", release.url.as_str()),
        ("run", "test -n \"$FLUX_HANDOFF_PROOF\""),
    ];
    let main = finish(second.action_main(&inputs)).await;
    eprintln!("--- second main step log ---\n{}", main.log);
    assert_eq!(main.code(), 0, "{}", main.log);
    assert!(main.log.contains("from the tool cache"), "{}", main.log);
    assert_eq!(
        release.requests()[2..],
        [format!("/flux-handoff_{VERSION}_checksums.txt")]
    );
    assert_restored(&c, &before).await;
    let _ = std::fs::remove_dir_all(&cache);
}

/// Runs a main step that must fail before flux-handoff starts; checks nothing ran.
async fn refused_before_running(release: &Release, env: &[(&str, &str)], url: &str) -> String {
    let cache = std::env::temp_dir().join(format!("fh-toolcache-{}", testkit::random_suffix(8)));
    let mut job = job(&cache, env);
    let (kc, first_request) = api_listener(&job.temp);
    let kc = kc.display().to_string();
    let inputs = [
        ("command", "run"),
        ("args", "--target\ninfrastructure"),
        ("kubeconfig", kc.as_str()),
        ("download-url", url),
        ("run", "touch ran"),
    ];
    let main = finish(job.action_main(&inputs)).await;
    job.keep_state(&main);
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 1, "{}", main.log);
    assert_eq!(main.log.matches("::error::").count(), 1, "{}", main.log);
    assert_eq!(
        main.files.outputs().get("outcome").map(String::as_str),
        Some("not-started")
    );
    // Nothing ran: no process, no binary in the cache, no API request, no command.
    assert!(!job.state.contains_key("pid"), "{:?}", job.state);
    assert!(
        !cache
            .join("flux-handoff")
            .join(VERSION)
            .join("amd64")
            .join("flux-handoff")
            .exists()
    );
    assert!(
        first_request.lock().unwrap().is_none(),
        "an API request was made"
    );
    assert!(!job.workspace.join("ran").exists());
    let post = finish(job.action_post(&inputs)).await;
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(post.log.contains("nothing to do"), "{}", post.log);
    let _ = release;
    let _ = std::fs::remove_dir_all(&cache);
    main.log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_action_a_tampered_archive_is_refused_and_nothing_runs() {
    let release = Release::new(true);
    let log = refused_before_running(&release, &[], &release.url.clone()).await;
    assert!(log.contains("::error::checksum mismatch for"), "{log}");
    assert!(log.contains("nothing was extracted or run"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_action_a_missing_platform_is_one_clear_error() {
    let release = Release::new(false);
    let url = release.url.clone();
    let log = refused_before_running(
        &release,
        &[("RUNNER_OS", "macOS"), ("RUNNER_ARCH", "X64")],
        &url,
    )
    .await;
    assert!(
        log.contains(&format!(
            "lists no flux-handoff_{VERSION}_darwin_amd64.tar.gz"
        )),
        "{log}"
    );
    let log = refused_before_running(&release, &[("RUNNER_OS", "Windows")], &url).await;
    assert!(
        log.contains("no flux-handoff release archive for Windows/X64"),
        "{log}"
    );
    // An unreachable server: one line naming the URL.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let log = refused_before_running(&release, &[], &dead).await;
    assert!(
        log.contains(&format!(
            "::error::cannot download {dead}/flux-handoff_{VERSION}_checksums.txt"
        )),
        "{log}"
    );
}

/// The acceptance figure: from the main step starting to flux-handoff's first API request,
/// with a cold download from loopback and with the tool cache warm (printed, not asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_action_time_to_first_api_request() {
    let release = Release::new(false);
    let cache = std::env::temp_dir().join(format!("fh-toolcache-{}", testkit::random_suffix(8)));
    for round in ["cold download from loopback", "tool cache warm"] {
        let mut job = job(&cache, &[]);
        let (kc, first_request) = api_listener(&job.temp);
        let kc = kc.display().to_string();
        let inputs = [
            ("command", "run"),
            ("args", "--target\ninfrastructure"),
            ("kubeconfig", kc.as_str()),
            ("download-url", release.url.as_str()),
            ("run", "true"),
        ];
        let start = Instant::now();
        let mut main = job.action_main(&inputs);
        let at = loop {
            if let Some(t) = *first_request.lock().unwrap() {
                break t;
            }
            assert!(
                !main.exited(),
                "ended before any API request:\n{}",
                main.log()
            );
            assert!(start.elapsed() < Duration::from_mins(2), "{}", main.log());
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        eprintln!(
            "install_action: {round}: {:.0} ms from the main step starting to the first API request",
            (at - start).as_secs_f64() * 1000.0
        );
        let ended = cancel(main).await;
        assert!(ended.code() != 0, "{}", ended.log);
    }
    let _ = std::fs::remove_dir_all(&cache);
}

/// A main step against `cache` and the release that installs flux-handoff and is cancelled
/// once it has made its first API request (to a listener that never answers); its log.
async fn install_only(cache: &Path, release: &Release) -> String {
    let mut job = job(cache, &[]);
    let (kc, first_request) = api_listener(&job.temp);
    let kc = kc.display().to_string();
    let inputs = [
        ("command", "run"),
        ("args", "--target\ninfrastructure"),
        ("kubeconfig", kc.as_str()),
        ("download-url", release.url.as_str()),
        ("run", "true"),
    ];
    let mut main = job.action_main(&inputs);
    let give_up = Instant::now() + Duration::from_mins(2);
    while first_request.lock().unwrap().is_none() {
        assert!(
            !main.exited(),
            "ended before any API request:\n{}",
            main.log()
        );
        assert!(Instant::now() < give_up, "{}", main.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel(main).await.log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_action_a_tampered_tool_cache_fails_closed_and_nothing_runs() {
    let release = Release::new(false);
    let cache = std::env::temp_dir().join(format!("fh-toolcache-{}", testkit::random_suffix(8)));
    let first = install_only(&cache, &release).await;
    assert!(first.contains("verified"), "{first}");
    // Another job of the runner plants its own binary, archive and a marker vouching for them.
    let entry = cache.join("flux-handoff").join(VERSION).join("amd64");
    let name = format!("flux-handoff_{VERSION}_linux_amd64.tar.gz");
    let stage = entry.join("stage");
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::write(stage.join("flux-handoff"), "#!/bin/sh\ntouch planted\n").unwrap();
    let ok = std::process::Command::new("tar")
        .arg("-czf")
        .arg(entry.join(&name))
        .arg("-C")
        .arg(&stage)
        .arg("flux-handoff")
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::copy(stage.join("flux-handoff"), entry.join("flux-handoff")).unwrap();
    let sum = |path: &Path| {
        let out = std::process::Command::new("sha256sum")
            .arg(path)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)[..64].to_string()
    };
    std::fs::write(
        cache
            .join("flux-handoff")
            .join(VERSION)
            .join("amd64.complete"),
        format!(
            "{name} sha256:{}\nbinary sha256:{}\n",
            sum(&entry.join(&name)),
            sum(&entry.join("flux-handoff"))
        ),
    )
    .unwrap();
    let mut job = job(&cache, &[]);
    let (kc, first_request) = api_listener(&job.temp);
    let kc = kc.display().to_string();
    let inputs = [
        ("command", "run"),
        ("args", "--target\ninfrastructure"),
        ("kubeconfig", kc.as_str()),
        ("download-url", release.url.as_str()),
        ("run", "touch ran"),
    ];
    let main = finish(job.action_main(&inputs)).await;
    job.keep_state(&main);
    eprintln!("--- main step log ---\n{}", main.log);
    assert_eq!(main.code(), 1, "{}", main.log);
    assert_eq!(main.log.matches("::error::").count(), 1, "{}", main.log);
    assert!(
        main.log.contains("is not the release's archive"),
        "{}",
        main.log
    );
    assert!(!job.state.contains_key("pid"), "{:?}", job.state);
    assert!(
        first_request.lock().unwrap().is_none(),
        "an API request was made"
    );
    assert!(!job.workspace.join("ran").exists());
    assert!(!job.workspace.join("planted").exists());
    let post = finish(job.action_post(&inputs)).await;
    assert_eq!(post.code(), 0, "{}", post.log);
    assert!(!job.workspace.join("planted").exists());
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn install_action_dist_writes_the_sums_the_action_ships_and_install_accepts_them() {
    let release = Release::new(false);
    let sums = release.dir.join("action-checksums.txt");
    let (dir, base, out) = (
        release.dir.display().to_string(),
        release.url.clone(),
        sums.display().to_string(),
    );
    let xtask = std::process::Command::new(env!("CARGO"))
        .args(["xtask", "dist", "index", "--dir", &dir, "--base-url", &base])
        .args(["--action-sums", &out])
        .current_dir(runner::repo_root())
        .output()
        .unwrap();
    assert!(
        xtask.status.success(),
        "{}",
        String::from_utf8_lossy(&xtask.stderr)
    );
    // Each archive's sum and the sum of the binary inside it.
    let name = format!("flux-handoff_{VERSION}_linux_amd64.tar.gz");
    let text = std::fs::read_to_string(&sums).unwrap();
    let sum = |path: &Path| {
        let out = std::process::Command::new("sha256sum")
            .arg(path)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)[..64].to_string()
    };
    let archive = sum(&release.dir.join(&name));
    let binary = sum(Path::new(env!("CARGO_BIN_EXE_flux-handoff")));
    assert!(text.contains(&format!("{archive}  {name}\n")), "{text}");
    assert!(
        text.contains(&format!("{binary}  {name}!flux-handoff\n")),
        "{text}"
    );
    // install.js takes them as the sums it ships: the archive only (no checksums file) on the
    // first install, no request on a hit, and a swapped cached binary refused.
    let cache = release.dir.join("cache");
    let script = r"
        const fs = require('node:fs');
        const inst = require(process.env.INSTALL_JS);
        const shipped = inst.parseChecksums(fs.readFileSync(process.env.SUMS, 'utf8'));
        const dir = process.env.CACHE;
        const env = { RUNNER_OS: 'Linux', RUNNER_ARCH: 'X64', RUNNER_TOOL_CACHE: dir, RUNNER_TEMP: dir };
        const inputs = { version: process.env.VERSION, downloadUrl: process.env.BASE };
        (async () => {
          const first = await inst.install({ env, inputs, shipped });
          const second = await inst.install({ env, inputs, shipped });
          fs.writeFileSync(second.cached, '#!/bin/sh\necho evil\n');
          const third = await inst.install({ env, inputs, shipped }).catch((e) => e.message);
          console.log(JSON.stringify([first.how, second.how, first.sha256, third]));
        })();
    ";
    let install_js = runner::repo_root().join("action").join("install.js");
    let node = std::process::Command::new("node")
        .args(["-e", script])
        .env("INSTALL_JS", &install_js)
        .env("SUMS", &sums)
        .env("CACHE", &cache)
        .env("VERSION", VERSION)
        .env("BASE", &release.url)
        .output()
        .expect("node (the runner's JavaScript runtime) is needed for the action's tests");
    let log = String::from_utf8_lossy(&node.stdout);
    assert!(
        node.status.success(),
        "{log}{}",
        String::from_utf8_lossy(&node.stderr)
    );
    let last = log.lines().last().unwrap_or_default();
    let got: Vec<String> = serde_json::from_str(last).unwrap();
    assert_eq!(got[..3], ["downloaded", "cached", binary.as_str()], "{log}");
    assert!(
        got[3].contains("is not the binary installed there"),
        "{log}"
    );
    assert!(log.contains("(the sum this action ships)"), "{log}");
    assert_eq!(release.requests(), [format!("/{name}")]);
}
