//! A loopback stand-in for an event receiver (notification-controller's event server, or a
//! generic Provider's address): an HTTP/1.1 server that answers `200` to every request and
//! hands each JSON body to the test before it answers, so a body is there as soon as the
//! sender got its answer.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The receiver's address and the bodies it was sent, in arrival order.
pub struct Receiver {
    pub url: String,
    pub bodies: mpsc::UnboundedReceiver<Value>,
}

impl Receiver {
    /// Listens on a free loopback port until the test ends.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let (tx, bodies) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut s = stream;
                    if let Some(body) = read_request(&mut s).await {
                        if let Ok(v) = serde_json::from_slice(&body) {
                            let _ = tx.send(v);
                        }
                        let ok =
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                        let _ = s.write_all(ok).await;
                    }
                });
            }
        });
        Self { url, bodies }
    }
}

/// One HTTP/1.1 request's body (headers, then `content-length` bytes).
async fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let (start, len) = loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, len);
        }
    };
    while buf.len() < start + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf[start..start + len].to_vec())
}
