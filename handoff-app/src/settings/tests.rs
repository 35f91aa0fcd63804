use super::*;

fn flags(targets: &[&str]) -> Flags {
    let mut f = Flags::new("flux-system");
    f.targets = targets.iter().map(ToString::to_string).collect();
    f
}

#[test]
fn flags_over_tables_over_defaults() {
    let lease = LeaseTable {
        namespace: Some("ops".into()),
        duration: Some("20s".into()),
        ..LeaseTable::default()
    };
    let fence = FenceTable {
        retire: Some("restart".into()),
        quiesce: Some(true),
        ..FenceTable::default()
    };
    let mut table_target = TargetTable::new("infra");
    table_target.parent = Some("none".into());
    let targets = [table_target];
    let file = Tables {
        lease: Some(&lease),
        fence: Some(&fence),
        controller: None,
        targets: &targets,
        recovery: None,
        ghcr: None,
    };
    let from_file = resolve(&Flags::new("apps"), &file).unwrap();
    assert_eq!(
        from_file.targets[0].object.to_string(),
        "Kustomization apps/infra"
    );
    assert_eq!(from_file.targets[0].parent, ParentSpec::TopLevel);
    assert_eq!(
        (from_file.strategy, from_file.quiesce),
        (Strategy::Restart, true)
    );
    assert_eq!(from_file.lease.to_string(), "ops/flux-handoff");
    assert_eq!(from_file.lease.renew_every, Duration::from_secs(5));

    let mut f = flags(&["hr/apps/podinfo"]);
    f.retire = Some("ack".into());
    f.lease = Some("other".into());
    f.parent = Some("flux-system/root".into());
    let over = resolve(&f, &file).unwrap();
    assert_eq!(over.targets.len(), 1, "flag targets replace the table's");
    assert_eq!(
        over.targets[0].object.to_string(),
        "HelmRelease apps/podinfo"
    );
    assert!(matches!(&over.targets[0].parent, ParentSpec::Explicit(p) if p.name == "root"));
    assert_eq!(over.strategy, Strategy::Ack);
    assert_eq!(over.lease.to_string(), "ops/other");
}

type Case<'a> = (
    Flags,
    Option<FenceTable>,
    Option<&'a LeaseTable>,
    Vec<TargetTable>,
    &'static str,
);

#[test]
fn each_bad_input_is_one_line_naming_it() {
    let prefix = |p: &str| FenceTable {
        annotation_prefix: Some(p.into()),
        ..FenceTable::default()
    };
    let short = LeaseTable {
        duration: Some("1s".into()),
        ..LeaseTable::default()
    };
    let mut unknown = TargetTable::new("x");
    unknown.kind = "GitRepository".into();
    let cases: Vec<Case<'_>> = vec![
        (flags(&[]), None, None, vec![], "no target"),
        (flags(&["a//b"]), None, None, vec![], "--target: "),
        (flags(&["Apps"]), None, None, vec![], "--target: "),
        (flags(&[]), None, None, vec![unknown], "unknown kind"),
        (
            flags(&["apps"]),
            Some(prefix("Flux.io")),
            None,
            vec![],
            "config: fence.annotation prefix",
        ),
        (flags(&["apps"]), None, Some(&short), vec![], "at least 2s"),
        (
            Flags {
                reason: Some("deploy\n::add-mask::x".into()),
                ..flags(&["apps"])
            },
            None,
            None,
            vec![],
            "--reason: invalid reason text: contains control characters",
        ),
        (
            Flags {
                retire: Some("sometimes".into()),
                ..flags(&["apps"])
            },
            None,
            None,
            vec![],
            "unknown retirement strategy",
        ),
        (
            Flags {
                interval: Duration::from_secs(301),
                ..flags(&["apps"])
            },
            None,
            None,
            vec![],
            "--interval",
        ),
        (
            Flags {
                parent: Some("../x".into()),
                ..flags(&["apps"])
            },
            None,
            None,
            vec![],
            "--parent: ",
        ),
    ];
    for (f, fence, lease, targets, want) in cases {
        let file = Tables {
            lease,
            fence: fence.as_ref(),
            controller: None,
            targets: &targets,
            recovery: None,
            ghcr: None,
        };
        let err = resolve(&f, &file).unwrap_err();
        assert!(err.contains(want), "{want}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn durations_parse_units_compounds_and_bare_seconds() {
    for (text, want) in [
        ("300", Duration::from_mins(5)),
        ("2s", Duration::from_secs(2)),
        ("500ms", Duration::from_millis(500)),
        ("5m", Duration::from_mins(5)),
        ("1m30s", Duration::from_secs(90)),
        ("1h", Duration::from_hours(1)),
        ("1.5s", Duration::from_millis(1500)),
        ("168h", MAX_DURATION),
        ("604800", MAX_DURATION),
    ] {
        assert_eq!(parse_duration(text), Ok(want), "{text}");
    }
}

#[test]
fn overflowing_huge_or_garbage_durations_are_refused_not_saturated() {
    for huge in [
        "99999999999999h",
        "18446744073709551616",
        "99999999999999999999s",
        "5124095576030431h",
        "9223372036854775807s1s",
        "169h",
    ] {
        let err = parse_duration(huge).unwrap_err();
        assert!(err.contains("too large"), "{huge}: {err}");
        assert_eq!(err.lines().count(), 1);
    }
    for bad in ["", "s", "5x", "-1s", "1.5.1s", "m5"] {
        let err = parse_duration(bad).unwrap_err();
        assert!(err.contains("duration"), "{bad}: {err}");
    }
}

#[test]
fn max_hold_from_the_lease_table_and_bad_values_are_one_line() {
    let targets = [TargetTable::new("apps")];
    let table = |v: &str| LeaseTable {
        max_hold: Some(v.into()),
        ..LeaseTable::default()
    };
    let two_hours = table("2h");
    let file = Tables {
        lease: Some(&two_hours),
        targets: &targets,
        ..Tables::default()
    };
    let opts = resolve(&Flags::new("flux-system"), &file).unwrap();
    assert_eq!(opts.lease.max_hold, Some(Duration::from_hours(2)));
    assert_eq!(opts.lease.max_hold_key, "flux-handoff.io/max-hold");
    let none = Tables {
        targets: &targets,
        ..Tables::default()
    };
    assert_eq!(
        resolve(&Flags::new("x"), &none).unwrap().lease.max_hold,
        None
    );
    for (bad, want) in [
        (
            "0",
            "config: lease.max_hold: max-hold \"0\" must be above zero",
        ),
        ("abc", "config: lease.max_hold: invalid duration \"abc\""),
    ] {
        let t = table(bad);
        let file = Tables {
            lease: Some(&t),
            targets: &targets,
            ..Tables::default()
        };
        let err = resolve(&Flags::new("x"), &file).unwrap_err();
        assert!(err.starts_with(want), "{err}");
        assert_eq!(err.lines().count(), 1);
    }
    assert_eq!(parse_max_hold("90m"), Ok(Duration::from_mins(90)));
}

/// The tables of a config file [`plan`] reads beyond [`resolve`]'s.
#[derive(Default, Deserialize)]
struct File {
    lease: Option<LeaseTable>,
    recovery: Option<RecoveryTable>,
}

impl File {
    fn tables(&self) -> Tables<'_> {
        Tables {
            lease: self.lease.as_ref(),
            recovery: self.recovery.as_ref(),
            ..Tables::default()
        }
    }
}

/// A GitHub evidence source that asks nothing.
#[derive(Debug)]
struct Stub;

impl LivenessSource for Stub {
    fn check<'a>(&'a self, _: &'a str) -> flux_fence::liveness::VerdictFuture<'a> {
        Box::pin(async { flux_fence::liveness::Verdict::pending("stub") })
    }
}

/// The plan of `apps` with `set` applied to the flags, over the config `toml`; the GitHub
/// source fails for the token file `/missing` (the flag's, else `[recovery]`'s).
fn planned(set: fn(&mut Flags), toml: &str) -> Result<Plan, String> {
    let mut f = flags(&["apps"]);
    set(&mut f);
    let file: File = toml::from_str(toml).unwrap();
    plan(&f, &file.tables(), |token, table| {
        match token.or(table.github_token_file.as_deref()) {
            Some(p) if p == Path::new("/missing") => {
                Err("GitHub token file /missing: not found".into())
            }
            _ => Ok(Arc::new(Stub) as Arc<dyn LivenessSource>),
        }
    })
}

type PlanCase = (
    fn(&mut Flags),
    &'static str,
    (Option<&'static str>, Option<Duration>, Duration, bool),
);

#[test]
fn the_plan_takes_each_flag_over_the_file_over_the_default() {
    let mins = Duration::from_mins;
    let file =
        "[lease]\nmax_hold = \"2h\"\nwait = \"90s\"\n[recovery]\nrecover_finished_runs = true\n";
    let cases: [PlanCase; 8] = [
        (|_| {}, "", (None, None, Duration::ZERO, false)),
        (
            |_| {},
            file,
            (None, Some(mins(120)), Duration::from_secs(90), true),
        ),
        (
            |f| f.holder = Some("gh12.1-abc".into()),
            "",
            (Some("gh12.1-abc"), None, Duration::ZERO, false),
        ),
        (
            |f| f.max_hold = Some("30m".into()),
            file,
            (None, Some(mins(30)), Duration::from_secs(90), true),
        ),
        (
            |f| f.max_hold = Some("30m".into()),
            "",
            (None, Some(mins(30)), Duration::ZERO, false),
        ),
        (
            |f| f.wait_lease = Some(Duration::from_mins(2)),
            file,
            (None, Some(mins(120)), mins(2), true),
        ),
        (
            |f| f.wait_lease = Some(Duration::ZERO),
            file,
            (None, Some(mins(120)), Duration::ZERO, true),
        ),
        (
            |f| f.recover_finished_runs = true,
            "",
            (None, None, Duration::ZERO, true),
        ),
    ];
    for (i, (set, toml, (holder, max_hold, wait, recover))) in cases.into_iter().enumerate() {
        let p = planned(set, toml).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let o = &p.options;
        assert_eq!(
            o.holder.as_ref().map(ToString::to_string).as_deref(),
            holder,
            "case {i}"
        );
        assert_eq!(o.lease.max_hold, max_hold, "case {i}");
        assert_eq!(p.lease_wait.budget, wait, "case {i}");
        assert_eq!(o.recover_finished_runs.is_some(), recover, "case {i}");
    }
}

#[test]
fn the_github_source_is_built_only_when_asked() {
    let file: File = toml::from_str("[recovery]\nevidence = \"github\"\n").unwrap();
    let p = plan(
        &flags(&["apps"]),
        &file.tables(),
        |_, _| -> Result<_, String> { panic!("asked GitHub without --recover-finished-runs") },
    );
    assert!(p.unwrap().options.recover_finished_runs.is_none());
}

type BadCase = (fn(&mut Flags), &'static str, &'static str);

#[test]
fn each_bad_value_of_the_plan_is_its_own_line() {
    let cases: [BadCase; 8] = [
        (|f| f.holder = Some("no holder!".into()), "", "--holder: "),
        (
            |f| f.max_hold = Some("0".into()),
            "",
            "--max-hold: max-hold \"0\" must be above zero (e.g. 30m, 2h); leave it out for no \
             limit",
        ),
        (
            |f| f.max_hold = Some("abc".into()),
            "[lease]\nmax_hold = \"2h\"\n",
            "--max-hold: invalid duration \"abc\" (use e.g. 500ms, 30s, 5m, 1h)",
        ),
        (
            |_| {},
            "[lease]\nmax_hold = \"0s\"\n",
            "config: lease.max_hold: max-hold \"0s\" must be above zero",
        ),
        (
            |_| {},
            "[lease]\nwait = \"soon\"\n",
            "config: lease.wait: invalid duration \"soon\"",
        ),
        (
            |f| {
                f.recover_finished_runs = true;
                f.github_token_file = Some("/missing".into());
            },
            "",
            "--recover-finished-runs: GitHub token file /missing: not found",
        ),
        (
            |_| {},
            "[recovery]\nrecover_finished_runs = true\ngithub_token_file = \"/missing\"\n",
            "--recover-finished-runs: GitHub token file /missing: not found",
        ),
        (
            |f| f.interval = Duration::from_secs(200),
            "",
            "the interval (200s) leaves no room for the proof's two passes",
        ),
    ];
    for (set, toml, want) in cases {
        let err = planned(set, toml).unwrap_err();
        assert!(err.starts_with(want), "{want}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_valid_wait_lease_flag_stands_over_a_bad_file_value() {
    let p = planned(
        |f| f.wait_lease = Some(Duration::from_secs(5)),
        "[lease]\nwait = \"soon\"\n",
    );
    assert_eq!(p.unwrap().lease_wait.budget, Duration::from_secs(5));
}

#[test]
fn selected_objects_become_targets_as_they_are_with_the_parent_flag_or_their_labels() {
    let objects = [
        flux_suspend::object::kustomization("apps", "web"),
        flux_suspend::object::helm_release("data", "db"),
    ];
    let from_labels = targets_of(&objects, None).unwrap();
    assert_eq!(from_labels.len(), 2);
    for (t, o) in from_labels.iter().zip(&objects) {
        assert_eq!(t.object, *o);
        assert!(matches!(t.parent, ParentSpec::FromLabels), "{t:?}");
    }
    let top = targets_of(&objects, Some("none")).unwrap();
    assert!(top.iter().all(|t| matches!(t.parent, ParentSpec::TopLevel)));
    // A parent without a namespace is in each target's own namespace.
    let named = targets_of(&objects, Some("root")).unwrap();
    let parents: Vec<String> = named
        .iter()
        .map(|t| match &t.parent {
            ParentSpec::Explicit(p) => p.to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        parents,
        ["Kustomization apps/root", "Kustomization data/root"]
    );
    let bad = targets_of(&objects, Some("a/b/c")).unwrap_err();
    assert!(bad.starts_with("--parent: "), "{bad}");
}

#[test]
fn the_ghcr_plan_takes_the_flags_over_the_ghcr_table_and_pauses_only_with_targets() {
    let table: ghcr_auth::GhcrSettings = toml::from_str(
        "credential_env = \"TOKEN\"\nusername = \"flux\"\nimages = [\"ghcr.io/o/a:1\"]\n\
         secret_name = \"pull\"\nnamespaces = [\"a\", \"b\"]\n",
    )
    .unwrap();
    let file = Tables {
        ghcr: Some(&table),
        ..Tables::default()
    };
    let no_github = |_: Option<&Path>,
                     _: &RecoveryTable|
     -> Result<Arc<dyn LivenessSource>, String> { Err("not asked".into()) };
    // The table alone: the plain route to `pull` in a and b, no pause without targets.
    let p = ghcr_plan(&Flags::new("flux-system"), &file, no_github).unwrap();
    assert!(p.route.is_plain());
    assert_eq!(p.route.direct.secret_name, "pull");
    assert!(p.pause.is_none());
    // A flag stands over the table; a target adds the pause's plan.
    let mut f = flags(&["apps"]);
    f.ghcr.secret_name = Some("ghcr".into());
    let p = ghcr_plan(&f, &file, no_github).unwrap();
    assert_eq!(p.route.direct.secret_name, "ghcr");
    let pause = p.pause.expect("a pause with a target");
    assert_eq!(
        pause.options.targets[0].object.to_string(),
        "Kustomization flux-system/apps"
    );
    // A bootstrap route runs without a pause, targets or not.
    f.ghcr.allow_incomplete_fanout = Some(true);
    f.ghcr.secret_keys = vec!["flux-system/vars:ghcr".into()];
    assert!(ghcr_plan(&f, &file, no_github).unwrap().pause.is_none());
    // Bad input is one line, before anything else.
    let mut bad = Flags::new("flux-system");
    bad.ghcr.root_secret = Some("a/b/c".into());
    let err = ghcr_plan(&bad, &file, no_github).unwrap_err();
    assert_eq!(err.lines().count(), 1, "{err}");
}
