//! `cargo xtask demo --fanout eso`: the rotation through External Secrets, as the original
//! tool's cluster does it (docs/fanout.md).
//!
//! The real External Secrets Operator (`xtask/eso/`, built from Go modules and cached, as for
//! `cargo xtask ci eso`) runs beside the demo's plane with its CRDs installed; `flux-demo-setup
//! eso-seed` creates the layout (staging Secret key, `PushSecret`, store, an `ExternalSecret` per
//! consumer) and waits for ESO's first sync of the stale credential. `ghcr reassert` then runs
//! from a config file of a few lines (printed), and `flux-demo-setup eso-check` reads every
//! consumer and the root back.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::daemon::{self, Spec};
use crate::eso;

/// The state stem and program name of the demo's ESO process.
pub const ESO: (&str, &str) = ("eso", "external-secrets");
/// The controller class of the demo's stores (`flux-demo-setup`'s `eso::CLASS`).
const CLASS: &str = "flux-handoff-demo";

/// Where the credential goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// `kubernetes.io/dockerconfigjson` Secrets written directly (the default).
    Direct,
    /// The External Secrets route.
    Eso,
}

impl Fanout {
    pub fn parse(value: &str) -> anyhow::Result<Self> {
        match value {
            "direct" => Ok(Self::Direct),
            "eso" => Ok(Self::Eso),
            other => bail!("--fanout takes direct or eso, not `{other}`"),
        }
    }
}

/// ESO's binary and CRD directory (built when missing: minutes, once per machine).
pub fn prepare() -> anyhow::Result<(PathBuf, PathBuf)> {
    Ok((eso::ensure_built()?, eso::crds()?))
}

/// Starts ESO against the plane of `kubeconfig`, recorded in `state`, ready once its workers
/// start.
pub fn start(state: &Path, bin: &Path, kubeconfig: &Path, keep: bool) -> anyhow::Result<()> {
    let kubeconfig = kubeconfig.to_string_lossy();
    daemon::start(
        &Spec::new(ESO.0, bin, "Starting workers")
            .args([
                "--metrics-addr=0",
                "--loglevel=info",
                "--enable-cluster-store-reconciler=false",
                "--enable-cluster-external-secret-reconciler=false",
                "--enable-cluster-push-secret-reconciler=false",
            ])
            .arg(format!("--controller-class={CLASS}"))
            .env("KUBECONFIG", &kubeconfig)
            .ready_in_log()
            .detach(keep),
        state,
    )?;
    Ok(())
}

/// The config file of the original tool's layout for the demo, written to `state`; returns
/// its path and text (which the demo prints: it holds no secret, only where one comes from).
pub fn config_file(
    state: &Path,
    user: &str,
    image: &str,
    host: &str,
    credential_env: &str,
) -> anyhow::Result<(PathBuf, String)> {
    let text = format!(
        "\
[ghcr]
credential_env = \"{credential_env}\"
username = \"{user}\"
images = [\"{image}\"]
insecure_http_hosts = [\"{host}\"]
secret_keys = [\"flux-system/variables-base:ghcr_dockerconfigjson\"]
push_secret = \"flux-system/seed-ghcr\"
external_secret = \"ghcr-auth\"
namespaces = [\"infrastructure\", \"apps\"]
root_secret = \"flux-system/ghcr-auth\"
sources = [\"flux-system/podinfo\"]

[[targets]]
name = \"infrastructure\"
"
    );
    let path = state.join("fanout-eso.toml");
    fs::write(&path, &text)?;
    Ok((path, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_parses_its_two_values_and_names_the_bad_one() {
        assert_eq!(Fanout::parse("eso").unwrap(), Fanout::Eso);
        assert_eq!(Fanout::parse("direct").unwrap(), Fanout::Direct);
        let e = Fanout::parse("pushsecret").unwrap_err().to_string();
        assert!(e.contains("`pushsecret`"), "{e}");
    }
}
