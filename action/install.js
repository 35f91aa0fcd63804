// Installing a verified flux-handoff for the action: the release archive for this runner's
// platform, checked against the release's checksums file before anything is extracted, kept in
// the runner's tool cache, and the path of the binary returned. The checksums file is
// `flux-handoff_<version>_checksums.txt` (the name Flux's plugin catalog asks for); a release
// from before that name has only `checksums.txt`, read only when the first answers 404. No npm
// dependency: Node's own fetch, crypto and zlib, and the few lines of tar reading the archive
// needs.
//
// The layout of the cache is the one @actions/tool-cache uses, so a runner's cache cleanup
// treats it alike: `$RUNNER_TOOL_CACHE/<tool>/<version>/<arch>/` and the marker file
// `<arch>.complete` beside it, written last (a half-written entry is never used).
//
// The tool cache is writable by every job of a self-hosted runner, so what it holds is checked,
// never trusted: for the action's own version against the sums the action ships
// (`action/checksums.txt`, written by `cargo xtask dist --action-sums` and committed into the
// release's tree: each archive and, as `<archive>!flux-handoff`, the binary in it); for any other
// version the entry keeps the release archive, and a hit reads the release's checksums file
// again (one small request), checks the cached archive against it and runs the binary extracted
// from that archive (the cached binary must be the same bytes). Nothing the cache says of itself
// (its marker) vouches for anything. The binary that runs is a private copy of the verified
// bytes (a directory of its own under RUNNER_TEMP), so nothing can be swapped between the check
// and the run; the post step runs that copy after checking it again against the sum the action
// ships for its version (else the one the main step saved in its state).
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');

const TOOL = 'flux-handoff';

class InstallError extends Error {}

/** Go's GOOS/GOARCH words (the archive names) for the runner's RUNNER_OS/RUNNER_ARCH. */
function platform(env) {
  const os = { Linux: 'linux', macOS: 'darwin' }[env.RUNNER_OS || ''];
  const arch = { X64: 'amd64', ARM64: 'arm64' }[env.RUNNER_ARCH || ''];
  if (!os || !arch) {
    throw new InstallError(
      `no flux-handoff release archive for ${env.RUNNER_OS || '?'}/${env.RUNNER_ARCH || '?'} (releases have linux amd64 and arm64, darwin arm64); build it and set the binary input`,
    );
  }
  return { os, arch };
}

/** The version in this checkout of the action (the release matching the action's own ref). */
function ownVersion(read = (p) => fs.readFileSync(p, 'utf8')) {
  const text = read(path.join(__dirname, '..', 'handoff-cli', 'Cargo.toml'));
  const m = /^version = "([^"]+)"$/m.exec(text);
  if (!m) throw new InstallError('no version in the action\'s handoff-cli/Cargo.toml: set the version input');
  return m[1];
}

/** `owner/name` of this checkout's repository (the workspace Cargo.toml's `repository`). */
function ownRepository(read = (p) => fs.readFileSync(p, 'utf8')) {
  let text = '';
  try {
    text = read(path.join(__dirname, '..', 'Cargo.toml'));
  } catch {
    // Not a full checkout: GITHUB_ACTION_REPOSITORY or download-url must say.
  }
  const m = /^repository = "https:\/\/github\.com\/([^/"]+\/[^/"]+?)\/?"$/m.exec(text);
  return m ? m[1] : null;
}

/** The release's base URL: `download-url` when given, else the GitHub release `v<version>`. */
function baseUrl(inputs, version, repository) {
  const base = inputs.downloadUrl || `https://github.com/${repository}/releases/download/v${version}`;
  return base.replace(/\/+$/, '');
}

/**
 * Why `url` may not be downloaded from, or null: https only, plain http only to this machine
 * (a test server on loopback), nothing that is not a URL.
 */
function urlProblem(url) {
  let u;
  try {
    u = new URL(url);
  } catch {
    return 'is not a URL';
  }
  if (u.protocol === 'https:') return null;
  const loopback = ['localhost', '127.0.0.1', '[::1]'].includes(u.hostname) || /^127\.\d+\.\d+\.\d+$/.test(u.hostname);
  if (u.protocol === 'http:' && loopback) return null;
  return u.protocol === 'http:' ? 'must be https (plain http only to loopback)' : 'must be an https URL';
}

/** `url` as it may be printed: user and password, query and fragment replaced by `***`. */
function shown(url) {
  let u;
  try {
    u = new URL(url);
  } catch {
    return '<not a URL>';
  }
  const auth = u.username || u.password ? '***@' : '';
  const query = u.search ? '?***' : '';
  const hash = u.hash ? '#***' : '';
  return `${u.protocol}//${auth}${u.host}${u.pathname}${query}${hash}`;
}

/** A version as the release names it: semver, no path separators, no `..`. */
function isVersion(v) {
  return /^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$/.test(v);
}

/**
 * The sums this checkout of the action ships (`action/checksums.txt`, sha256sum lines), empty
 * when it ships none (a checkout that is not a release). They name the archives of the
 * action's own version, so another `version` finds nothing here.
 */
function shippedChecksums(read = (p) => fs.readFileSync(p, 'utf8')) {
  try {
    return parseChecksums(read(path.join(__dirname, 'checksums.txt')));
  } catch {
    return new Map();
  }
}

/** A private copy of the verified `data`, the binary that runs: a directory of its own. */
function privateCopy(env, data) {
  const dir = fs.mkdtempSync(path.join(env.RUNNER_TEMP || require('node:os').tmpdir(), `${TOOL}-`));
  const bin = path.join(dir, TOOL);
  writeNew(bin, data, 0o755);
  return bin;
}

/** Writes `data` to a new file at `p` (never through an existing file or symlink). */
function writeNew(p, data, mode) {
  let fd;
  try {
    fd = fs.openSync(p, 'wx', mode);
  } catch (e) {
    if (e.code !== 'EEXIST') throw e;
    // A leftover of a killed install of the same name: remove it (a symlink itself, not what
    // it points to), then create afresh, exclusively.
    fs.unlinkSync(p);
    fd = fs.openSync(p, 'wx', mode);
  }
  try {
    fs.writeSync(fd, data);
  } finally {
    fs.closeSync(fd);
  }
}

/** `<sha256>  <name>` lines (sha256sum's format, `*` for binary mode allowed) into a map. */
function parseChecksums(text) {
  const sums = new Map();
  for (const line of text.split(/\r?\n/)) {
    const m = /^([0-9a-f]{64}) [ *](.+)$/.exec(line.trim());
    if (m) sums.set(m[2], m[1]);
  }
  return sums;
}

/**
 * The content of the regular file `name` at the root of a tar archive (ustar or GNU), or null.
 * Only that one entry is read; nothing is written anywhere.
 */
function tarEntry(tar, name) {
  let off = 0;
  while (off + 512 <= tar.length) {
    const h = tar.subarray(off, off + 512);
    if (h.every((b) => b === 0)) return null;
    const field = (a, b) => h.subarray(a, b).toString('latin1').replace(/\0.*$/s, '');
    let entry = field(0, 100);
    const prefix = field(257, 263).startsWith('ustar') ? field(345, 500) : '';
    if (prefix) entry = `${prefix}/${entry}`;
    const size = parseInt(field(124, 136).trim() || '0', 8);
    const type = String.fromCharCode(h[156] || 48);
    if (!Number.isFinite(size) || size < 0) return null;
    const start = off + 512;
    if ((type === '0' || type === '\0') && entry.replace(/^\.\//, '') === name) {
      if (start + size > tar.length) return null;
      return tar.subarray(start, start + size);
    }
    off = start + Math.ceil(size / 512) * 512;
  }
  return null;
}

/** The sha256 of `data`, lowercase hex. */
function sha256(data) {
  return crypto.createHash('sha256').update(data).digest('hex');
}

/**
 * The body of `url`, or null when `missingOk` and the server answers 404. Every other failure,
 * and any redirect that leaves https, is an InstallError.
 */
async function download(url, fetchImpl, { missingOk = false } = {}) {
  let res;
  try {
    res = await fetchImpl(url, { redirect: 'follow', signal: AbortSignal.timeout(120_000) });
  } catch (e) {
    throw new InstallError(`cannot download ${shown(url)}: ${e.cause ? e.cause.message || e.cause : e.message}; nothing was run`);
  }
  // A redirect may not leave https (a release host sends the archive on to its storage).
  const problem = res.url ? urlProblem(res.url) : null;
  if (problem) throw new InstallError(`cannot download ${shown(url)}: redirected to ${shown(res.url)}, which ${problem}; nothing was run`);
  if (missingOk && res.status === 404) return null;
  if (!res.ok) throw new InstallError(`cannot download ${shown(url)}: HTTP ${res.status}; nothing was run`);
  return Buffer.from(await res.arrayBuffer());
}

/**
 * The release's checksums, and the URL they came from: `<base>/flux-handoff_<version>_checksums.txt`,
 * else `<base>/checksums.txt` only when that answered 404 (a release from before the name);
 * an unreachable server, another status or a redirect off https does not fall back.
 */
async function releaseChecksums(base, version, fetchImpl) {
  const named = `${base}/${TOOL}_${version}_checksums.txt`;
  const body = await download(named, fetchImpl, { missingOk: true });
  if (body) return { url: named, sums: parseChecksums(body.toString('utf8')) };
  const older = `${base}/checksums.txt`;
  return { url: older, sums: parseChecksums((await download(older, fetchImpl)).toString('utf8')) };
}

/**
 * The sums the action ships for `version` on this runner's platform: `{ archive, binary }`
 * (each null when not shipped; both null for a version other than the action's own).
 */
function pinnedSums(env, version, shipped = shippedChecksums()) {
  const { os, arch } = platform(env);
  const name = `${TOOL}_${version}_${os}_${arch}.tar.gz`;
  return { archive: shipped.get(name) || null, binary: shipped.get(`${name}!${TOOL}`) || null };
}

/** The binary at the root of the release archive `name` (its bytes), or an InstallError. */
function extract(archive, name) {
  let tar;
  try {
    tar = zlib.gunzipSync(archive);
  } catch (e) {
    throw new InstallError(`${name} is not a gzip archive (${e.message}); nothing was run`);
  }
  const data = tarEntry(tar, TOOL);
  if (!data) throw new InstallError(`${name} holds no ${TOOL} at its root; nothing was run`);
  return data;
}

/** The release's base URL for `version`, checked: https only (plain http only to loopback). */
function checkedBase(env, inputs, version) {
  const repository = env.GITHUB_ACTION_REPOSITORY || ownRepository();
  if (!repository && !inputs.downloadUrl) {
    throw new InstallError('cannot tell which repository\'s releases to download from: set the download-url input');
  }
  const base = baseUrl(inputs, version, repository);
  const problem = urlProblem(base);
  if (problem) throw new InstallError(`download-url ${shown(base)} ${problem}; nothing was downloaded or run`);
  return base;
}

/**
 * A tool-cache hit, checked: against the binary sum the action ships (its own version), else
 * its cached archive against the archive sum the action ships or, for another version, the
 * release's checksums file read again; then the binary is the one in that archive. Returns the
 * verified binary's bytes and how it was verified, null for an entry to install afresh (one
 * without its archive, from an older action), or throws (a tampered entry: nothing runs).
 */
async function verifiedHit({ entry, pinned, base, version, fetchImpl }) {
  const { dir, marker, bin, archivePath, name } = entry;
  const again = `nothing was run: remove ${dir} and ${marker} to install it again`;
  if (pinned.binary) {
    const data = fs.readFileSync(bin);
    const got = sha256(data);
    if (got !== pinned.binary) {
      throw new InstallError(`the tool cache's ${bin} is not the binary installed there (sha256 ${got}, the sum this action ships ${pinned.binary}); ${again}`);
    }
    return { data, against: `sha256 ${got} verified (the sum this action ships)` };
  }
  if (!fs.existsSync(archivePath)) return null;
  const { url: sumsUrl, sums } = pinned.archive
    ? { url: null, sums: new Map([[name, pinned.archive]]) }
    : await releaseChecksums(base(), version, fetchImpl);
  const source = sumsUrl ? `${path.posix.basename(new URL(sumsUrl).pathname)} says` : 'the sum this action ships';
  const want = sums.get(name);
  if (!want) throw new InstallError(`${shown(sumsUrl)} lists no ${name}: no flux-handoff ${version} release archive for this platform; nothing was run`);
  const got = sha256(fs.readFileSync(archivePath));
  if (got !== want) {
    throw new InstallError(`the tool cache's ${archivePath} is not the release's archive (sha256 ${got}, ${source} ${want}); ${again}`);
  }
  const data = extract(fs.readFileSync(archivePath), name);
  const cached = fs.readFileSync(bin);
  if (sha256(cached) !== sha256(data)) {
    throw new InstallError(`the tool cache's ${bin} is not the binary in its verified archive (sha256 ${sha256(cached)}, the archive's ${sha256(data)}); ${again}`);
  }
  return { data, against: `archive sha256 ${want} verified (${source.replace(/ says$/, '')})` };
}

/** Writes `data` to `p` through a new temporary file beside it, renamed into place. */
function replaceFile(p, data, mode) {
  const tmp = `${p}.${process.pid}.${crypto.randomBytes(6).toString('hex')}`;
  writeNew(tmp, data, mode);
  fs.renameSync(tmp, p);
}

/**
 * Installs flux-handoff `version` into the tool cache unless it is there (and verified), and
 * returns the binary's path and what was done (`cached` or `downloaded`). `log` gets one line
 * per step.
 */
async function install({ env, inputs, log = console.log, fetchImpl = globalThis.fetch, shipped = shippedChecksums() }) {
  const { os, arch } = platform(env);
  const version = inputs.version || ownVersion();
  if (!isVersion(version)) throw new InstallError(`input version ${JSON.stringify(version)} is not a version (e.g. 0.4.1)`);
  const cacheRoot = env.RUNNER_TOOL_CACHE || path.join(env.RUNNER_TEMP || require('node:os').tmpdir(), 'tool-cache');
  const dir = path.join(cacheRoot, TOOL, version, arch);
  const name = `${TOOL}_${version}_${os}_${arch}.tar.gz`;
  const entry = { dir, name, marker: `${dir}.complete`, bin: path.join(dir, TOOL), archivePath: path.join(dir, name) };
  // What the action ships for its own version wins over anything the cache or the release says.
  const pinned = pinnedSums(env, version, shipped);
  const base = () => checkedBase(env, inputs, version);
  if (fs.existsSync(entry.marker) && fs.existsSync(entry.bin)) {
    const hit = await verifiedHit({ entry, pinned, base, version, fetchImpl });
    if (hit) {
      const run = privateCopy(env, hit.data);
      log(`flux-handoff ${version} (${os}/${arch}) from the tool cache, ${hit.against}: ${run}`);
      return { bin: run, sha256: sha256(hit.data), cached: entry.bin, how: 'cached', version };
    }
    // An entry without its archive (an older action wrote it): install afresh.
  }
  const url = base();
  const { url: sumsUrl, sums } = pinned.archive
    ? { url: `${url}/${TOOL}_${version}_checksums.txt`, sums: new Map([[name, pinned.archive]]) }
    : await releaseChecksums(url, version, fetchImpl);
  const want = sums.get(name);
  if (!want) {
    throw new InstallError(`${shown(sumsUrl)} lists no ${name}: no flux-handoff ${version} release archive for ${os}/${arch}; nothing was run`);
  }
  const archive = await download(`${url}/${name}`, fetchImpl);
  const got = sha256(archive);
  if (got !== want) {
    const source = pinned.archive ? 'the sum this action ships' : `${path.posix.basename(new URL(sumsUrl).pathname)} says`;
    throw new InstallError(`checksum mismatch for ${shown(`${url}/${name}`)}: ${source} sha256 ${want}, the download is ${got}; nothing was extracted or run`);
  }
  const data = extract(archive, name);
  if (pinned.binary && sha256(data) !== pinned.binary) {
    throw new InstallError(`${name}'s ${TOOL} is not the binary this action ships the sum of (sha256 ${sha256(data)}, shipped ${pinned.binary}); nothing was run`);
  }
  fs.mkdirSync(dir, { recursive: true });
  // The archive stays beside the binary: a later hit is checked against the release again.
  replaceFile(entry.archivePath, archive, 0o644);
  replaceFile(entry.bin, data, 0o755);
  // The marker, written last, says the entry is whole; it vouches for nothing.
  replaceFile(entry.marker, `${name} sha256:${want}\nbinary sha256:${sha256(data)}\n`, 0o644);
  const run = privateCopy(env, data);
  log(`flux-handoff ${version} (${os}/${arch}) downloaded from ${shown(`${url}/${name}`)}, sha256 ${want} verified${pinned.archive ? ' (the sum this action ships)' : ''}: ${run}`);
  return { bin: run, sha256: sha256(data), cached: entry.bin, how: 'downloaded', version };
}

module.exports = { InstallError, baseUrl, install, isVersion, ownRepository, ownVersion, parseChecksums, pinnedSums, platform, sha256, shippedChecksums, shown, tarEntry, urlProblem };
