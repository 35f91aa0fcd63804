use super::*;

fn key() -> KeyTarget {
    KeyTarget::parse("flux-system/variables-base:ghcr_dockerconfigjson", "x").unwrap()
}

fn root() -> SecretTarget {
    SecretTarget::new("flux-system", "ghcr-auth")
}

/// The original tool's layout: staged key, `PushSecret`, `ExternalSecret` `ghcr-auth` in `apps`
/// and `web`, root last.
fn route(allow_incomplete: bool) -> Route {
    Route {
        direct: TargetSpec {
            secret_name: String::new(),
            consumers: Consumers::Namespaces(Vec::new()),
            root: Some(root()),
        },
        keys: vec![key()],
        eso: Some(EsoRoute {
            push_secret: SecretTarget::new("flux-system", "seed-ghcr"),
            external_secret: "ghcr-auth".into(),
            consumers: Consumers::Namespaces(vec!["apps".into(), "web".into()]),
        }),
        allow_incomplete,
    }
}

fn es(ns: &str) -> SecretTarget {
    SecretTarget::new(ns, "ghcr-auth")
}

fn complete() -> Observed {
    Observed {
        external_secret_crd: true,
        push_secret_crd: true,
        push: Some(PushView {
            source_secret: Some("variables-base".into()),
            keys: vec!["ghcr_dockerconfigjson".into()],
        }),
        externals: vec![
            (es("apps"), Some(ExternalView::default())),
            (es("web"), Some(ExternalView::default())),
        ],
        staging: vec![(key(), true)],
    }
}

#[test]
fn fanout_complete_order_is_staging_push_pull_then_root() {
    let stage = Step::Stage(vec![key()]);
    assert_eq!(
        decide(&route(false), &complete()),
        Decision::Run {
            steps: vec![stage.clone(), Step::Push, Step::Pull, Step::Root],
            bootstrap: false,
            missing: vec![],
        }
    );
    // The flag changes nothing when the fan-out is complete.
    assert!(matches!(
        decide(&route(true), &complete()),
        Decision::Run {
            bootstrap: false,
            ..
        }
    ));
    // Direct consumers come first; a route without a root ends with the pull.
    let mut r = route(false);
    r.direct.consumers = Consumers::Namespaces(vec!["legacy".into()]);
    r.direct.secret_name = "pull".into();
    r.direct.root = None;
    let Decision::Run { steps, .. } = decide(&r, &complete()) else {
        panic!("complete");
    };
    assert_eq!(steps, [Step::Direct, stage, Step::Push, Step::Pull]);
}

#[test]
fn fanout_complete_each_missing_part_refuses_and_is_named() {
    type Edit = fn(&mut Observed);
    let cases: [(Edit, &[&str]); 7] = [
        (
            |o| o.external_secret_crd = false,
            &["CRD externalsecrets.external-secrets.io/v1"],
        ),
        (
            |o| {
                o.push_secret_crd = false;
                o.push = None;
            },
            &["CRD pushsecrets.external-secrets.io/v1alpha1"],
        ),
        (|o| o.push = None, &["PushSecret flux-system/seed-ghcr"]),
        (
            |o| o.externals[1].1 = None,
            &["ExternalSecret web/ghcr-auth"],
        ),
        (
            |o| o.externals[0].1 = Some(ExternalView { created_once: true }),
            &["ExternalSecret apps/ghcr-auth (refreshPolicy CreatedOnce)"],
        ),
        (
            |o| o.staging[0].1 = false,
            &["staging Secret flux-system/variables-base"],
        ),
        (
            |o| o.push.as_mut().unwrap().keys = vec!["other".into()],
            &["PushSecret flux-system/seed-ghcr pushing a staged key (it reads none)"],
        ),
    ];
    for (edit, want) in cases {
        let mut o = complete();
        edit(&mut o);
        let Decision::Incomplete(missing) = decide(&route(false), &o) else {
            panic!("{want:?} must refuse");
        };
        let got: Vec<String> = missing.iter().map(ToString::to_string).collect();
        assert_eq!(got, want);
    }
    // An empty secretKey pushes the whole Secret, which holds the staged key.
    let mut o = complete();
    o.push.as_mut().unwrap().keys = vec![String::new()];
    assert!(matches!(decide(&route(false), &o), Decision::Run { .. }));
}

#[test]
fn fanout_complete_bootstrap_runs_root_staging_root_without_eso_steps() {
    let mut o = complete();
    o.external_secret_crd = false;
    o.push_secret_crd = false;
    o.push = None;
    let Decision::Run {
        steps,
        bootstrap,
        missing,
    } = decide(&route(true), &o)
    else {
        panic!("bootstrap runs");
    };
    assert!(bootstrap);
    assert_eq!(missing.len(), 2);
    assert_eq!(steps, [Step::Root, Step::Stage(vec![key()]), Step::Root]);
    // A staging Secret that does not exist is skipped, not created.
    o.staging[0].1 = false;
    let Decision::Run { steps, .. } = decide(&route(true), &o) else {
        panic!("bootstrap runs");
    };
    assert_eq!(steps, [Step::Root, Step::Root]);
}

#[test]
fn fanout_complete_the_incomplete_line_names_everything_missing_in_one_line() {
    let line = incomplete_line(&[
        Missing::Crd("externalsecrets.external-secrets.io/v1"),
        Missing::ExternalSecret(es("web")),
    ]);
    assert_eq!(
        line,
        "fan-out incomplete, nothing written: missing CRD externalsecrets.external-secrets.io/v1, \
         ExternalSecret web/ghcr-auth (pass --allow-incomplete-fanout to bootstrap: root, \
         staging, root, without a Flux pause)"
    );
    assert_eq!(line.lines().count(), 1);
}

#[test]
fn eso_fanout_synced_since_needs_ready_a_new_version_and_the_current_generation() {
    let s = |rv: Option<&str>, ready: Option<&str>| SyncStatus {
        generation: 3,
        synced_resource_version: rv.map(str::to_string),
        ready: ready.map(str::to_string),
        reason: None,
    };
    let before = Some("3-aaa");
    let cases = [
        (s(Some("3-bbb"), Some("True")), true),
        (s(Some("3-aaa"), Some("True")), false),
        (s(Some("3-bbb"), Some("False")), false),
        (s(Some("2-bbb"), Some("True")), false),
        (s(None, Some("True")), false),
        (s(Some("3-bbb"), None), false),
    ];
    for (status, want) in cases {
        assert_eq!(synced_since(before, &status), want, "{status:?}");
    }
    assert!(synced_since(None, &s(Some("3-x"), Some("True"))));
}
