//! A real OCI registry for tests and the demo: Debian's `docker-registry` (distribution 2.8) on
//! a free loopback port with htpasswd auth, stopped and its directory deleted on drop.
//!
//! 1. [`LocalRegistry::start`] hashes each user's password with `htpasswd -iB` (password on
//!    stdin, never argv), writes a config, starts `docker-registry serve` and waits (bounded,
//!    20 s) until `/v2/` answers 401; a port lost between probe and bind is retried.
//! 2. [`LocalRegistry::push_image`] pushes a minimal OCI image (empty config, no layers) and
//!    returns its manifest digest; [`LocalRegistry::push_artifact`] pushes a Flux OCI artifact
//!    (one `tar+gzip` layer) that source-controller can pull.
//! 3. Dropping the value kills the process and removes its directory.
//!
//! Needs `docker-registry`, `htpasswd` (apache2-utils) and `sha256sum` on `PATH`.

use std::io::Write as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long a started registry may take to answer `/v2/`.
const READY_DEADLINE: Duration = Duration::from_secs(20);

/// A running registry. Debug shows the host only.
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

impl LocalRegistry {
    /// Starts a registry accepting these `(user, password)` pairs.
    ///
    /// # Errors
    /// A missing tool, an I/O failure, or a registry that is not ready within 20 s.
    pub async fn start(users: &[(&str, &str)]) -> anyhow::Result<Self> {
        crate::install_crypto();
        let dir =
            std::env::temp_dir().join(format!("testkit-registry-{}", crate::random_suffix(8)));
        std::fs::create_dir_all(dir.join("data"))?;
        let mut htpasswd = String::new();
        for (user, pass) in users {
            htpasswd.push_str(&htpasswd_line(user, pass)?);
            htpasswd.push('\n');
        }
        std::fs::write(dir.join("htpasswd"), htpasswd)?;
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let host = format!("127.0.0.1:{port}");
            let config = format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
                 http:\n  addr: {host}\n\
                 auth:\n  htpasswd:\n    realm: testkit-registry\n    path: {htpasswd}\n",
                data = dir.join("data").display(),
                htpasswd = dir.join("htpasswd").display(),
            );
            let config_path = dir.join("config.yml");
            std::fs::write(&config_path, config)?;
            let mut child = Command::new("docker-registry")
                .arg("serve")
                .arg(&config_path)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("registry.log"))?)
                .spawn()
                .context("running docker-registry (apt-get install docker-registry)")?;
            match await_ready(&mut child, &host).await {
                Ok(true) => return Ok(Self { host, child, dir }),
                Ok(false) => {
                    // Port taken between probe and bind: retry on another one.
                    let _ = child.wait();
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(e);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        bail!("docker-registry did not become ready on three ports")
    }

    /// Pushes a minimal OCI image (empty config, no layers) as `repo:tag`; returns its manifest
    /// digest (`sha256:<hex>`).
    ///
    /// # Errors
    /// The registry refused an upload, or HTTP failed.
    pub async fn push_image(
        &self,
        user: &str,
        pass: &str,
        repo: &str,
        tag: &str,
    ) -> anyhow::Result<String> {
        let config = b"{}".to_vec();
        let config_digest = self.upload_blob(user, pass, repo, &config).await?;
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [],
        });
        self.put_manifest(user, pass, repo, tag, &manifest).await
    }

    /// Pushes a Flux OCI artifact as `repo:tag` (what `flux push artifact` makes): an empty
    /// Flux config and one `tar+gzip` content layer, `layer_tgz`. Returns the manifest digest.
    ///
    /// # Errors
    /// The registry refused an upload, or HTTP failed.
    pub async fn push_artifact(
        &self,
        user: &str,
        pass: &str,
        repo: &str,
        tag: &str,
        layer_tgz: &[u8],
    ) -> anyhow::Result<String> {
        let config = b"{}".to_vec();
        let config_digest = self.upload_blob(user, pass, repo, &config).await?;
        let layer_digest = self.upload_blob(user, pass, repo, layer_tgz).await?;
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.cncf.flux.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip",
                "digest": layer_digest,
                "size": layer_tgz.len(),
            }],
            "annotations": {
                "org.opencontainers.image.source": format!("oci://{}/{repo}", self.host),
                "org.opencontainers.image.revision": format!("{tag}@{layer_digest}"),
            },
        });
        self.put_manifest(user, pass, repo, tag, &manifest).await
    }

    /// Uploads one blob (monolithic POST then PUT); returns its digest.
    async fn upload_blob(
        &self,
        user: &str,
        pass: &str,
        repo: &str,
        blob: &[u8],
    ) -> anyhow::Result<String> {
        let http = reqwest::Client::new();
        let digest = sha256(blob)?;
        let start = http
            .post(format!("http://{}/v2/{repo}/blobs/uploads/", self.host))
            .basic_auth(user, Some(pass))
            .send()
            .await?;
        if start.status().as_u16() != 202 {
            bail!("blob upload start: {}", start.status());
        }
        let location = start
            .headers()
            .get("location")
            .context("blob upload without location")?
            .to_str()?
            .to_string();
        let location = if location.starts_with("http") {
            location
        } else {
            format!("http://{}{location}", self.host)
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = http
            .put(format!("{location}{sep}digest={digest}"))
            .basic_auth(user, Some(pass))
            .header("content-type", "application/octet-stream")
            .body(blob.to_vec())
            .send()
            .await?;
        if put.status().as_u16() != 201 {
            bail!("blob upload: {}", put.status());
        }
        Ok(digest)
    }

    /// Puts an OCI image manifest as `repo:tag`; returns its digest.
    async fn put_manifest(
        &self,
        user: &str,
        pass: &str,
        repo: &str,
        tag: &str,
        manifest: &serde_json::Value,
    ) -> anyhow::Result<String> {
        let body = manifest.to_string();
        let put = reqwest::Client::new()
            .put(format!("http://{}/v2/{repo}/manifests/{tag}", self.host))
            .basic_auth(user, Some(pass))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(body.clone())
            .send()
            .await?;
        if put.status().as_u16() != 201 {
            bail!("manifest upload: {}", put.status());
        }
        sha256(body.as_bytes())
    }
}

/// `Ok(true)` once `/v2/` answers 401, `Ok(false)` if the process exited (port lost).
async fn await_ready(child: &mut Child, host: &str) -> anyhow::Result<bool> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + READY_DEADLINE;
    while Instant::now() < deadline {
        if child.try_wait()?.is_some() {
            return Ok(false);
        }
        if let Ok(r) = http.get(format!("http://{host}/v2/")).send().await
            && r.status().as_u16() == 401
        {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("docker-registry on {host} not ready within {READY_DEADLINE:?}")
}

/// One bcrypt htpasswd line, the password passed on stdin.
fn htpasswd_line(user: &str, pass: &str) -> anyhow::Result<String> {
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
        bail!("htpasswd failed for user {user}");
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
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
