//! `cargo xtask dist`: the release archive of `flux-handoff` for the host (or `--target`), the
//! same way here and in `.github/workflows/release.yml`.
//!
//! Writes into `dist/`:
//! - `flux-handoff_<version>_<os>_<arch>.tar.gz`: the binary at the archive root, `LICENSE`,
//!   `README.md`, `flux-handoff.1` (the man page) and `completions/` (bash, zsh, fish) — the
//!   last two printed by the binary just built (`flux-handoff man`, `completions`), so the
//!   target must run on this machine (the release builds each platform on its own runner).
//!   The tar is written here (ustar, sorted, owner 0, the commit's time as every mtime) and
//!   compressed with `gzip -n`: the same inputs give the same bytes.
//! - `flux-handoff_<version>_checksums.txt`: `<sha256>  <file>` for every archive in `dist/`
//!   (`sha256sum -c` reads it), the name Flux's plugin catalog (fluxcd/plugins) asks for; and
//!   `checksums.txt`, the same bytes, kept for compatibility: older versions of the Action
//!   and install lines written before the catalog's name read that one.
//! - `handoff.yaml`: the Flux CLI plugin manifest (`cli.fluxcd.io/v1beta1`, kind `Plugin`, as
//!   flux2 v2.9's `pkg/plugin/types.go` defines it; `flux plugin install handoff` fetches
//!   `<catalog>/handoff.yaml`, internal/plugin/catalog.go) listing each archive in `dist/` with
//!   its URL under `--base-url` and its `sha256:` checksum.
//!
//! `cargo xtask dist index [--dir D] --base-url URL` only rewrites both checksums files and
//! `handoff.yaml` from the archives already in `dist/` (or D): the release's last job, after
//! each platform's job uploaded its archive, and the `flux_plugin_` tests' loopback catalog.
//!
//! `--action-sums FILE` (either form) also writes the sums the Action ships for its own version
//! (`action/checksums.txt` in the release's tree, read by `action/install.js`): each archive's
//! sha256 as `<sha256>  <archive>`, and the sha256 of the binary inside it as
//! `<sha256>  <archive>!flux-handoff`, so a tool-cache hit is checked against the action's own
//! tree, never against what the writable cache says of itself. The release workflow commits
//! that file on top of the tagged commit and points the tag at it (docs/github-actions.md).

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::paths;

mod archive;
use archive::{Entry, tar, tar_entry};

/// The binary, and the prefix of every archive.
pub const BIN: &str = "flux-handoff";
/// The plugin name (`flux handoff`).
pub const PLUGIN: &str = "handoff";
/// The plugin's one-line description (the manifest's; the catalog entry says the same).
pub const DESCRIPTION: &str =
    "Take Flux objects out of Flux's hands, prove the pause, do work, hand them back";
/// The checksums file's name before the catalog's `<bin>_<version>_checksums.txt`.
const COMPAT_SUMS: &str = "checksums.txt";

/// The checksums file's name Flux's plugin catalog asks for: `<bin>_<version>_checksums.txt`.
pub fn sums_name(version: &str) -> String {
    format!("{BIN}_{version}_checksums.txt")
}

/// What `cargo xtask dist` was asked for.
#[derive(Debug, Default)]
pub struct Flags {
    /// Only rewrite the checksums and the manifest.
    pub index_only: bool,
    /// Where the release's archives are downloaded from (`<base-url>/<archive>`).
    pub base_url: Option<String>,
    /// A Rust target triple (default: the host).
    pub target: Option<String>,
    /// The directory of the archives (default `dist/`; `index` only).
    pub dir: Option<PathBuf>,
    /// Where to write the sums the Action ships (`action/checksums.txt` for a release).
    pub action_sums: Option<PathBuf>,
}

impl Flags {
    pub fn parse(flags: &[&str]) -> anyhow::Result<Self> {
        let mut f = Self::default();
        let mut it = flags.iter();
        if flags.first() == Some(&"index") {
            f.index_only = true;
            it.next();
        }
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .map(|v| (*v).to_string())
                    .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
            };
            match *flag {
                "--base-url" => f.base_url = Some(value()?),
                "--target" if !f.index_only => f.target = Some(value()?),
                "--dir" if f.index_only => f.dir = Some(PathBuf::from(value()?)),
                "--action-sums" => f.action_sums = Some(PathBuf::from(value()?)),
                other => bail!("unknown flag `{other}` for dist"),
            }
        }
        Ok(f)
    }
}

pub fn run(flags: &Flags) -> anyhow::Result<()> {
    let root = paths::root();
    let dist = flags.dir.clone().unwrap_or_else(|| root.join("dist"));
    let version = version(&root)?;
    fs::create_dir_all(&dist)?;
    if !flags.index_only {
        let archive = build(&root, &dist, &version, flags.target.as_deref())?;
        eprintln!("xtask: wrote {}", archive.display());
    }
    let base = match &flags.base_url {
        Some(b) => b.trim_end_matches('/').to_string(),
        None => format!("{}/releases/download/v{version}", repository(&root)?),
    };
    let archives = archives(&dist, &version)?;
    if archives.is_empty() {
        bail!("no {BIN}_{version}_*.tar.gz in {}", dist.display());
    }
    let mut sums = String::new();
    let mut platforms = Vec::new();
    for a in &archives {
        let name = a
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let hex = sha256_hex(&fs::read(a)?);
        let _ = writeln!(sums, "{hex}  {name}");
        let (os, arch) = platform_of(&name, &version)?;
        platforms.push(Platform {
            os,
            arch,
            url: format!("{base}/{name}"),
            checksum: format!("sha256:{hex}"),
        });
    }
    if let Some(path) = &flags.action_sums {
        fs::write(path, action_sums(&version, &archives)?)?;
        eprintln!(
            "xtask: wrote {} (the sums the Action ships)",
            path.display()
        );
    }
    let named = sums_name(&version);
    fs::write(dist.join(&named), &sums)?;
    fs::write(dist.join(COMPAT_SUMS), &sums)?;
    fs::write(
        dist.join(format!("{PLUGIN}.yaml")),
        manifest(&version, &repository(&root)?, &platforms),
    )?;
    eprintln!(
        "xtask: wrote {named} (and {COMPAT_SUMS}, the same) and {PLUGIN}.yaml in {} ({} \
         platform(s), base {base})",
        dist.display(),
        platforms.len()
    );
    Ok(())
}

/// Builds the binary, runs it for the man page and completions, writes the archive.
fn build(root: &Path, dist: &Path, version: &str, target: Option<&str>) -> anyhow::Result<PathBuf> {
    let mut args = vec![
        "build",
        "--release",
        "--locked",
        "-p",
        "handoff-cli",
        "--bin",
        BIN,
    ];
    if let Some(t) = target {
        args.extend(["--target", t]);
    }
    crate::proc::run("cargo", &args, root)?;
    let dir = root.join("target");
    let dir = target.map_or_else(|| dir.join("release"), |t| dir.join(t).join("release"));
    let bin = dir.join(BIN);
    let (os, arch) = match target {
        Some(t) => platform_of_triple(t)?,
        None => host_platform()?,
    };
    let output = |args: &[&str]| -> anyhow::Result<Vec<u8>> {
        let out = Command::new(&bin).args(args).output().with_context(|| {
            format!("cannot run {} (built for another platform?)", bin.display())
        })?;
        if !out.status.success() {
            bail!("{BIN} {} failed ({})", args.join(" "), out.status);
        }
        Ok(out.stdout)
    };
    let mtime = commit_time(root);
    let mut entries: Vec<Entry> = vec![
        Entry::file(BIN, fs::read(&bin)?, 0o755),
        Entry::file("LICENSE", fs::read(root.join("LICENSE"))?, 0o644),
        Entry::file("README.md", fs::read(root.join("README.md"))?, 0o644),
        Entry::file(&format!("{BIN}.1"), output(&["man"])?, 0o644),
        Entry::file(
            &format!("completions/{BIN}.bash"),
            output(&["completions", "bash"])?,
            0o644,
        ),
        Entry::file(
            &format!("completions/_{BIN}"),
            output(&["completions", "zsh"])?,
            0o644,
        ),
        Entry::file(
            &format!("completions/{BIN}.fish"),
            output(&["completions", "fish"])?,
            0o644,
        ),
    ];
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let tar = tar(&entries, mtime)?;
    let name = format!("{BIN}_{version}_{os}_{arch}.tar.gz");
    let path = dist.join(&name);
    let mut gzip = Command::new("gzip")
        .args(["-n", "-9", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run gzip")?;
    let mut stdin = gzip.stdin.take().context("gzip stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(&tar));
    let out = gzip.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer panicked"))??;
    if !out.status.success() {
        bail!("gzip failed ({})", out.status);
    }
    let tmp = dist.join(format!(".{name}.tmp"));
    fs::write(&tmp, out.stdout)?;
    fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The sums the Action ships for `version` (`action/checksums.txt`): per archive its sha256 and
/// the sha256 of the binary at its root (`<archive>!flux-handoff`), sha256sum lines.
fn action_sums(version: &str, archives: &[PathBuf]) -> anyhow::Result<String> {
    let mut out = format!(
        "# flux-handoff {version}: the sums this action ships (cargo xtask dist --action-sums)\n"
    );
    for a in archives {
        let name = a.file_name().unwrap_or_default().to_string_lossy();
        let gz = fs::read(a)?;
        let tar = Command::new("gzip")
            .args(["-dc", "--"])
            .arg(a)
            .output()
            .context("running gzip -dc")?;
        if !tar.status.success() {
            bail!("{name} is not a gzip archive");
        }
        let bin = tar_entry(&tar.stdout, BIN)
            .with_context(|| format!("{name} holds no {BIN} at its root"))?;
        let _ = writeln!(out, "{}  {name}", sha256_hex(&gz));
        let _ = writeln!(out, "{}  {name}!{BIN}", sha256_hex(bin));
    }
    Ok(out)
}

/// The lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    d.as_ref().iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// One platform of the plugin manifest.
#[derive(Debug)]
pub struct Platform {
    pub os: String,
    pub arch: String,
    pub url: String,
    pub checksum: String,
}

/// The `Plugin` manifest (flux2 `pkg/plugin/types.go`): `bin` is the file the archive holds at
/// its root and the installed name; versions newest first (one here). `cargo xtask catalog`
/// checks it against the catalog's rules (catalog.rs).
pub fn manifest(version: &str, repository: &str, platforms: &[Platform]) -> String {
    let mut y = String::new();
    let _ = writeln!(y, "apiVersion: cli.fluxcd.io/v1beta1");
    let _ = writeln!(y, "kind: Plugin");
    let _ = writeln!(y, "name: {PLUGIN}");
    let _ = writeln!(y, "description: {DESCRIPTION}");
    let _ = writeln!(y, "homepage: {repository}");
    let _ = writeln!(y, "source: {repository}");
    let _ = writeln!(y, "bin: {BIN}");
    let _ = writeln!(y, "versions:");
    let _ = writeln!(y, "  - version: {version}");
    let _ = writeln!(y, "    platforms:");
    for p in platforms {
        let _ = writeln!(y, "      - os: {}", p.os);
        let _ = writeln!(y, "        arch: {}", p.arch);
        let _ = writeln!(y, "        url: {}", p.url);
        let _ = writeln!(y, "        checksum: {}", p.checksum);
    }
    y
}

/// The archives of `version` in `dist`, sorted.
fn archives(dist: &Path, version: &str) -> anyhow::Result<Vec<PathBuf>> {
    let prefix = format!("{BIN}_{version}_");
    let mut v: Vec<PathBuf> = fs::read_dir(dist)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".tar.gz"))
        })
        .collect();
    v.sort();
    Ok(v)
}

/// `(os, arch)` from an archive name `flux-handoff_<version>_<os>_<arch>.tar.gz`.
fn platform_of(name: &str, version: &str) -> anyhow::Result<(String, String)> {
    let rest = name
        .strip_prefix(&format!("{BIN}_{version}_"))
        .and_then(|r| r.strip_suffix(".tar.gz"))
        .with_context(|| format!("not an archive name: {name}"))?;
    let (os, arch) = rest
        .split_once('_')
        .with_context(|| format!("no os_arch in {name}"))?;
    Ok((os.into(), arch.into()))
}

/// Go's GOOS/GOARCH words (what the flux CLI matches, `runtime.GOOS`/`GOARCH`) of a triple.
fn platform_of_triple(triple: &str) -> anyhow::Result<(String, String)> {
    let arch = match triple.split('-').next().unwrap_or_default() {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => bail!("unsupported architecture {other} in {triple}"),
    };
    let os = if triple.contains("-linux-") {
        "linux"
    } else if triple.contains("-apple-darwin") {
        "darwin"
    } else {
        bail!("unsupported operating system in {triple}")
    };
    Ok((os.into(), arch.into()))
}

fn host_platform() -> anyhow::Result<(String, String)> {
    let os = match std::env::consts::OS {
        "linux" => "linux",
        "macos" => "darwin",
        other => bail!("unsupported host operating system {other}"),
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => bail!("unsupported host architecture {other}"),
    };
    Ok((os.into(), arch.into()))
}

/// The version of the `handoff-cli` package.
pub fn version(root: &Path) -> anyhow::Result<String> {
    let text = fs::read_to_string(root.join("handoff-cli/Cargo.toml"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(str::to_string)
        .context("no version in handoff-cli/Cargo.toml")
}

/// The workspace's `repository` URL.
pub fn repository(root: &Path) -> anyhow::Result<String> {
    let text = fs::read_to_string(root.join("Cargo.toml"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("repository = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(|v| v.trim_end_matches('/').to_string())
        .context("no repository in Cargo.toml")
}

/// `SOURCE_DATE_EPOCH`, else the commit's time, else 0: every archive entry's mtime.
fn commit_time(root: &Path) -> u64 {
    if let Some(t) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return t;
    }
    Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_vectors() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn platforms_are_go_words() {
        for (t, os, arch) in [
            ("x86_64-unknown-linux-musl", "linux", "amd64"),
            ("aarch64-unknown-linux-musl", "linux", "arm64"),
            ("aarch64-apple-darwin", "darwin", "arm64"),
        ] {
            assert_eq!(platform_of_triple(t).unwrap(), (os.into(), arch.into()));
        }
        assert!(platform_of_triple("riscv64gc-unknown-linux-gnu").is_err());
        assert_eq!(
            platform_of("flux-handoff_0.1.0_linux_amd64.tar.gz", "0.1.0").unwrap(),
            ("linux".into(), "amd64".into())
        );
    }

    #[test]
    fn action_sums_name_each_archive_and_the_binary_in_it() {
        let dir = std::env::temp_dir().join(format!("xtask-sums-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let bin = b"#!/bin/sh\necho hi\n".to_vec();
        let tar = tar(
            &[
                Entry::file("README.md", b"r".to_vec(), 0o644),
                Entry::file(BIN, bin.clone(), 0o755),
            ],
            0,
        )
        .unwrap();
        assert_eq!(tar_entry(&tar, BIN), Some(&bin[..]));
        assert_eq!(tar_entry(&tar, "missing"), None);
        let raw = dir.join("raw.tar");
        fs::write(&raw, &tar).unwrap();
        assert!(
            Command::new("gzip")
                .arg("-n")
                .arg(&raw)
                .status()
                .unwrap()
                .success()
        );
        let archive = dir.join(format!("{BIN}_9.9.9_linux_amd64.tar.gz"));
        fs::rename(dir.join("raw.tar.gz"), &archive).unwrap();
        let text = action_sums("9.9.9", std::slice::from_ref(&archive)).unwrap();
        let gz = sha256_hex(&fs::read(&archive).unwrap());
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                format!("{gz}  {BIN}_9.9.9_linux_amd64.tar.gz"),
                format!("{}  {BIN}_9.9.9_linux_amd64.tar.gz!{BIN}", sha256_hex(&bin)),
            ]
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn tar_headers_are_ustar_with_a_valid_checksum() {
        let t = tar(&[Entry::file("a", b"hi".to_vec(), 0o755)], 7).unwrap();
        assert_eq!(t.len(), 512 + 512 + 1024);
        assert_eq!(&t[257..263], b"ustar\0");
        assert_eq!(&t[100..108], b"0000755\0");
        let mut h = t[..512].to_vec();
        let stored = std::str::from_utf8(&h[148..154]).unwrap().to_string();
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        assert_eq!(u32::from_str_radix(&stored, 8).unwrap(), sum);
        assert_eq!(&t[512..514], b"hi");
    }
}
