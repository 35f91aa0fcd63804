use serde_json::json;

use super::*;
use flux_suspend::object::{helm_release, helmrelease_resource, kustomization_resource};

#[test]
fn selector_label_selectors_parse_as_the_api_server_reads_them() {
    let good = [
        ("team=web", "team=web"),
        ("team==web", "team==web"),
        (" team != web ", "team!=web"),
        ("team", "team"),
        ("!legacy", "!legacy"),
        (
            "app.kubernetes.io/part-of=shop,tier",
            "app.kubernetes.io/part-of=shop,tier",
        ),
        (
            "tier in (a, b),env notin (x)",
            "tier in (a,b),env notin (x)",
        ),
        (
            "kustomize.toolkit.fluxcd.io/name=flux-system",
            "kustomize.toolkit.fluxcd.io/name=flux-system",
        ),
        ("team=", "team="),
    ];
    for (text, sent) in good {
        let s: LabelSelector = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(s.as_str(), sent, "{text}");
    }
    let bad = [
        (
            "",
            "an empty selector; --all selects every object of the kind",
        ),
        ("  ", "an empty selector"),
        ("a=b,,c", "an empty requirement"),
        ("a=b,", "an empty requirement"),
        ("=web", "\"\" is not a label key"),
        ("team=a=b", "\"a=b\" is not a label value"),
        ("team=-x", "\"-x\" is not a label value"),
        ("Team Web", "use key=value"),
        ("replicas>1", "use key=value"),
        ("tier in (a,b", "unbalanced parentheses"),
        ("tier within (a)", "expected `key in (a,b)`"),
        ("tier in (a)x", "nothing may follow"),
        ("bad_prefix_/x=y", "its prefix is not a DNS subdomain"),
    ];
    for (text, why) in bad {
        let e = text.parse::<LabelSelector>().unwrap_err();
        let line = e.to_string();
        assert!(line.starts_with(&format!("-l {text:?}: ")), "{line}");
        assert!(line.contains(why), "{text}: {line}");
        assert_eq!(line.lines().count(), 1);
        assert!(e.is_usage());
    }
}

fn sel(selector: Option<&str>) -> Selection {
    Selection {
        kinds: vec![kustomization_resource()],
        scope: Scope::Namespaces(vec!["flux-system".into()]),
        selector: selector.map(|s| s.parse().unwrap()),
    }
}

/// A listed Kustomization: its parent label and its dependencies.
fn ks(name: &str, parent: Option<&str>, deps: &[&str]) -> (ObjectRef, Value) {
    let mut labels = json!({});
    if let Some(p) = parent {
        labels["kustomize.toolkit.fluxcd.io/name"] = json!(p);
        labels["kustomize.toolkit.fluxcd.io/namespace"] = json!("flux-system");
    }
    let deps: Vec<Value> = deps.iter().map(|d| json!({ "name": d })).collect();
    let v = json!({
        "metadata": { "name": name, "namespace": "flux-system", "labels": labels },
        "spec": { "dependsOn": deps },
    });
    (kustomization("flux-system", name), v)
}

fn names(o: &[ObjectRef]) -> Vec<&str> {
    o.iter().map(|o| o.name.as_str()).collect()
}

#[test]
fn selector_plan_orders_targets_and_keeps_selected_parents_as_parents() {
    // --all in the seeded tree: the root applies both children; apps depends on infrastructure.
    let found = [
        ks("apps", Some("flux-system"), &["infrastructure"]),
        ks("flux-system", None, &[]),
        ks("infrastructure", Some("flux-system"), &[]),
    ];
    let p = plan(&sel(None), &found, None).unwrap();
    assert_eq!(names(&p.targets), ["apps", "infrastructure"], "fence order");
    assert_eq!(names(&p.as_parents), ["flux-system"]);
    assert!(p.broken_at.is_empty());
    // --parent none: every object is a target of its own, still in dependency order.
    let p = plan(&sel(None), &found, Some("none")).unwrap();
    assert_eq!(names(&p.targets), ["apps", "infrastructure", "flux-system"]);
    assert!(p.as_parents.is_empty());
    // An explicit --parent that is selected is paused as the parent.
    let p = plan(&sel(None), &found, Some("flux-system")).unwrap();
    assert_eq!(names(&p.as_parents), ["flux-system"]);
    // A cycle is broken, and said.
    let cyc = [ks("a", None, &["b"]), ks("b", None, &["a"])];
    let p = plan(&sel(Some("t=x")), &cyc, None).unwrap();
    assert_eq!(names(&p.targets), ["b", "a"]);
    assert_eq!(names(&p.broken_at), ["a"]);
    // Kinds apart: a HelmRelease target sits with the Kustomizations.
    let hr = (
        helm_release("flux-system", "web"),
        json!({ "metadata": {} }),
    );
    let p = plan(&sel(None), &[hr, ks("apps", None, &[])], None).unwrap();
    assert_eq!(p.targets[1].resource.kind, helmrelease_resource().kind);
}

#[test]
fn selector_plan_refuses_nothing_and_three_levels_with_one_line() {
    let e = plan(&sel(Some("team=web")), &[], None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no Kustomization matches -l team=web in flux-system: nothing to pause, nothing written"
    );
    assert!(e.is_usage());
    let mut all = sel(None);
    all.kinds.push(helmrelease_resource());
    all.scope = Scope::All;
    assert_eq!(
        plan(&all, &[], None).unwrap_err().to_string(),
        "no Kustomization or HelmRelease matches --all in all namespaces: nothing to pause, \
         nothing written"
    );
    let found = [
        ks("root", None, &[]),
        ks("mid", Some("root"), &[]),
        ks("leaf", Some("mid"), &[]),
    ];
    let e = plan(&sel(None), &found, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Kustomization flux-system/mid applies Kustomization flux-system/leaf and is applied by \
         Kustomization flux-system/root, all selected: a handoff pauses targets and the \
         Kustomization that applies each (two levels); narrow the selection"
    );
}
