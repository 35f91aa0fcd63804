use serde_json::json;

use super::*;
use crate::object::{helm_release, kustomization};

fn ks(name: &str) -> ObjectRef {
    kustomization("ns", name)
}

fn node(name: &str, deps: &[&str]) -> Node {
    Node::new(ks(name), deps.iter().map(|d| ks(d)).collect())
}

fn names(objects: &[ObjectRef]) -> Vec<&str> {
    objects.iter().map(|o| o.name.as_str()).collect()
}

#[test]
fn selector_order_releases_dependencies_first_and_fences_the_other_way() {
    // (nodes as given, release order, where a cycle was broken)
    let cases: [(Vec<Node>, &[&str], &[&str]); 10] = [
        (vec![], &[], &[]),
        (vec![node("a", &[])], &["a"], &[]),
        // Independent objects keep the order given.
        (vec![node("b", &[]), node("a", &[])], &["b", "a"], &[]),
        // apps depends on infrastructure: infrastructure first, whatever the input order.
        (
            vec![
                node("apps", &["infrastructure"]),
                node("infrastructure", &[]),
            ],
            &["infrastructure", "apps"],
            &[],
        ),
        // A chain c -> b -> a given backwards.
        (
            vec![node("c", &["b"]), node("b", &["a"]), node("a", &[])],
            &["a", "b", "c"],
            &[],
        ),
        // A diamond: d on b and c, both on a.
        (
            vec![
                node("d", &["b", "c"]),
                node("c", &["a"]),
                node("b", &["a"]),
                node("a", &[]),
            ],
            &["a", "c", "b", "d"],
            &[],
        ),
        // A dependency outside the set is not ours to order: ignored.
        (
            vec![node("apps", &["outside"]), node("web", &["apps"])],
            &["apps", "web"],
            &[],
        ),
        // A dependency on itself is ignored.
        (vec![node("a", &["a"])], &["a"], &[]),
        // A cycle a <-> b, with c behind it: broken at the first member given, then in order.
        (
            vec![node("c", &["b"]), node("a", &["b"]), node("b", &["a"])],
            &["a", "b", "c"],
            &["a"],
        ),
        // An object given twice counts once, with both entries' dependencies.
        (
            vec![node("x", &[]), node("y", &[]), node("x", &["y"])],
            &["y", "x"],
            &[],
        ),
    ];
    for (nodes, release, broken) in cases {
        let ordered = release_order(&nodes);
        assert_eq!(names(&ordered.release), release, "{nodes:?}");
        assert_eq!(names(&ordered.broken_at), broken, "{nodes:?}");
        let mut fence = release.to_vec();
        fence.reverse();
        assert_eq!(names(&ordered.fence()), fence, "{nodes:?}");
        for (rank, o) in ordered.fence().iter().enumerate() {
            assert_eq!(ordered.fence_rank(o), rank);
        }
        assert_eq!(ordered.fence_rank(&ks("not-there")), usize::MAX);
    }
}

#[test]
fn selector_order_is_per_kind_and_cycles_of_three_are_broken_once() {
    // A HelmRelease named like a Kustomization is another object.
    let hr = helm_release("ns", "infrastructure");
    let nodes = [
        Node::new(ks("apps"), vec![ks("infrastructure")]),
        Node::new(hr.clone(), vec![]),
        Node::new(ks("infrastructure"), vec![]),
    ];
    let o = release_order(&nodes);
    assert_eq!(o.release, [hr, ks("infrastructure"), ks("apps")]);
    let cycle = [node("a", &["c"]), node("b", &["a"]), node("c", &["b"])];
    let o = release_order(&cycle);
    assert_eq!(names(&o.release), ["a", "b", "c"]);
    assert_eq!(names(&o.broken_at), ["a"]);
}

#[test]
fn selector_order_reads_depends_on_with_the_objects_namespace() {
    let obj = json!({
        "metadata": { "name": "apps" },
        "spec": { "dependsOn": [
            { "name": "infrastructure" },
            { "name": "shared", "namespace": "platform" },
            { "namespace": "x" },
            { "name": "" },
        ]},
    });
    let n = Node::read(ks("apps"), &obj);
    assert_eq!(
        n.depends_on,
        [ks("infrastructure"), kustomization("platform", "shared")]
    );
    let n = Node::read(
        helm_release("web", "podinfo"),
        &json!({ "spec": { "dependsOn": [{ "name": "redis" }] } }),
    );
    assert_eq!(n.depends_on, [helm_release("web", "redis")]);
    assert!(Node::read(ks("a"), &json!({})).depends_on.is_empty());
}
