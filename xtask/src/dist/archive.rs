//! The release archive's tar: written as ustar (sorted entries, owner 0, one mtime) and read
//! back for the binary at its root.

use anyhow::bail;

/// One file of the archive.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) path: String,
    data: Vec<u8>,
    mode: u32,
}

impl Entry {
    pub(super) fn file(path: &str, data: Vec<u8>, mode: u32) -> Self {
        Self {
            path: path.into(),
            data,
            mode,
        }
    }
}

/// A ustar archive of `entries` (regular files; paths under 100 bytes), every mtime `mtime`,
/// owner and group 0.
pub(super) fn tar(entries: &[Entry], mtime: u64) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for e in entries {
        if e.path.len() >= 100 {
            bail!("archive path too long for ustar: {}", e.path);
        }
        let mut h = [0u8; 512];
        h[..e.path.len()].copy_from_slice(e.path.as_bytes());
        octal(&mut h[100..108], u64::from(e.mode));
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[124..136], e.data.len() as u64);
        octal(&mut h[136..148], mtime);
        h[148..156].copy_from_slice(b"        ");
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        let text = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(text.as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(&e.data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    // Two zero blocks end the archive.
    out.resize(out.len() + 1024, 0);
    Ok(out)
}

/// `value` as a NUL-terminated octal number filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(&text.as_bytes()[text.len() - width..]);
    field[width] = 0;
}

/// The content of the regular file `name` at the root of a ustar archive, or None.
pub(super) fn tar_entry<'a>(tar: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let mut off = 0;
    while off + 512 <= tar.len() {
        let h = &tar[off..off + 512];
        if h.iter().all(|b| *b == 0) {
            return None;
        }
        let text = |a: usize, b: usize| {
            let f = &h[a..b];
            let end = f.iter().position(|c| *c == 0).unwrap_or(f.len());
            String::from_utf8_lossy(&f[..end]).trim().to_string()
        };
        let size = usize::from_str_radix(&text(124, 136), 8).ok()?;
        let start = off + 512;
        let regular = matches!(h[156], b'0' | 0);
        if regular && text(0, 100).trim_start_matches("./") == name {
            return tar.get(start..start + size);
        }
        off = start + size.div_ceil(512) * 512;
    }
    None
}
