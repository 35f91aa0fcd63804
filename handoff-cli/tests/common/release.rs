//! A flux-handoff release served on loopback: the archive of the tests' binary for
//! linux/amd64 (as `cargo xtask dist` names it) and its checksums, under both names `cargo
//! xtask dist` writes (`flux-handoff_<version>_checksums.txt`, the one Flux's plugin catalog
//! asks for, and `checksums.txt`, kept for compatibility), over a minimal HTTP/1.1 server that
//! records every request path.

#![allow(dead_code)] // each test binary uses a different part

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The version of the binary under test (the archive's name carries it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The checksums file's name Flux's plugin catalog asks for: `<bin>_<version>_checksums.txt`.
pub fn sums_name() -> String {
    format!("flux-handoff_{VERSION}_checksums.txt")
}

/// A release directory served over HTTP on loopback; every request path is recorded.
pub struct Release {
    pub dir: PathBuf,
    pub url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Release {
    /// `flux-handoff_<version>_linux_amd64.tar.gz` holding the tests' binary, and its
    /// checksums files; `tamper` flips one byte of the archive after its checksum was taken.
    pub fn new(tamper: bool) -> Self {
        let dir = std::env::temp_dir().join(format!("fh-release-{}", testkit::random_suffix(8)));
        let stage = dir.join("stage");
        std::fs::create_dir_all(&stage).unwrap();
        std::fs::copy(
            env!("CARGO_BIN_EXE_flux-handoff"),
            stage.join("flux-handoff"),
        )
        .unwrap();
        let name = format!("flux-handoff_{VERSION}_linux_amd64.tar.gz");
        let ok = std::process::Command::new("tar")
            .arg("-czf")
            .arg(dir.join(&name))
            .arg("-C")
            .arg(&stage)
            .arg("flux-handoff")
            .status()
            .unwrap();
        assert!(ok.success());
        let sums = std::process::Command::new("sha256sum")
            .arg(&name)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(sums.status.success());
        std::fs::write(dir.join(sums_name()), &sums.stdout).unwrap();
        std::fs::write(dir.join("checksums.txt"), &sums.stdout).unwrap();
        if tamper {
            let path = dir.join(&name);
            let mut bytes = std::fs::read(&path).unwrap();
            let i = bytes.len() / 2;
            bytes[i] ^= 0x01;
            std::fs::write(&path, bytes).unwrap();
        }
        let (url, requests) = serve(dir.clone());
        Self { dir, url, requests }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A minimal HTTP/1.1 file server on 127.0.0.1 (GET only, one request per connection).
fn serve(dir: PathBuf) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (dir, seen) = (dir.clone(), seen.clone());
            std::thread::spawn(move || answer(conn, &dir, &seen));
        }
    });
    (url, requests)
}

fn answer(mut conn: TcpStream, dir: &Path, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    // Skip the headers.
    let mut h = String::new();
    while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
        h.clear();
    }
    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
    seen.lock().unwrap().push(path.clone());
    let file = dir.join(path.trim_start_matches('/'));
    let (status, body) = match std::fs::read(&file) {
        Ok(b) if !path.contains("..") => ("200 OK", b),
        _ => ("404 Not Found", b"not found\n".to_vec()),
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(&body);
}
