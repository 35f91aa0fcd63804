//! A Kubernetes client from a kubeconfig, built the way a tool that handles credentials
//! should: a bounded read (a wrong path such as `/dev/zero` fails instead of being read
//! forever), and errors of one line that never quote the file (kube's parse errors go on with
//! a snippet around the fault, which can be the line holding a token or a client key).
//!
//! Every request of the client has a timeout: [`CONNECT_TIMEOUT`] to connect, and
//! [`READ_TIMEOUT`] / [`WRITE_TIMEOUT`] for a response (or a request) that stops moving, so a
//! wedged load balancer or a half-open connection fails a request instead of holding it forever
//! (kube's own default has no read timeout). A watch must therefore be bounded below the read
//! timeout: [`WATCH_SLICE`] is the longest one, watched again from the last version seen. A
//! holder's Lease requests are bounded tighter still, by its own deadline
//! (flux-fence's `lease::deadline`).
//!
//! Nothing is sent to the API server here. The TLS stack is the application's choice (kube's
//! `rustls-tls` or `openssl-tls` feature), as for every client of this crate.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// How long connecting to the API server may take.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a response may go without a byte arriving (counted from the request's write).
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// How long writing a request may stall.
pub const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
/// The longest single watch request (`timeoutSeconds`) of flux-suspend: well below
/// [`READ_TIMEOUT`], so a quiet watch ends at the server's timeout and is made again, never by
/// the read timeout.
pub use flux_suspend::io::WATCH_SLICE;
const _: () = assert!(WATCH_SLICE.as_secs() > 0 && WATCH_SLICE.as_secs() < READ_TIMEOUT.as_secs());

/// The most a kubeconfig may hold (embedded certificates for many clusters fit easily).
pub const MAX_KUBECONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// A kubeconfig that cannot be used: missing, unreadable, too large, malformed, or naming an
/// unknown context. Its Display is one line and never quotes the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KubeconfigError(String);

/// Builds a client from `path` (with `context`), else from `$KUBECONFIG` or `~/.kube/config`
/// (with `context`), else from the in-cluster configuration.
///
/// # Errors
///
/// [`KubeconfigError`] with one line naming the file and what is wrong with it.
pub async fn client(path: Option<&Path>, context: Option<&str>) -> Result<Client, KubeconfigError> {
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let err = |what: String| KubeconfigError(what);
    let mut config = match (path, context) {
        (Some(path), _) => {
            let at = |e: &dyn std::fmt::Display| {
                err(format!("kubeconfig {}: {}", path.display(), first_line(e)))
            };
            // Bounded first: `Kubeconfig::read_from` reads to the end, forever on `/dev/zero`.
            read_bounded(path, MAX_KUBECONFIG_BYTES).map_err(|e| at(&e))?;
            let kc = Kubeconfig::read_from(path).map_err(|e| at(&e))?;
            Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| at(&e))?
        }
        (None, Some(_)) => Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| err(format!("kubeconfig: {}", first_line(&e))))?,
        (None, None) => Config::infer().await.map_err(|e| {
            err(format!(
                "no Kubernetes configuration found: {}",
                first_line(&e)
            ))
        })?,
    };
    bound(&mut config);
    let retry =
        kube::client::retry::RetryPolicy::new(RETRY_MIN_DELAY, RETRY_MAX_DELAY, RETRIES, false)
            .map_err(|e| err(format!("Kubernetes client: {e}")))?;
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(|e| err(format!("Kubernetes client: {}", first_line(&e))))?
        // The retry clones the service it wraps; kube's stack is boxed, so a buffer (one
        // worker task on this runtime) makes it cloneable first.
        .with_layer(&tower::buffer::BufferLayer::new(64))
        .with_layer(&tower::retry::RetryLayer::new(retry))
        .build())
}

/// kube's retry of a request answered 429, 503 or 504, bounded: at most [`RETRIES`] more
/// sends, [`RETRY_MIN_DELAY`] doubling to [`RETRY_MAX_DELAY`] apart (about 1.5 s in all), the
/// server's `Retry-After` not followed. An API server that restarts answers 429 for a moment
/// ("storage is (re)initializing"), and a list in that moment should not fail the command; a
/// retried write is still a CAS, so a copy that already applied fails its own test.
const RETRIES: u32 = 4;
/// See [`RETRIES`].
const RETRY_MIN_DELAY: std::time::Duration = std::time::Duration::from_millis(100);
/// See [`RETRIES`].
const RETRY_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Sets the client's request timeouts (see the module docs).
pub fn bound(config: &mut Config) {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    config.write_timeout = Some(WRITE_TIMEOUT);
    // The read timeout counts from each request's write, not from when a pooled connection
    // went idle.
    config.reset_reader_on_write = true;
    // kube's default retry layer sends a request again on 429, 503 and 504 up to 15 times, its
    // backoff doubling towards 1000 s and following the server's Retry-After: a loop inside
    // one call that no `--timeout`, signal or Lease deadline can bound. [`client`] puts a
    // bounded one in its place ([`RETRIES`]).
    config.default_retry = false;
}

/// Reads `path` as UTF-8, failing once it passed `limit` bytes.
///
/// # Errors
///
/// The file's I/O error, or `InvalidData` naming the limit.
pub fn read_bounded(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("more than {limit} bytes"),
        ));
    }
    Ok(text)
}

/// The first line of an error.
fn first_line(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kubeconfig_that_cannot_be_used_is_one_line_naming_it() {
        let Err(e) = client(Some(Path::new("/dev/zero")), None).await else {
            panic!("a client from /dev/zero");
        };
        assert_eq!(
            e.to_string(),
            "kubeconfig /dev/zero: more than 16777216 bytes"
        );
        let Err(e) = client(Some(Path::new("/nonexistent/kubeconfig")), None).await else {
            panic!("a client from a missing file");
        };
        assert!(
            e.to_string()
                .starts_with("kubeconfig /nonexistent/kubeconfig: "),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_malformed_kubeconfig_is_one_line_without_the_text_around_the_fault() {
        let dir = std::env::temp_dir().join(format!("fs-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: \"tok-do-not-print}}]\n",
        )
        .unwrap();
        let raw = Kubeconfig::read_from(&path).unwrap_err();
        assert!(
            raw.to_string().contains("tok-do-not-print"),
            "the parser quotes the file"
        );
        let Err(e) = client(Some(&path), None).await else {
            panic!("a client from a malformed file");
        };
        let line = e.to_string();
        assert!(!line.contains("tok-do-not-print"), "{line}");
        assert!(line.contains("line 3"), "{line}");
        assert_eq!(line.lines().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
