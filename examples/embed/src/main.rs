//! Pauses a Kustomization with proof, applies a `ConfigMap`, resumes; SIGINT/SIGTERM release all.
use flux_suspend::{Paused, Session, SessionOptions, TargetSpec, object, signals};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ns, ks, name, version, rest @ ..] = &args[..] else {
        return Err("usage: embed NAMESPACE KUSTOMIZATION CONFIGMAP VERSION [SECONDS]".into());
    };
    let client = kube::Client::try_default().await?;
    let cancel = signals::cancel_on_signals()?; // 1st signal stops, 2nd hurries; both release
    let mut opts = SessionOptions::new(vec![TargetSpec::new(object::kustomization(ns, ks))]);
    opts.lease.namespace.clone_from(ns);
    let session = Session::start(client.clone(), opts, cancel).await?;
    let work = |paused: Paused| async move {
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"v": version}});
        let api = Api::<ConfigMap>::namespaced(client, ns);
        let (params, patch) = (PatchParams::apply("embed"), Patch::Apply(cm));
        let apply = api.patch(name, &params, &patch);
        paused.write(apply).await?; // asserts the Lease and rechecks the pause first
        let secs = rest.first().map_or(Ok(0), |s| s.parse())?; // stands for a rollout's wait
        tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    };
    let run = session.run_paused(|e| eprintln!("embed: {e:?}"), work);
    Ok(run.await.into_result()?) // `run` released everything, in order, on every path
}
