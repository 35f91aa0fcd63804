// Tests of install.js: node --test action/install.test.js (run by the runner_cancel_ tests too).
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const test = require('node:test');
const zlib = require('node:zlib');

const inst = require('./install');

/** A ustar archive of regular files `[name, Buffer]` (what `cargo xtask dist` writes). */
function tar(files) {
  const blocks = [];
  for (const [name, data] of files) {
    const h = Buffer.alloc(512);
    h.write(name, 0, 'latin1');
    h.write('0000755\0', 100, 'latin1');
    h.write(`${data.length.toString(8).padStart(11, '0')}\0`, 124, 'latin1');
    h.write('0', 156, 'latin1');
    h.write('ustar\0', 257, 'latin1');
    blocks.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

test('platform: the runner words map to the archive words; others are one clear error', () => {
  assert.deepEqual(inst.platform({ RUNNER_OS: 'Linux', RUNNER_ARCH: 'X64' }), { os: 'linux', arch: 'amd64' });
  assert.deepEqual(inst.platform({ RUNNER_OS: 'macOS', RUNNER_ARCH: 'ARM64' }), { os: 'darwin', arch: 'arm64' });
  assert.throws(() => inst.platform({ RUNNER_OS: 'Windows', RUNNER_ARCH: 'X64' }), /no flux-handoff release archive for Windows\/X64/);
});

test('checksums: sha256sum lines, text or binary mode', () => {
  const a = 'a'.repeat(64);
  const b = 'b'.repeat(64);
  const sums = inst.parseChecksums(`${a}  one.tar.gz\n${b} *two.tar.gz\nnoise\n`);
  assert.equal(sums.get('one.tar.gz'), a);
  assert.equal(sums.get('two.tar.gz'), b);
  assert.equal(sums.size, 2);
});

test('tar: only the named file at the root is read', () => {
  const t = tar([['README.md', Buffer.from('r')], ['completions/flux-handoff', Buffer.from('no')], ['flux-handoff', Buffer.from('bin')]]);
  assert.equal(inst.tarEntry(t, 'flux-handoff').toString(), 'bin');
  assert.equal(inst.tarEntry(t, 'missing'), null);
  assert.equal(inst.tarEntry(Buffer.alloc(100), 'flux-handoff'), null);
});

test('the action knows its own version and repository from its checkout', () => {
  assert.match(inst.ownVersion(), /^[0-9]+\.[0-9]+\.[0-9]+/);
  assert.equal(inst.ownRepository(() => 'repository = "https://github.com/acme/flux-handoff"\n'), 'acme/flux-handoff');
  assert.equal(inst.ownRepository(() => 'nothing'), null);
  assert.equal(inst.baseUrl({ downloadUrl: 'http://m/x/' }, '1.0.0', 'a/b'), 'http://m/x');
  assert.equal(inst.baseUrl({}, '1.0.0', 'a/b'), 'https://github.com/a/b/releases/download/v1.0.0');
});

test('install: verified before extraction, cached afterwards, a mismatch installs nothing', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fh-inst-'));
  const env = { RUNNER_OS: 'Linux', RUNNER_ARCH: 'X64', RUNNER_TOOL_CACHE: dir, RUNNER_TEMP: dir };
  const archive = zlib.gzipSync(tar([['flux-handoff', Buffer.from('#!/bin/sh\necho hi\n')]]));
  const name = 'flux-handoff_9.9.9_linux_amd64.tar.gz';
  const served = new Map([
    ['https://m/checksums.txt', Buffer.from(`${inst.sha256(archive)}  ${name}\n`)],
    [`https://m/${name}`, archive],
  ]);
  let fetched = [];
  const fetchImpl = async (url) => {
    fetched.push(url);
    const body = served.get(url);
    return { ok: body !== undefined, status: body ? 200 : 404, arrayBuffer: async () => body };
  };
  const inputs = { version: '9.9.9', downloadUrl: 'https://m' };
  const log = () => {};

  // Tampered: one byte differs from what checksums.txt says.
  const bad = Buffer.from(archive);
  bad[bad.length - 1] ^= 1;
  served.set(`https://m/${name}`, bad);
  await assert.rejects(inst.install({ env, inputs, log, fetchImpl }), /checksum mismatch .* nothing was extracted or run/);
  assert.equal(fs.existsSync(path.join(dir, 'flux-handoff')), false);

  served.set(`https://m/${name}`, archive);
  const first = await inst.install({ env, inputs, log, fetchImpl });
  assert.equal(first.how, 'downloaded');
  assert.equal(fs.readFileSync(first.bin, 'utf8'), '#!/bin/sh\necho hi\n');
  assert.equal(fs.statSync(first.bin).mode & 0o777, 0o755);
  assert.ok(fs.existsSync(path.join(dir, 'flux-handoff', '9.9.9', 'amd64.complete')));
  // Cached afterwards, with its archive: a hit for a version the action does not pin reads
  // the release's checksums again (one small request, here a 404 then the older name), never
  // the archive, and runs the binary of the cached archive those sums verify.
  assert.ok(fs.existsSync(path.join(dir, 'flux-handoff', '9.9.9', 'amd64', name)));
  fetched = [];
  const second = await inst.install({ env, inputs, log, fetchImpl });
  assert.equal(second.how, 'cached');
  assert.deepEqual(fetched, ['https://m/flux-handoff_9.9.9_checksums.txt', 'https://m/checksums.txt']);
  assert.equal(fs.readFileSync(second.bin, 'utf8'), '#!/bin/sh\necho hi\n');

  await assert.rejects(
    inst.install({ env: { ...env, RUNNER_ARCH: 'ARM64' }, inputs, log, fetchImpl }),
    /lists no flux-handoff_9\.9\.9_linux_arm64\.tar\.gz/,
  );
  const down = async () => { throw new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:9') }); };
  await assert.rejects(
    inst.install({ env: { ...env, RUNNER_TOOL_CACHE: path.join(dir, 'other') }, inputs, log, fetchImpl: down }),
    /cannot download https:\/\/m\/flux-handoff_9\.9\.9_checksums\.txt: connect ECONNREFUSED/,
  );
  fs.rmSync(dir, { recursive: true });
});

/**
 * A served release of `flux-handoff` 9.9.9 for linux/amd64 and a fetch over it; `sums` names
 * the checksums files it has (both, as `cargo xtask dist` writes them, by default).
 */
function release(base, sums = ['flux-handoff_9.9.9_checksums.txt', 'checksums.txt']) {
  const archive = zlib.gzipSync(tar([['flux-handoff', Buffer.from('#!/bin/sh\necho hi\n')]]));
  const name = 'flux-handoff_9.9.9_linux_amd64.tar.gz';
  const served = new Map([[`${base}/${name}`, archive]]);
  for (const file of sums) served.set(`${base}/${file}`, Buffer.from(`${inst.sha256(archive)}  ${name}\n`));
  const fetched = [];
  const fetchImpl = async (url) => {
    fetched.push(url);
    const body = served.get(url);
    return { ok: body !== undefined, status: body ? 200 : 404, url, arrayBuffer: async () => body };
  };
  return { fetchImpl, fetched, name, served };
}

function cache() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fh-trust-'));
  return { dir, env: { RUNNER_OS: 'Linux', RUNNER_ARCH: 'X64', RUNNER_TOOL_CACHE: dir, RUNNER_TEMP: dir } };
}

test('action_trust: the sums the action ships win over the tool cache\'s marker and the release', async () => {
  const { dir, env } = cache();
  const { fetchImpl, fetched, name, served } = release('https://m');
  const archive = served.get(`https://m/${name}`);
  const binary = inst.tarEntry(zlib.gunzipSync(archive), 'flux-handoff');
  const shipped = new Map([[name, inst.sha256(archive)], [`${name}!flux-handoff`, inst.sha256(binary)]]);
  const inputs = { version: '9.9.9', downloadUrl: 'https://m' };
  // The release's own checksums file is not even asked for: the action ships the sum.
  const first = await inst.install({ env, inputs, log: () => {}, fetchImpl, shipped });
  assert.equal(first.how, 'downloaded');
  assert.deepEqual(fetched, [`https://m/${name}`]);
  // A job of a shared runner plants a binary and a marker that vouches for it.
  const evil = Buffer.from('#!/bin/sh\necho evil\n');
  fs.writeFileSync(first.cached, evil);
  fs.writeFileSync(`${path.dirname(first.cached)}.complete`, `${name} sha256:x\nbinary sha256:${inst.sha256(evil)}\n`);
  await assert.rejects(
    inst.install({ env, inputs, log: () => {}, fetchImpl, shipped }),
    /is not the binary installed there .*the sum this action ships .*nothing was run/,
  );
  // A release whose archive is not the one the action ships the sum of is never extracted.
  const other = cache();
  served.set(`https://m/${name}`, zlib.gzipSync(tar([['flux-handoff', evil]])));
  await assert.rejects(
    inst.install({ env: other.env, inputs, log: () => {}, fetchImpl, shipped }),
    /checksum mismatch .* nothing was extracted or run/,
  );
  fs.rmSync(dir, { recursive: true });
  fs.rmSync(other.dir, { recursive: true });
});

test('action_trust: download-url is https; plain http only to loopback', async () => {
  assert.equal(inst.urlProblem('https://releases.example/v1'), null);
  assert.equal(inst.urlProblem('http://127.0.0.1:8080/r'), null);
  assert.equal(inst.urlProblem('http://localhost/r'), null);
  assert.equal(inst.urlProblem('http://[::1]:9/r'), null);
  assert.match(inst.urlProblem('http://releases.example/v1'), /must be https/);
  assert.match(inst.urlProblem('file:///etc/passwd'), /must be an https URL/);
  assert.match(inst.urlProblem('not a url'), /is not a URL/);
  const { dir, env } = cache();
  const { fetchImpl, fetched } = release('http://releases.example');
  await assert.rejects(
    inst.install({ env, inputs: { version: '9.9.9', downloadUrl: 'http://releases.example' }, log: () => {}, fetchImpl }),
    /must be https .*nothing was downloaded or run/,
  );
  assert.deepEqual(fetched, []);
  // A redirect that leaves https is refused too.
  const downgrade = async (url) => ({ ok: true, status: 200, url: url.replace('https://', 'http://'), arrayBuffer: async () => Buffer.alloc(0) });
  await assert.rejects(
    inst.install({ env, inputs: { version: '9.9.9', downloadUrl: 'https://r.example' }, log: () => {}, fetchImpl: downgrade }),
    /redirected to http:\/\/r\.example\/flux-handoff_9\.9\.9_checksums\.txt, which must be https/,
  );
  fs.rmSync(dir, { recursive: true });
});

test('action_trust: a tool-cache hit of another version is verified against the release again, never the cache', async () => {
  const { dir, env } = cache();
  const { fetchImpl, fetched, name } = release('https://m');
  const inputs = { version: '9.9.9', downloadUrl: 'https://m' };
  const first = await inst.install({ env, inputs, log: () => {}, fetchImpl });
  assert.equal(first.how, 'downloaded');
  // What runs is a private copy of the verified bytes, not the cache's file.
  assert.notEqual(first.bin, first.cached);
  assert.equal(first.sha256, inst.sha256(fs.readFileSync(first.bin)));
  const entry = path.dirname(first.cached);
  const marker = `${entry}.complete`;
  const evil = Buffer.from('#!/bin/sh\necho evil\n');
  // Someone swaps the cached binary and a marker that vouches for it: the next job must not
  // run it (it is not the binary of the archive the release's sums verify).
  fs.writeFileSync(first.cached, evil);
  fs.writeFileSync(marker, `${name} sha256:x\nbinary sha256:${inst.sha256(evil)}\n`);
  fetched.length = 0;
  await assert.rejects(
    inst.install({ env, inputs, log: () => {}, fetchImpl }),
    /the tool cache's .*flux-handoff is not the binary in its verified archive .*nothing was run: remove /,
  );
  assert.deepEqual(fetched, ['https://m/flux-handoff_9.9.9_checksums.txt']);
  // The whole entry planted alike (archive, binary, marker): the release's sums refuse it.
  const planted = zlib.gzipSync(tar([['flux-handoff', evil]]));
  fs.writeFileSync(path.join(entry, name), planted);
  fs.writeFileSync(marker, `${name} sha256:${inst.sha256(planted)}\nbinary sha256:${inst.sha256(evil)}\n`);
  await assert.rejects(
    inst.install({ env, inputs, log: () => {}, fetchImpl }),
    /the tool cache's .* is not the release's archive \(sha256 [0-9a-f]{64}, flux-handoff_9\.9\.9_checksums\.txt says [0-9a-f]{64}\); nothing was run/,
  );
  // Nothing of the planted entry was copied out to run.
  const copies = fs.readdirSync(dir).filter((d) => d.startsWith('flux-handoff-'));
  for (const d of copies) assert.notEqual(fs.readFileSync(path.join(dir, d, 'flux-handoff'), 'utf8'), evil.toString());
  fs.rmSync(dir, { recursive: true });
});

test('action_trust: a version is a version; nothing escapes the tool cache', async () => {
  for (const v of ['1.2.3', '0.4.1-rc.1', '1.0.0+build.5']) assert.ok(inst.isVersion(v), v);
  for (const v of ['..', '1.2.3/../../x', '../1.2.3', '1..2.3', '1.2', 'v1.2.3', '1.2.3-', '']) {
    assert.ok(!inst.isVersion(v), v);
  }
  const { dir, env } = cache();
  const { fetchImpl, fetched } = release('https://m');
  await assert.rejects(
    inst.install({ env, inputs: { version: '1.2.3/../..', downloadUrl: 'https://m' }, log: () => {}, fetchImpl }),
    /is not a version/,
  );
  assert.deepEqual(fetched, []);
  fs.rmSync(dir, { recursive: true });
});

test('action_trust: the temporary file is created exclusively, never through a symlink', async () => {
  const { dir, env } = cache();
  const { fetchImpl } = release('https://m');
  const target = path.join(dir, 'victim');
  fs.writeFileSync(target, 'untouched');
  // Every name the installer could pick for its temporary file, as a symlink to the victim.
  const tool = path.join(dir, 'flux-handoff', '9.9.9', 'amd64');
  fs.mkdirSync(tool, { recursive: true });
  const realRandom = require('node:crypto').randomBytes;
  require('node:crypto').randomBytes = (n) => Buffer.alloc(n, 0xab);
  try {
    for (const name of [`.flux-handoff.${process.pid}`, `.flux-handoff.${process.pid}.${'ab'.repeat(6)}`]) {
      fs.symlinkSync(target, path.join(tool, name));
    }
    const got = await inst.install({ env, inputs: { version: '9.9.9', downloadUrl: 'https://m' }, log: () => {}, fetchImpl });
    assert.equal(got.how, 'downloaded');
  } finally {
    require('node:crypto').randomBytes = realRandom;
  }
  assert.equal(fs.readFileSync(target, 'utf8'), 'untouched');
  fs.rmSync(dir, { recursive: true });
});

test('action_trust: a URL with credentials is never printed', async () => {
  assert.equal(inst.shown('https://user:s3cr3t@r.example/base?token=abc#x'), 'https://***@r.example/base?***#***');
  const { dir, env } = cache();
  const base = 'https://user:s3cr3t@r.example/base';
  const lines = [];
  const { fetchImpl } = release(base);
  await inst.install({ env, inputs: { version: '9.9.9', downloadUrl: base }, log: (l) => lines.push(l), fetchImpl });
  const failing = async () => { throw new TypeError('fetch failed', { cause: new Error('getaddrinfo ENOTFOUND r.example') }); };
  const err = await inst
    .install({ env: { ...env, RUNNER_TOOL_CACHE: path.join(dir, 'other') }, inputs: { version: '9.9.9', downloadUrl: base }, log: (l) => lines.push(l), fetchImpl: failing })
    .catch((e) => e);
  assert.ok(err instanceof inst.InstallError);
  for (const text of [...lines, err.message]) {
    assert.ok(!text.includes('s3cr3t') && !text.includes('user:'), text);
  }
  assert.match(err.message, /cannot download https:\/\/\*\*\*@r\.example\/base\/flux-handoff_9\.9\.9_checksums\.txt/);
  fs.rmSync(dir, { recursive: true });
});

test('checksums_name: the catalog\'s flux-handoff_<version>_checksums.txt is read first', async () => {
  const { dir, env } = cache();
  const { fetchImpl, fetched, name } = release('https://m', ['flux-handoff_9.9.9_checksums.txt']);
  const lines = [];
  const got = await inst.install({ env, inputs: { version: '9.9.9', downloadUrl: 'https://m' }, log: (l) => lines.push(l), fetchImpl });
  assert.equal(got.how, 'downloaded');
  assert.deepEqual(fetched, ['https://m/flux-handoff_9.9.9_checksums.txt', `https://m/${name}`]);
  assert.match(lines.join('\n'), /verified/);
  // Its sha256 is the one checked: a tampered archive names the file that said otherwise.
  const other = release('https://m', ['flux-handoff_9.9.9_checksums.txt']);
  other.served.set(`https://m/${name}`, Buffer.from('not the archive'));
  await assert.rejects(
    inst.install({ env: { ...env, RUNNER_TOOL_CACHE: path.join(dir, 'other') }, inputs: { version: '9.9.9', downloadUrl: 'https://m' }, log: () => {}, fetchImpl: other.fetchImpl }),
    /checksum mismatch .*: flux-handoff_9\.9\.9_checksums\.txt says sha256 .* nothing was extracted or run/,
  );
  fs.rmSync(dir, { recursive: true });
});

test('checksums_name: an older release (only checksums.txt) is read after a 404, verified alike', async () => {
  const { dir, env } = cache();
  const { fetchImpl, fetched, name, served } = release('https://m', ['checksums.txt']);
  const got = await inst.install({ env, inputs: { version: '9.9.9', downloadUrl: 'https://m' }, log: () => {}, fetchImpl });
  assert.equal(got.how, 'downloaded');
  assert.deepEqual(fetched, ['https://m/flux-handoff_9.9.9_checksums.txt', 'https://m/checksums.txt', `https://m/${name}`]);
  served.set(`https://m/${name}`, Buffer.from('tampered'));
  await assert.rejects(
    inst.install({ env: { ...env, RUNNER_TOOL_CACHE: path.join(dir, 'other') }, inputs: { version: '9.9.9', downloadUrl: 'https://m' }, log: () => {}, fetchImpl }),
    /checksum mismatch .*: checksums\.txt says sha256 .* nothing was extracted or run/,
  );
  const none = release('https://m', []);
  await assert.rejects(
    inst.install({ env: { ...env, RUNNER_TOOL_CACHE: path.join(dir, 'none') }, inputs: { version: '9.9.9', downloadUrl: 'https://m' }, log: () => {}, fetchImpl: none.fetchImpl }),
    /cannot download https:\/\/m\/checksums\.txt: HTTP 404; nothing was run/,
  );
  fs.rmSync(dir, { recursive: true });
});

test('checksums_name: only a 404 falls back; another status, a dead server or a redirect off https does not', async () => {
  const { dir, env } = cache();
  const inputs = { version: '9.9.9', downloadUrl: 'https://m' };
  const cases = [
    [async (url) => ({ ok: false, status: 500, url, arrayBuffer: async () => Buffer.alloc(0) }), /flux-handoff_9\.9\.9_checksums\.txt: HTTP 500/],
    [async (url) => ({ ok: false, status: 403, url, arrayBuffer: async () => Buffer.alloc(0) }), /flux-handoff_9\.9\.9_checksums\.txt: HTTP 403/],
    [async () => { throw new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED') }); }, /flux-handoff_9\.9\.9_checksums\.txt: connect ECONNREFUSED/],
    // A 404 reached through a redirect to plain http is still a redirect off https.
    [async (url) => ({ ok: false, status: 404, url: url.replace('https://', 'http://'), arrayBuffer: async () => Buffer.alloc(0) }), /redirected to http:\/\/m\/flux-handoff_9\.9\.9_checksums\.txt, which must be https/],
  ];
  for (const [answer, message] of cases) {
    const fetched = [];
    const fetchImpl = async (url) => { fetched.push(url); return answer(url); };
    await assert.rejects(inst.install({ env, inputs, log: () => {}, fetchImpl }), message);
    assert.deepEqual(fetched, ['https://m/flux-handoff_9.9.9_checksums.txt']);
  }
  assert.equal(fs.existsSync(path.join(dir, 'flux-handoff')), false);
  fs.rmSync(dir, { recursive: true });
});
