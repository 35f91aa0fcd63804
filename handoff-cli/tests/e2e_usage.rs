//! Bad input is exit 2 with one `error:` line, before any request: the real binary is pointed
//! at a local socket that would accept a connection, and the socket must stay untouched.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A kubeconfig whose server is a listening socket nobody answers, and the socket: any
/// request the binary tries shows up as a pending connection.
struct Trap {
    listener: TcpListener,
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Trap {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("fh-usage-{}", testkit::random_suffix(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: trap\n\
                 clusters:\n- name: trap\n  cluster:\n    server: https://127.0.0.1:{port}\n    \
                 insecure-skip-tls-verify: true\n\
                 users:\n- name: trap\n  user:\n    token: not-a-real-token\n\
                 contexts:\n- name: trap\n  context:\n    cluster: trap\n    user: trap\n"
            ),
        )
        .unwrap();
        Self {
            listener,
            dir,
            kubeconfig,
        }
    }

    fn config(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_flux-handoff"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TOK", "ghp_notarealtoken0123456789")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Whether any connection reached the socket.
    fn was_contacted(&self) -> bool {
        self.listener.set_nonblocking(true).unwrap();
        match self.listener.accept() {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// `None` when stderr is exactly one `error:` line (clap may add its usage hint lines).
fn one_error_line(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors = lines.iter().filter(|l| l.starts_with("error:")).count();
    let extra = lines.iter().find(|l| {
        !l.starts_with("error:")
            && !l.starts_with("Usage:")
            && !l.starts_with("For more information")
            && !l.starts_with("  ")
    });
    (errors != 1 || extra.is_some() || stderr.contains("panicked"))
        .then(|| format!("{errors} error lines, extra {extra:?}: {stderr}"))
}

fn assert_usage(trap: &Trap, case: &str, args: &[&str], want: &str) {
    let out = trap.run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{case}: {stderr}");
    if let Some(problem) = one_error_line(&stderr) {
        panic!("{case}: {problem}");
    }
    assert!(stderr.contains(want), "{case}: want {want:?} in {stderr}");
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn usage_overflowing_durations_exit_2_before_any_request() {
    let trap = Trap::new();
    let huge_lease = trap.config("lease.toml", "[lease]\nduration = \"99999999999999h\"\n");
    let cases: [(&str, Vec<&str>); 6] = [
        (
            "timeout in hours",
            vec!["--timeout", "99999999999999h", "pause", "-t", "apps"],
        ),
        (
            "interval in hours",
            vec!["--interval", "99999999999999h", "pause", "-t", "apps"],
        ),
        (
            "bare seconds at u64::MAX",
            vec!["--timeout", "18446744073709551615", "pause", "-t", "apps"],
        ),
        (
            "milliseconds past u64",
            vec!["--timeout", "99999999999999999999ms", "pause", "-t", "apps"],
        ),
        (
            "timeout on run",
            vec![
                "--timeout",
                "9999999999999m",
                "run",
                "-t",
                "apps",
                "--",
                "true",
            ],
        ),
        (
            "lease duration in the config",
            vec!["--config", path(&huge_lease), "pause", "-t", "apps"],
        ),
    ];
    for (case, args) in &cases {
        assert_usage(&trap, case, args, "too large");
    }
    assert!(!trap.was_contacted(), "a request was sent");
}

#[test]
fn usage_malformed_selector_and_annotation_prefix_exit_2_before_any_request() {
    let trap = Trap::new();
    let reassert = |selector: &'static str| {
        vec![
            "ghcr",
            "reassert",
            "--image",
            "ghcr.io/acme/app:1.0.0",
            "--credential-env",
            "TOK",
            "--username",
            "robot",
            "--secret-name",
            "pull",
            "--namespace-selector",
            selector,
        ]
    };
    for selector in ["a b", "env in (prod", "=x", "x=y=z", "Bad.Prefix/k=v"] {
        assert_usage(&trap, selector, &reassert(selector), "--namespace-selector");
    }
    let selector_file = trap.config(
        "selector.toml",
        "[ghcr]\nsecret_name = \"pull\"\nnamespace_selector = \"team in (a,\"\n",
    );
    let mut args = reassert("x");
    args.truncate(8);
    args.splice(0..0, ["--config", path(&selector_file)]);
    assert_usage(&trap, "selector in the config", &args, "label selector");
    for prefix in ["Flux.io", "flux/handoff", "-x.io", "a..b", ""] {
        let cfg = trap.config(
            "prefix.toml",
            &format!("[fence]\nannotation_prefix = {prefix:?}\n"),
        );
        assert_usage(
            &trap,
            prefix,
            &["--config", path(&cfg), "pause", "-t", "apps"],
            "annotation prefix",
        );
    }
    assert!(!trap.was_contacted(), "a request was sent");
}

#[test]
fn usage_retire_restart_with_a_helmrelease_needs_its_helm_controller() {
    let trap = Trap::new();
    let cases: [(&str, Vec<&str>, &str); 4] = [
        (
            "pause, default controller",
            vec!["pause", "-t", "hr/podinfo", "--retire", "restart"],
            "helm-controller",
        ),
        (
            "run, kustomize-controller named",
            vec![
                "run",
                "-t",
                "hr/podinfo",
                "--retire",
                "restart",
                "--controller",
                "flux-system/kustomize-controller",
                "--",
                "true",
            ],
            "helm-controller",
        ),
        (
            "both kinds share one restart",
            vec![
                "pause",
                "-t",
                "hr/podinfo",
                "-t",
                "apps",
                "--retire",
                "restart",
                "--controller",
                "helm-controller",
            ],
            "different controllers",
        ),
        (
            "a Kustomization with helm-controller",
            vec![
                "pause",
                "-t",
                "apps",
                "--retire",
                "restart",
                "--controller",
                "helm-controller",
            ],
            "kustomize-controller",
        ),
    ];
    for (case, args, want) in &cases {
        assert_usage(&trap, case, args, want);
    }
    assert!(!trap.was_contacted(), "a request was sent");
}

#[test]
fn usage_a_malformed_in_namespace_exits_2_before_any_request() {
    let trap = Trap::new();
    for cmd in ["doctor", "rbac", "fences"] {
        let args = [cmd, "--in", "BAD_NS"];
        assert_usage(&trap, cmd, &args, "--in \"BAD_NS\": not a namespace name");
    }
    assert!(!trap.was_contacted(), "a request was sent");
}
