use super::*;

fn base() -> Plan {
    Plan {
        lease: ("flux-system".into(), "flux-handoff".into()),
        object_namespaces: vec!["flux-system".into()],
        ..Plan::default()
    }
}

fn ghcr() -> Ghcr {
    Ghcr {
        secret_name: "ghcr-auth".into(),
        consumers: vec!["apps".into(), "web".into()],
        selector: false,
        root: Some(("flux-system".into(), "ghcr-auth".into())),
        sources: vec![Source {
            resource: "ocirepositories",
            namespace: "flux-system".into(),
            name: "app".into(),
        }],
        staged: vec![],
        eso: None,
    }
}

fn texts(plan: &Plan) -> Vec<String> {
    rights(plan).iter().map(ToString::to_string).collect()
}

#[test]
fn each_configuration_needs_exactly_these_rights() {
    let mut with_ghcr = base();
    with_ghcr.ghcr = Some(ghcr());
    let mut restart = base();
    restart.restart = Some(("flux-system".into(), "kustomize-controller".into()));
    let mut everywhere = base();
    everywhere.all_namespaces = true;
    let mut selector = base();
    selector.ghcr = Some(Ghcr {
        consumers: vec![],
        selector: true,
        root: None,
        sources: vec![],
        ..ghcr()
    });
    let plain = [
        "create leases.coordination.k8s.io in flux-system",
        "get leases.coordination.k8s.io flux-handoff in flux-system",
        "update leases.coordination.k8s.io flux-handoff in flux-system",
        "get kustomizations.kustomize.toolkit.fluxcd.io in flux-system",
        "patch kustomizations.kustomize.toolkit.fluxcd.io in flux-system",
        "watch kustomizations.kustomize.toolkit.fluxcd.io in flux-system",
        "get helmreleases.helm.toolkit.fluxcd.io in flux-system",
        "patch helmreleases.helm.toolkit.fluxcd.io in flux-system",
        "watch helmreleases.helm.toolkit.fluxcd.io in flux-system",
        "create events in flux-system",
    ];
    let listed = [
        "list kustomizations.kustomize.toolkit.fluxcd.io in flux-system",
        "list helmreleases.helm.toolkit.fluxcd.io in flux-system",
    ];
    let cases: Vec<(&str, Plan, Vec<&str>)> = vec![
        ("plain handoff", base(), [&plain[..], &listed[..]].concat()),
        (
            "ghcr reassert with consumers, root and a source",
            with_ghcr,
            [
                &plain[..],
                &listed[..],
                &[
                    "get secrets ghcr-auth in apps",
                    "create secrets in apps",
                    "patch secrets ghcr-auth in apps",
                    "get secrets ghcr-auth in web",
                    "create secrets in web",
                    "patch secrets ghcr-auth in web",
                    "get secrets ghcr-auth in flux-system",
                    "patch secrets ghcr-auth in flux-system",
                    "get ocirepositories.source.toolkit.fluxcd.io app in flux-system",
                    "patch ocirepositories.source.toolkit.fluxcd.io app in flux-system",
                ][..],
            ]
            .concat(),
        ),
        (
            "--retire restart",
            restart,
            [
                &plain[..],
                &listed[..],
                &[
                    "get deployments.apps kustomize-controller in flux-system",
                    "patch deployments.apps kustomize-controller in flux-system",
                    "list pods in flux-system",
                ][..],
            ]
            .concat(),
        ),
        (
            "fences in every namespace",
            everywhere,
            [
                &plain[..],
                &[
                    "list kustomizations.kustomize.toolkit.fluxcd.io in all namespaces",
                    "list helmreleases.helm.toolkit.fluxcd.io in all namespaces",
                ][..],
            ]
            .concat(),
        ),
        (
            "consumers by selector",
            selector,
            [
                &plain[..],
                &listed[..],
                &["list namespaces in all namespaces"][..],
            ]
            .concat(),
        ),
    ];
    for (name, plan, want) in cases {
        assert_eq!(texts(&plan), want, "{name}");
    }
}

#[test]
fn no_secret_right_is_unnamed_except_create_and_none_is_cluster_wide() {
    let mut p = base();
    p.ghcr = Some(ghcr());
    for r in rights(&p).iter().filter(|r| r.resource == "secrets") {
        assert!(r.namespace.is_some(), "{r}");
        assert!(r.verb != "update" && r.verb != "list", "{r}");
        assert_eq!(r.name.is_none(), r.verb == "create", "{r}");
        assert!(
            r.namespace.as_deref() != Some("flux-system") || r.verb != "create",
            "{r}"
        );
    }
    assert!(rights(&p).iter().all(|r| r.namespace.is_some()));
}

#[test]
fn a_right_on_every_object_covers_the_same_right_by_name() {
    let mut p = base();
    p.object_namespaces = vec!["apps".into()];
    p.ghcr = Some(Ghcr {
        consumers: vec!["apps".into()],
        root: Some(("apps".into(), "ghcr-auth".into())),
        sources: vec![],
        ..ghcr()
    });
    let t = texts(&p);
    let secrets: Vec<&String> = t.iter().filter(|x| x.contains("secrets")).collect();
    assert_eq!(
        secrets,
        [
            "get secrets ghcr-auth in apps",
            "create secrets in apps",
            "patch secrets ghcr-auth in apps"
        ]
    );
}

#[test]
fn the_rule_lines_name_the_object_and_the_one_verb() {
    let mut p = base();
    p.ghcr = Some(ghcr());
    let r = rights(&p)
        .into_iter()
        .find(|r| r.feature == Feature::GhcrRoot && r.verb == "patch")
        .unwrap();
    assert_eq!(
        r.rule(),
        "  - apiGroups: [\"\"]\n    resources: [\"secrets\"]\n    resourceNames: [\"ghcr-auth\"]\n    verbs: [\"patch\"]\n"
    );
    assert_eq!(r.placement(), "the Role bound in namespace flux-system");
    let mut all = base();
    all.all_namespaces = true;
    let list = rights(&all).into_iter().find(|r| r.verb == "list").unwrap();
    assert_eq!(
        list.placement(),
        "the ClusterRole bound by a ClusterRoleBinding"
    );
}

#[test]
fn manifests_hold_a_role_per_namespace_and_a_cluster_role_only_when_needed() {
    let subject = Subject {
        namespace: "flux-system".into(),
        name: "flux-handoff".into(),
    };
    let mut p = base();
    p.ghcr = Some(ghcr());
    let text = manifests(&p, &subject, &["generated".into()]);
    assert!(text.starts_with("# generated\n---\napiVersion: v1\nkind: ServiceAccount\n"));
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding",
            "Role",
            "RoleBinding"
        ]
    );
    assert!(text.contains(
        "  # the coordination Lease\n  - apiGroups: [\"coordination.k8s.io\"]\n    resources: [\"leases\"]\n    resourceNames: [\"flux-handoff\"]\n    verbs: [\"get\", \"update\"]\n"
    ));
    assert!(text.contains("  namespace: web\nrules:\n"));
    assert!(!text.contains("ClusterRole"));
    p.all_namespaces = true;
    let text = manifests(&p, &subject, &[]);
    assert!(text.contains("kind: ClusterRole\nmetadata:\n  name: flux-handoff-flux-system\n"));
    assert!(
        text.contains("kind: ClusterRoleBinding\nmetadata:\n  name: flux-handoff-flux-system\n")
    );
}

#[test]
fn rbac_fanout_the_external_secrets_layout_needs_exactly_these_secret_and_eso_rights() {
    let mut p = base();
    p.ghcr = Some(Ghcr {
        secret_name: String::new(),
        consumers: vec![],
        sources: vec![],
        staged: vec![("flux-system".into(), "variables-base".into())],
        eso: Some(EsoRights {
            push_secret: ("flux-system".into(), "seed-ghcr".into()),
            external_secret: "ghcr-auth".into(),
            consumers: vec!["apps".into(), "web".into()],
        }),
        ..ghcr()
    });
    let t = texts(&p);
    let fanout: Vec<&str> = t
        .iter()
        .map(String::as_str)
        .filter(|x| x.contains("secrets") && !x.contains("leases"))
        .collect();
    assert_eq!(
        fanout,
        [
            "get secrets ghcr-auth in flux-system",
            "patch secrets ghcr-auth in flux-system",
            "get secrets variables-base in flux-system",
            "patch secrets variables-base in flux-system",
            "get pushsecrets.external-secrets.io seed-ghcr in flux-system",
            "patch pushsecrets.external-secrets.io seed-ghcr in flux-system",
            "get externalsecrets.external-secrets.io ghcr-auth in apps",
            "patch externalsecrets.external-secrets.io ghcr-auth in apps",
            "get secrets ghcr-auth in apps",
            "get externalsecrets.external-secrets.io ghcr-auth in web",
            "patch externalsecrets.external-secrets.io ghcr-auth in web",
            "get secrets ghcr-auth in web",
        ]
    );
    // The consumers' Secrets are ESO's: read back, never created or patched.
    assert!(
        !t.iter().any(
            |x| (x.starts_with("create secrets") || x.starts_with("patch secrets"))
                && (x.ends_with(" apps") || x.ends_with(" web"))
        ),
        "{t:#?}"
    );
}

#[test]
fn replicas_gate_rights_are_its_deployment_by_name_and_the_pods_of_its_namespace() {
    let plan = Plan {
        gates: vec![("kube-system".into(), "cluster-autoscaler".into())],
        ..base()
    };
    let gate: Vec<String> = rights(&plan)
        .iter()
        .filter(|r| r.feature == Feature::Gate)
        .map(|r| {
            format!(
                "{} {}/{} {:?} {:?}",
                r.verb, r.group, r.resource, r.namespace, r.name
            )
        })
        .collect();
    assert_eq!(
        gate,
        [
            r#"get apps/deployments Some("kube-system") Some("cluster-autoscaler")"#,
            r#"patch apps/deployments Some("kube-system") Some("cluster-autoscaler")"#,
            r#"list apps/replicasets Some("kube-system") None"#,
            r#"list /pods Some("kube-system") None"#,
        ]
    );
    let autoscalers: Vec<String> = rights(&plan)
        .iter()
        .filter(|r| r.feature == Feature::GateAutoscaler)
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        autoscalers,
        [
            "list horizontalpodautoscalers.autoscaling in kube-system",
            "list scaledobjects.keda.sh in kube-system",
        ]
    );
    // Each right is one rule under its feature in the manifests.
    let subject = Subject {
        namespace: "flux-system".into(),
        name: "flux-handoff".into(),
    };
    let yaml = manifests(&plan, &subject, &[]);
    assert!(
        yaml.contains(
            "  # a replicas gate looks for an autoscaler of its Deployment\n  - apiGroups: [\"autoscaling\"]\n    resources: [\"horizontalpodautoscalers\"]\n    verbs: [\"list\"]\n  # a replicas gate looks for an autoscaler of its Deployment\n  - apiGroups: [\"keda.sh\"]\n    resources: [\"scaledobjects\"]\n    verbs: [\"list\"]\n"
        ),
        "{yaml}"
    );
    // Nothing on Deployments without a gate.
    assert!(rights(&base()).iter().all(|r| r.resource != "deployments"));
}
