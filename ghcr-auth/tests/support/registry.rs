//! A real OCI registry (Debian's `docker-registry`, distribution 2.8) on a free loopback port
//! with htpasswd auth, one per test, stopped and deleted on drop.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A running registry.
pub struct LocalRegistry {
    /// `127.0.0.1:<port>`.
    pub host: String,
    child: Child,
    dir: PathBuf,
}

impl std::fmt::Debug for LocalRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRegistry")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl LocalRegistry {
    /// Starts a registry accepting these users (bcrypt via `htpasswd -iB`, password on stdin).
    pub async fn start(users: &[(&str, &str)]) -> anyhow::Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("ghcr-auth-registry-{}", testkit::random_suffix(8)));
        std::fs::create_dir_all(dir.join("data"))?;
        let mut htpasswd = String::new();
        for (user, pass) in users {
            let mut child = Command::new("htpasswd")
                .args(["-iBn", user])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("running htpasswd (apt-get install apache2-utils)")?;
            child
                .stdin
                .take()
                .context("htpasswd stdin")?
                .write_all(pass.as_bytes())?;
            let out = child.wait_with_output()?;
            if !out.status.success() {
                bail!("htpasswd failed");
            }
            htpasswd.push_str(String::from_utf8(out.stdout)?.trim());
            htpasswd.push('\n');
        }
        std::fs::write(dir.join("htpasswd"), htpasswd)?;
        for _ in 0..3 {
            let port = free_port()?;
            let host = format!("127.0.0.1:{port}");
            let config = format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
                 http:\n  addr: {host}\n\
                 auth:\n  htpasswd:\n    realm: ghcr-auth-test\n    path: {htpasswd}\n",
                data = dir.join("data").display(),
                htpasswd = dir.join("htpasswd").display(),
            );
            let config_path = dir.join("config.yml");
            std::fs::write(&config_path, config)?;
            let child = Command::new("docker-registry")
                .arg("serve")
                .arg(&config_path)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("registry.log"))?)
                .spawn()
                .context("running docker-registry (apt-get install docker-registry)")?;
            let mut registry = Self {
                host,
                child,
                dir: dir.clone(),
            };
            if registry.await_ready().await? {
                return Ok(registry);
            }
            // Port taken between probe and bind: kill this one (without deleting dir) and retry.
            let _ = registry.child.kill();
            let _ = registry.child.wait();
            std::mem::forget(registry);
        }
        bail!("docker-registry did not become ready on three ports")
    }

    async fn await_ready(&mut self) -> anyhow::Result<bool> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(false);
            }
            if let Ok(r) = http.get(format!("http://{}/v2/", self.host)).send().await
                && r.status().as_u16() == 401
            {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("docker-registry on {} not ready within 20s", self.host)
    }

    /// Pushes a minimal OCI image (empty config, no layers) as `repo:tag`; returns its digest.
    pub async fn push_image(
        &self,
        user: &str,
        pass: &str,
        repo: &str,
        tag: &str,
    ) -> anyhow::Result<String> {
        let http = reqwest::Client::new();
        let base = format!("http://{}/v2/{repo}", self.host);
        let config = b"{}".to_vec();
        let config_digest = sha256(&config)?;
        let start = http
            .post(format!("{base}/blobs/uploads/"))
            .basic_auth(user, Some(pass))
            .send()
            .await?;
        if start.status().as_u16() != 202 {
            bail!("blob upload start: {}", start.status());
        }
        let location = start.headers()["location"].to_str()?.to_string();
        let location = if location.starts_with("http") {
            location
        } else {
            format!("http://{}{location}", self.host)
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = http
            .put(format!("{location}{sep}digest={config_digest}"))
            .basic_auth(user, Some(pass))
            .header("content-type", "application/octet-stream")
            .body(config.clone())
            .send()
            .await?;
        if put.status().as_u16() != 201 {
            bail!("blob upload: {}", put.status());
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [],
        })
        .to_string();
        let put = http
            .put(format!("{base}/manifests/{tag}"))
            .basic_auth(user, Some(pass))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(manifest.clone())
            .send()
            .await?;
        if put.status().as_u16() != 201 {
            bail!(
                "manifest upload: {} {}",
                put.status(),
                put.text().await.unwrap_or_default()
            );
        }
        sha256(manifest.as_bytes())
    }
}

fn sha256(bytes: &[u8]) -> anyhow::Result<String> {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("sha256sum stdin")?
        .write_all(bytes)?;
    let out = child.wait_with_output()?;
    let hex = String::from_utf8(out.stdout)?
        .split_whitespace()
        .next()
        .context("sha256sum output")?
        .to_string();
    Ok(format!("sha256:{hex}"))
}
