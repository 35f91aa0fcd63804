//! The work a nemesis run's command does: `flux-chaos nemesis-work <namespace> <writes>`
//! (hidden; the nemesis passes it to `flux-handoff run -- ...`). Each unit is one write of the
//! work `ConfigMap` naming the writing holder (`$FLUX_HANDOFF_HOLDER`), straight to the API
//! server, so the server orders it with the fence writes.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

use super::history::WORK;

/// The hidden subcommand's name.
pub const SUBCOMMAND: &str = "nemesis-work";

/// Makes `writes` writes of the work `ConfigMap` in `namespace`, 250 ms apart, as `holder`.
pub async fn run(namespace: &str, writes: u32, holder: &str) -> anyhow::Result<()> {
    testkit::install_crypto();
    let client = kube::Client::try_from(testkit::admin_config().await?)?;
    write(&client, namespace, holder, writes).await
}

/// The writes themselves (also the rogue mutant's, from the nemesis process).
pub async fn write(
    client: &kube::Client,
    namespace: &str,
    holder: &str,
    writes: u32,
) -> anyhow::Result<()> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    for i in 0..writes {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // A new `seq` each time: a write that changed nothing would make no event.
        let body =
            serde_json::json!({ "data": { "holder": holder, "seq": format!("{holder}-{i}") } });
        api.patch(WORK, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
    }
    Ok(())
}

/// The arguments of the hidden subcommand, if `args` (without the program) are one.
#[must_use]
pub fn parse(args: &[String]) -> Option<(String, u32)> {
    match args {
        [sub, ns, n] if sub == SUBCOMMAND => Some((ns.clone(), n.parse().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nemesis_the_work_subcommand_takes_a_namespace_and_a_count() {
        let a = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse(&a(&["nemesis-work", "ns", "3"])),
            Some(("ns".into(), 3))
        );
        assert_eq!(parse(&a(&["nemesis-work", "ns", "x"])), None);
        assert_eq!(parse(&a(&["--quick"])), None);
    }
}
