//! The hostile credential cases: a real registry on loopback, tokens and Docker configs in the
//! child's environment only (registered as secrets), and a source whose CRD is missing.

use testkit::registry::LocalRegistry;

use super::super::secret;
use super::cases::Files;
use super::{Case, KUBE_API, REGISTRY, Run, USAGE, USER, case};
/// Hostile credentials (values in the child's environment only, registered as secrets) and a
/// source whose CRD does not exist.
#[allow(clippy::too_many_lines)] // a table of cases, one per line
pub(super) async fn ghcr_cases(r: &mut Run<'_>, f: &Files) -> anyhow::Result<()> {
    let pass = format!("hostile-pw-{}", testkit::random_suffix(20));
    secret(&pass);
    let reg = LocalRegistry::start(&[(USER, &pass)]).await?;
    reg.push_image(USER, &pass, "team/app", "v1").await?;
    let image = format!("{}/team/app:v1", reg.host);
    let ns = r.cell.ns.name.clone();
    let root = format!("{ns}/ghcr-auth");
    let check = |extra: &[&str]| {
        let mut a: Vec<String> = [
            "ghcr",
            "check",
            "--image",
            &image,
            "--insecure-http-host",
            &reg.host,
        ]
        .map(str::to_string)
        .to_vec();
        a.extend(extra.iter().map(|e| (*e).to_string()));
        a
    };
    let token = ["--credential-env", "TOK", "--username", USER];
    let mk = |name, want, args: Vec<String>| Case {
        args,
        ..case(name, want, &[])
    };
    let with_nl = format!("{pass}\n{pass}");
    let with_ctl = format!("{pass}\u{1}\u{1b}[31m");
    secret(&with_nl);
    secret(&with_ctl);
    let docker = |p: &str| {
        format!(
            "{{\"auths\":{{\"{}\":{{\"username\":\"{USER}\",\"password\":\"{p}\"}}}}}}",
            reg.host
        )
    };
    let broken = docker(&pass).replace("}}}", "");
    let cases = [
        mk("ghcr token with a newline", USAGE, check(&token)).env("TOK", &with_nl),
        mk("ghcr token with control characters", USAGE, check(&token)).env("TOK", &with_ctl),
        mk("ghcr token variable unset", USAGE, check(&token)),
        mk(
            "ghcr malformed Docker config",
            USAGE,
            check(&["--credential-env", "TOK"]),
        )
        .env("TOK", &broken),
        mk(
            "ghcr Docker config that is a JSON string",
            USAGE,
            check(&["--credential-env", "TOK"]),
        )
        .env("TOK", &format!("\"{pass}\"")),
        mk(
            "ghcr oversized Docker config file",
            USAGE,
            check(&["--credential-file", &f.big.to_string_lossy()]),
        ),
        mk(
            "ghcr endless credential file (/dev/zero)",
            USAGE,
            check(&["--credential-file", "/dev/zero"]),
        ),
        mk(
            "ghcr credential file path traversal (../../etc/shadow)",
            USAGE,
            check(&["--credential-file", "../../etc/shadow"]),
        ),
        mk(
            "ghcr conflicting credential sources",
            USAGE,
            check(&["--credential-env", "TOK", "--credential-stdin"]),
        )
        .env("TOK", &pass),
        mk(
            "ghcr non-loopback plain-HTTP host",
            USAGE,
            vec![
                "ghcr".into(),
                "check".into(),
                "--image".into(),
                "ghcr.io/org/app:1".into(),
                "--insecure-http-host".into(),
                "ghcr.io:80".into(),
                "--credential-env".into(),
                "TOK".into(),
                "--username".into(),
                USER.into(),
            ],
        )
        .env("TOK", &pass),
        mk("ghcr wrong token", REGISTRY, check(&token)).env("TOK", &format!("{pass}-wrong")),
        mk(
            "ghcr reassert with a wrong token writes nothing",
            REGISTRY,
            reassert(&image, &reg.host, &["--root-secret", &root]),
        )
        .env("TOK", &format!("{pass}-wrong")),
        mk(
            "ghcr reassert conflicting namespace flags",
            USAGE,
            reassert(
                &image,
                &reg.host,
                &["--namespace-list", "a", "--namespace-selector", "x=y"],
            ),
        )
        .env("TOK", &pass),
        mk(
            "ghcr reassert config with namespaces and selector",
            USAGE,
            reassert(&image, &reg.host, &[]),
        )
        .env("TOK", &pass)
        .config(&f.configs["both-namespaces"]),
        mk(
            "ghcr reassert namespace list entry with traversal",
            USAGE,
            reassert(
                &image,
                &reg.host,
                &["--namespace-list", "../kube-system", "--secret-name", "s"],
            ),
        )
        .env("TOK", &pass),
        mk(
            "ghcr reassert root Secret ../name",
            USAGE,
            reassert(&image, &reg.host, &["--root-secret", "../ghcr-auth"]),
        )
        .env("TOK", &pass),
    ];
    for c in cases {
        r.check(c).await?;
    }
    // A real missing CRD: the root Secret already holds the credential (nothing to write), and
    // the source to prove is a HelmRepository, whose CRD this plane does not have.
    let setup = reassert(&image, &reg.host, &["--root-secret", &root]);
    let (code, _, err) = r.exec(&mk("setup", 0, setup).env("TOK", &pass)).await?;
    anyhow::ensure!(
        code == 0,
        "setting up the root Secret: exit {code}: {}",
        err.trim()
    );
    let helm = format!("helm/{ns}/charts");
    let c = mk(
        "ghcr source whose CRD is missing",
        KUBE_API,
        reassert(
            &image,
            &reg.host,
            &["--root-secret", &root, "--source", &helm],
        ),
    )
    .env("TOK", &pass);
    r.check(c).await?;
    Ok(())
}

fn reassert(image: &str, host: &str, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "ghcr",
        "reassert",
        "--image",
        image,
        "--insecure-http-host",
        host,
    ];
    a.extend_from_slice(&["--credential-env", "TOK", "--username", USER]);
    a.extend_from_slice(extra);
    a.into_iter().map(str::to_string).collect()
}
