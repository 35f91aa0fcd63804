//! Values someone else wrote reach no log line raw (issue 36, item 5). A Lease holder and a
//! fence's owner annotation are strings anyone with write access to them chooses; in GitHub
//! Actions a line that starts with `::` (after blanks), or holds `##[name]`, is a workflow
//! command (actions/runner `ActionCommandManager.TryProcessCommand`). Before, `fences` printed
//! the holder as found — a newline in it started a line of its own, `::error::...` included.

mod common;
#[path = "common/inert.rs"]
mod inert;

use common::*;
use inert::check;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const EVIL: &str = "evil\n::error::injected ##[add-mask]x\r\n  ::set-output name=a::b";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_injection_a_hostile_lease_holder_and_owner_reach_no_line_raw() {
    let c = Cluster::seeded("loginj").await;
    // The Lease, held by a "holder" with newlines and commands in its name.
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("flux-handoff".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(EVIL.into()),
            lease_duration_seconds: Some(600),
            ..Default::default()
        }),
    };
    c.ns.api::<Lease>()
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    // A fence-looking owner annotation on the target, with the same text.
    let patch = json!({ "metadata": { "annotations": { OWNER_KEY: format!("{EVIL};1") } } });
    kustomizations(&c.ns.client, &c.ns.name)
        .patch(TARGET, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    let flags = c.handoff_flags();
    let lease_flag = format!("{}/flux-handoff", c.ns.name);
    let fences = vec!["fences", "--lease", lease_flag.as_str()];
    let mut run = vec!["run", "--target", TARGET];
    run.extend(flags.iter().map(String::as_str));
    run.extend(["--", "true"]);
    for (what, args) in [("fences", &fences), ("run", &run)] {
        for github in [false, true] {
            let mut cmd = c.cli();
            cmd.args(args.iter());
            if github {
                cmd.env("GITHUB_ACTIONS", "true");
            }
            let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
                .await
                .unwrap();
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            eprintln!(
                "--- {what} (GITHUB_ACTIONS={github}) exit {} ---\n{all}",
                code(&out)
            );
            assert!(
                all.contains("evil"),
                "{what}: the holder is not shown at all:\n{all}"
            );
            check(what, &all);
        }
    }
}

/// The dynamic API of the test's Kustomizations.
fn kustomizations(client: &kube::Client, ns: &str) -> kube::Api<kube::api::DynamicObject> {
    let gvk =
        kube::api::GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
    let ar = kube::api::ApiResource::from_gvk(&gvk);
    kube::Api::namespaced_with(client.clone(), ns, &ar)
}
