//! Pauses a Flux chain on the local control plane, proves the pause, and resumes it.
//!
//! ```sh
//! cargo xtask cluster up --detach       # prints the kubeconfig path
//! FLUX_HANDOFF_KUBECONFIG=<path> cargo run -p flux-suspend --example pause_demo -- \
//!     flux-system infrastructure
//! ```
//!
//! Arguments: `<namespace> <target>`; the parent is found from the target's labels. The
//! kubeconfig comes from `FLUX_HANDOFF_KUBECONFIG`, else `KUBECONFIG`.

use std::sync::Arc;
use std::time::Duration;

use flux_fence::{AnnotationKeys, Fencer, Holder, Lease, LeaseAcquire, LeaseConfig, SystemClock};
use flux_suspend::handoff::Chain;
use flux_suspend::handoff::Handoff;
use flux_suspend::handoff::PauseOptions;
use flux_suspend::handoff::PauseOutcome;
use flux_suspend::io::{ControllerRef, Timing};
use flux_suspend::object::{get_json, kustomization};
use flux_suspend::retire::Strategy;
use kube::config::{KubeConfigOptions, Kubeconfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = std::env::args().skip(1);
    let (Some(ns), Some(name)) = (args.next(), args.next()) else {
        return Err("usage: pause_demo <namespace> <target>".into());
    };
    let path = std::env::var_os("FLUX_HANDOFF_KUBECONFIG")
        .or_else(|| std::env::var_os("KUBECONFIG"))
        .ok_or("set FLUX_HANDOFF_KUBECONFIG or KUBECONFIG")?;
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(path)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = kube::Client::try_from(config)?;

    let target = kustomization(&ns, &name);
    let parent = flux_suspend::flux::parent_of(&get_json(&client, &target).await?)
        .map(|p| kustomization(&p.namespace, &p.name))
        .filter(|p| *p != target);
    let lease_cfg = LeaseConfig::new(ns.clone(), "flux-handoff");
    let LeaseAcquire::Acquired(lease) = Lease::acquire(
        client.clone(),
        lease_cfg,
        Holder::generate(),
        Arc::new(SystemClock),
    )
    .await?
    else {
        return Err("the Lease is held by another handoff".into());
    };
    let fencer = Fencer::new(client.clone(), AnnotationKeys::default(), lease.owner())
        .with_lease(lease.handle());
    let mut handoff = Handoff::new(client, fencer);
    let opts = PauseOptions::new(
        Strategy::Ack,
        Timing::new(Duration::from_millis(500), Duration::from_mins(1)),
    )
    .with_controller(ControllerRef {
        namespace: ns.clone(),
        name: "kustomize-controller".into(),
    })
    .with_reason("pause_demo example");
    let outcome = handoff
        .pause(&[Chain::new(parent, target)], &opts, &mut |step| {
            println!("done: {step:?}");
        })
        .await;
    match &outcome {
        Ok(PauseOutcome::Proven(proof)) => {
            println!(
                "pause proven: passes={} {}",
                proof.passes(),
                proof.counters()
            );
        }
        Ok(PauseOutcome::Refused { object, why }) => println!("refused: {object}: {why}"),
        Ok(other) => println!("pause ended: {other:?}"),
        Err(e) => println!("pause failed: {e}"),
    }
    let report = handoff.resume(None).await?;
    println!("released: {}", report.released.join(", "));
    println!("lease: {}", lease.release().await?);
    // Proven or refused was printed above; an error fails the program.
    let _printed: PauseOutcome = outcome?;
    Ok(())
}
