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
  const env = { RUNNER_OS: 'Linux', RUNNER_ARCH: 'X64', RUNNER_TOOL_CACHE: dir };
  const archive = zlib.gzipSync(tar([['flux-handoff', Buffer.from('#!/bin/sh\necho hi\n')]]));
  const name = 'flux-handoff_9.9.9_linux_amd64.tar.gz';
  const served = new Map([
    ['http://m/checksums.txt', Buffer.from(`${inst.sha256(archive)}  ${name}\n`)],
    [`http://m/${name}`, archive],
  ]);
  let fetched = [];
  const fetchImpl = async (url) => {
    fetched.push(url);
    const body = served.get(url);
    return { ok: body !== undefined, status: body ? 200 : 404, arrayBuffer: async () => body };
  };
  const inputs = { version: '9.9.9', downloadUrl: 'http://m' };
  const log = () => {};

  // Tampered: one byte differs from what checksums.txt says.
  const bad = Buffer.from(archive);
  bad[bad.length - 1] ^= 1;
  served.set(`http://m/${name}`, bad);
  await assert.rejects(inst.install({ env, inputs, log, fetchImpl }), /checksum mismatch .* nothing was extracted or run/);
  assert.equal(fs.existsSync(path.join(dir, 'flux-handoff')), false);

  served.set(`http://m/${name}`, archive);
  const first = await inst.install({ env, inputs, log, fetchImpl });
  assert.equal(first.how, 'downloaded');
  assert.equal(fs.readFileSync(first.bin, 'utf8'), '#!/bin/sh\necho hi\n');
  assert.equal(fs.statSync(first.bin).mode & 0o777, 0o755);
  assert.ok(fs.existsSync(path.join(dir, 'flux-handoff', '9.9.9', 'amd64.complete')));
  fetched = [];
  const second = await inst.install({ env, inputs, log, fetchImpl });
  assert.equal(second.how, 'cached');
  assert.deepEqual(fetched, []);

  await assert.rejects(
    inst.install({ env: { ...env, RUNNER_ARCH: 'ARM64' }, inputs, log, fetchImpl }),
    /lists no flux-handoff_9\.9\.9_linux_arm64\.tar\.gz/,
  );
  const down = async () => { throw new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:9') }); };
  await assert.rejects(
    inst.install({ env: { ...env, RUNNER_TOOL_CACHE: path.join(dir, 'other') }, inputs, log, fetchImpl: down }),
    /cannot download http:\/\/m\/checksums\.txt: connect ECONNREFUSED/,
  );
  fs.rmSync(dir, { recursive: true });
});
