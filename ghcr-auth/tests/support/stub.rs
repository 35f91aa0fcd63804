//! A tiny scripted registry speaking the Bearer token flow (as GHCR does) on loopback, for the
//! paths the htpasswd registry cannot show: token exchange, 403, untrusted realms.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The token the stub hands out.
pub const STUB_TOKEN: &str = "stub-bearer-token-0123456789";

/// How the stub answers.
#[derive(Debug, Clone)]
pub struct Script {
    /// The accepted username and password.
    pub user: String,
    pub pass: String,
    /// Status of the token endpoint for the accepted credential (200 hands out a token).
    pub token_status: u16,
    /// Status of the manifest fetch with the stub token.
    pub manifest_status: u16,
    /// Realm to announce instead of the stub's own `/token`.
    pub realm: Option<String>,
}

/// One request as seen by the stub (no header values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub path: String,
    /// The Authorization scheme presented, if any (`Basic`, `Bearer`).
    pub auth: Option<String>,
}

/// A running stub.
#[derive(Debug)]
pub struct StubRegistry {
    pub host: String,
    pub seen: Arc<Mutex<Vec<Received>>>,
    task: JoinHandle<()>,
}

impl Drop for StubRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StubRegistry {
    pub async fn start(script: Script) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let host = listener.local_addr()?.to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (h, s) = (host.clone(), seen.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (script, host, seen) = (script.clone(), h.clone(), s.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        if buf.first() == Some(&0x16) {
                            return; // a TLS ClientHello: this stub speaks plain HTTP only
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).to_string();
                    let response = answer(&script, &host, &head, &seen);
                    let _ = conn.write_all(response.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Ok(Self { host, seen, task })
    }

    pub fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }
}

fn answer(script: &Script, host: &str, head: &str, seen: &Mutex<Vec<Received>>) -> String {
    let path = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    let auth = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("authorization: ")
                .or_else(|| l.strip_prefix("Authorization: "))
        })
        .map(str::to_string);
    seen.lock().unwrap().push(Received {
        path: path.clone(),
        auth: auth
            .as_ref()
            .and_then(|a| a.split_whitespace().next())
            .map(str::to_string),
    });
    let basic = format!(
        "Basic {}",
        STANDARD.encode(format!("{}:{}", script.user, script.pass))
    );
    let bearer = format!("Bearer {STUB_TOKEN}");
    if path.starts_with("/token") {
        return if auth.as_deref() == Some(basic.as_str()) {
            if script.token_status == 200 {
                respond(
                    200,
                    &[],
                    &format!(r#"{{"token":"{STUB_TOKEN}","expires_in":300}}"#),
                )
            } else {
                respond(script.token_status, &[], "{}")
            }
        } else {
            respond(401, &[], "{}")
        };
    }
    if path.contains("/manifests/") {
        if auth.as_deref() == Some(bearer.as_str()) {
            let digest = (
                "Docker-Content-Digest",
                "sha256:0000000000000000000000000000000000000000000000000000000000000000",
            );
            let headers: &[(&str, &str)] = if script.manifest_status == 200 {
                &[digest]
            } else {
                &[]
            };
            return respond(script.manifest_status, headers, "{}");
        }
        let realm = script
            .realm
            .clone()
            .unwrap_or_else(|| format!("http://{host}/token"));
        let challenge =
            format!(r#"Bearer realm="{realm}",service="stub",scope="repository:team/app:pull""#);
        return respond(401, &[("WWW-Authenticate", &challenge)], "{}");
    }
    respond(404, &[], "{}")
}

fn respond(status: u16, headers: &[(&str, &str)], body: &str) -> String {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        let _ = write!(out, "{k}: {v}\r\n");
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}
