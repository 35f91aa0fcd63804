//! The restart scenario's own control plane: the envtest launcher on fixed ports and a fixed
//! state directory, so a restart serves the same CA, token, data and address.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use kube::Client;

/// Sends signal `sig` (`TERM`, `KILL`, ...) to `pid`.
pub(crate) fn signal(sig: &str, pid: u32) -> anyhow::Result<()> {
    testkit::signal::to_process(pid, sig).with_context(|| format!("SIG{sig} to {pid}"))
}
/// A control plane of this scenario's own, restartable on the same ports and data.
pub(crate) struct Plane {
    launcher: PathBuf,
    crds: PathBuf,
    state: PathBuf,
    port: u16,
    etcd_port: u16,
    child: Option<std::process::Child>,
    pub(crate) kubeconfig: PathBuf,
    /// The kubeconfig's text after the first start: every restart must serve the same.
    first: String,
}

impl Plane {
    pub(crate) async fn start(launcher: &Path, crds: &Path, state: &Path) -> anyhow::Result<Self> {
        if state.exists() {
            std::fs::remove_dir_all(state)?;
        }
        std::fs::create_dir_all(state)?;
        let mut p = Self {
            launcher: launcher.to_path_buf(),
            crds: crds.to_path_buf(),
            state: state.to_path_buf(),
            port: free_port()?,
            etcd_port: free_port()?,
            child: None,
            kubeconfig: PathBuf::new(),
            first: String::new(),
        };
        p.spawn().await?;
        p.first = std::fs::read_to_string(&p.kubeconfig)?;
        Ok(p)
    }

    /// The control plane of `who` (the soak, the nemesis), which it restarts: started under
    /// `dir`, which `FLUX_HANDOFF_KUBECONFIG` must name (the fault proxy and the work read it),
    /// its admin token registered as a secret no output may hold; with an admin client.
    pub(crate) async fn own(
        s: &crate::chaos::Settings,
        dir: &Path,
        who: &str,
    ) -> anyhow::Result<(Self, Client)> {
        let (Some(launcher), Some(crds)) = (&s.launcher, &s.crds) else {
            bail!("the {who} needs --launcher and --crds: it runs a control plane it restarts");
        };
        let plane = Self::start(launcher, crds, dir).await?;
        let expected = testkit::plane::kubeconfig()?;
        if expected != plane.kubeconfig {
            bail!(
                "{} must name {} (the {who}'s own control plane), not {}",
                testkit::plane::KUBECONFIG_ENV,
                plane.kubeconfig.display(),
                expected.display()
            );
        }
        crate::chaos::secret(plane.token()?.trim());
        let client = plane.client().await?;
        Ok((plane, client))
    }

    pub(crate) fn token(&self) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(
            self.state.join("envtest/admin.token"),
        )?)
    }

    pub(crate) async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::try_from(
            testkit::config_from(&self.kubeconfig).await?,
        )?)
    }

    /// Starts the launcher and waits for its ready line.
    pub(crate) async fn spawn(&mut self) -> anyhow::Result<()> {
        let out = self.state.join("stdout");
        let child = std::process::Command::new(&self.launcher)
            .arg("--dir")
            .arg(self.state.join("envtest"))
            .arg("--crds")
            .arg(&self.crds)
            .args(["--port", &self.port.to_string()])
            .args(["--etcd-port", &self.etcd_port.to_string()])
            .arg("--exit-on-stdin-eof")
            // Watches from etcd: a history recorder's watch resumed after a restart gets
            // every event since the version it saw last. The watch cache starts at the
            // restart's revision and answers 410 Gone, and a relist then skips whatever was
            // written between the server's start and the relist (a soak group lost a version
            // that way: "versions [3923] not seen").
            .arg("--no-watch-cache")
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out)?)
            .stderr(std::fs::File::create(self.state.join("log"))?)
            .spawn()
            .context("cannot start the launcher")?;
        let child = self.child.insert(child);
        let deadline = tokio::time::Instant::now() + Duration::from_mins(2);
        loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.starts_with("ready ")) {
                let path = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("kubeconfig="))
                    .context("no kubeconfig= in the ready line")?;
                self.kubeconfig = PathBuf::from(path);
                if !self.first.is_empty() && std::fs::read_to_string(path)? != self.first {
                    bail!("the restarted control plane serves another kubeconfig");
                }
                return Ok(());
            }
            if let Some(st) = child.try_wait()? {
                bail!("the launcher exited ({st}) before it was ready");
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the launcher was not ready within 2 minutes");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then waits for the exit. The API server drains gracefully but keeps the
    /// process up while watches stay open, so after 1 s a second SIGTERM makes it exit at once
    /// (main.go: "a second one exits the process at once"), as a restart that stops waiting
    /// for its clients does; SIGKILL after 30 s.
    pub(crate) async fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let start = tokio::time::Instant::now();
        let mut terms = 0;
        while child.try_wait()?.is_none() {
            let waited = start.elapsed();
            if terms == 0 || (terms == 1 && waited > Duration::from_secs(1)) {
                signal("TERM", child.id())?;
                terms += 1;
            }
            if waited > Duration::from_secs(30) {
                child.kill()?;
                child.wait()?;
                bail!("the control plane ignored SIGTERM twice for 30 s; killed");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    pub(crate) async fn restart(&mut self, downtime: Duration) -> anyhow::Result<()> {
        self.stop().await?;
        tokio::time::sleep(downtime).await;
        self.spawn().await
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Closing its stdin makes the launcher shut down; SIGTERM says it at once.
            drop(child.stdin.take());
            let _ = signal("TERM", child.id());
            let _ = child.wait();
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
