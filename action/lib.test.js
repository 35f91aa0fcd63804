// Table tests of the action's pure parts: `node --test action/` (run by the Rust test
// runner_cancel_action_lib_tests_pass, so `cargo nextest` covers them).
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const test = require('node:test');

const lib = require('./lib');

const fixed = (n) => Buffer.alloc(n, 0xab);

function env(inputs) {
  const e = {};
  for (const [k, v] of Object.entries(inputs)) e[`INPUT_${k.toUpperCase()}`] = v;
  return e;
}

test('holder: from the run id and attempt, else local; always a valid holder', () => {
  assert.equal(lib.generateHolder({ GITHUB_RUN_ID: '123', GITHUB_RUN_ATTEMPT: '2' }, fixed), 'gh123.2-ababab');
  assert.equal(lib.generateHolder({}, fixed), 'local-ababab');
  assert.equal(lib.generateHolder({ GITHUB_RUN_ID: '12x', GITHUB_RUN_ATTEMPT: '1' }, fixed), 'local-ababab');
  const long = lib.generateHolder({ GITHUB_RUN_ID: '9'.repeat(20), GITHUB_RUN_ATTEMPT: '9'.repeat(20) });
  assert.ok(lib.isHolder(long), long);
  for (const bad of ['', 'A', '-a', 'a-', 'a;1', 'a'.repeat(64)]) assert.equal(lib.isHolder(bad), false, bad);
});

test('inputs: each mistake is one clear error', () => {
  const table = [
    [{ command: 'deploy' }, /input command must be one of run, pause, ghcr-reassert, resume/],
    [{ command: 'run' }, /input run is required with command: run/],
    [{ command: 'pause', run: 'x' }, /input run is only for command: run/],
    [{ command: 'resume' }, /input holder is required with command: resume/],
    [{ command: 'pause', holder: 'gh1.1-aaaaaa' }, /input holder is only for command: resume/],
    [{ command: 'resume', holder: 'Bad;Holder' }, /input holder is not a holder/],
    [{ command: 'run', run: 'x', 'keep-paused': 'true' }, /keep-paused is only for command: pause/],
    [{ command: 'pause', 'keep-paused': 'yes' }, /keep-paused must be true or false/],
    [{ command: 'pause', args: '--holder\nx' }, /must not carry --holder/],
    [{ command: 'pause', 'post-wait-seconds': '0' }, /post-wait-seconds must be a whole number/],
  ];
  for (const [inputs, error] of table) {
    assert.throws(() => lib.readInputs(env(inputs)), (e) => e instanceof lib.InputError && error.test(e.message), JSON.stringify(inputs));
  }
});

test('main command line: globals, subcommand, holder, args, then the run script', () => {
  const inputs = lib.readInputs(env({
    command: 'run', run: 'make deploy', kubeconfig: '/k', reason: 'run 1', args: ' --target\n\n infra \n',
  }));
  assert.deepEqual(lib.mainArgs(inputs, 'gh1.1-aaaaaa'), [
    '--kubeconfig', '/k', '--reason', 'run 1', 'run', '--holder', 'gh1.1-aaaaaa', '--target', 'infra',
    '--', 'bash', '--noprofile', '--norc', '-e', '-o', 'pipefail', '-c', 'make deploy',
  ]);
  const reassert = lib.readInputs(env({ command: 'ghcr-reassert', args: '--credential-env\nTOKEN' }));
  assert.deepEqual(lib.mainArgs(reassert, 'h1'), ['ghcr', 'reassert', '--holder', 'h1', '--credential-env', 'TOKEN']);
});

test('events-addr: on the main and the post command line; a URL with credentials is refused', () => {
  const inputs = lib.readInputs(env({ command: 'run', run: 'x', 'events-addr': 'http://nc.flux-system.svc:9090/' }));
  assert.deepEqual(lib.mainArgs(inputs, 'h1').slice(0, 5), ['run', '--holder', 'h1', '--events-addr', 'http://nc.flux-system.svc:9090/']);
  assert.ok(lib.postArgs(inputs, 'h1').join(' ').includes('--events-addr http://nc.flux-system.svc:9090/'));
  assert.throws(() => lib.readInputs(env({ command: 'run', run: 'x', 'events-addr': 'http://u:p@nc/' })),
    (e) => e instanceof lib.InputError && /without credentials/.test(e.message) && !e.message.includes('u:p'));
});

test('recover-finished-runs: a flag on the command line, the token only in the environment', () => {
  const e = env({ command: 'run', run: 'x', 'recover-finished-runs': 'true', 'github-token': 'ghs_secret' });
  const inputs = lib.readInputs(e);
  const args = lib.mainArgs(inputs, 'h1');
  assert.deepEqual(args.slice(0, 4), ['run', '--holder', 'h1', '--recover-finished-runs']);
  assert.ok(!args.join(' ').includes('ghs_secret'));
  // flux-handoff alone reads it (and removes it from its command's environment); neither
  // GITHUB_TOKEN nor an input reaches flux-handoff's environment.
  const main = lib.mainEnv({ ...e, ACTIONS_RUNTIME_TOKEN: 'rt', PATH: '/bin' });
  assert.equal(main.FLUX_HANDOFF_GITHUB_TOKEN, 'ghs_secret');
  assert.equal(main.GITHUB_TOKEN, undefined);
  assert.equal(main.PATH, '/bin');
  assert.deepEqual(Object.keys(main).filter((k) => k.startsWith('INPUT_') || k === 'ACTIONS_RUNTIME_TOKEN'), []);
  const off = env({ command: 'run', run: 'x', 'github-token': 'ghs_secret' });
  assert.ok(!Object.values(lib.mainEnv(off)).includes('ghs_secret'));
  assert.ok(!Object.values(lib.stepEnv(off)).includes('ghs_secret'));
  // A job's own GITHUB_TOKEN stays, as a `run:` step would have it.
  assert.equal(lib.mainEnv({ ...e, GITHUB_TOKEN: 'mine' }).GITHUB_TOKEN, 'mine');
  assert.throws(() => lib.readInputs(env({ command: 'resume', holder: 'h1', 'recover-finished-runs': 'true' })),
    /only for command: run, pause or ghcr-reassert/);
});

test('wait-lease: a flag of the handoff commands, checked before anything runs', () => {
  const inputs = lib.readInputs(env({ command: 'run', run: 'x', 'wait-lease': '5m' }));
  assert.deepEqual(lib.mainArgs(inputs, 'h1').slice(0, 5), ['run', '--holder', 'h1', '--wait-lease', '5m']);
  assert.ok(!lib.mainArgs(lib.readInputs(env({ command: 'pause' })), 'h1').includes('--wait-lease'));
  assert.throws(() => lib.readInputs(env({ command: 'resume', holder: 'h1', 'wait-lease': '5m' })), /only for command/);
  assert.throws(() => lib.readInputs(env({ command: 'pause', 'wait-lease': 'soon' })), /must be a duration/);
});

test('max-hold: a flag of the handoff commands, checked before anything runs', () => {
  const inputs = lib.readInputs(env({ command: 'pause', 'max-hold': '2h' }));
  assert.deepEqual(lib.mainArgs(inputs, 'h1').slice(0, 5), ['pause', '--holder', 'h1', '--max-hold', '2h']);
  assert.ok(!lib.mainArgs(lib.readInputs(env({ command: 'run', run: 'x' })), 'h1').includes('--max-hold'));
  assert.throws(() => lib.readInputs(env({ command: 'resume', holder: 'h1', 'max-hold': '2h' })), /only for command/);
  assert.throws(() => lib.readInputs(env({ command: 'pause', 'max-hold': 'forever' })), /must be a duration/);
  assert.throws(() => lib.readInputs(env({ command: 'pause', 'max-hold': '-1h' })), /must be a duration/);
});

test('post command line keeps the targets: resume looks in their namespaces', () => {
  const inputs = lib.readInputs(env({ command: 'pause', args: '--target\nhr/apps/web\n--retire\nack\n-t\nx' }));
  assert.deepEqual(lib.postArgs(inputs, 'h1'), [
    'resume', '--holder', 'h1', '--holder-exited', '--if-held', '--target', 'hr/apps/web', '-t', 'x',
  ]);
});

test('post command line keeps only where the Lease and the cluster are', () => {
  const inputs = lib.readInputs(env({
    command: 'ghcr-reassert', config: 'f.toml',
    args: '--lease\nns/l\n--credential-env\nTOKEN\n--namespace=apps\n--context\nprod\n--image\nghcr.io/a:1',
  }));
  assert.deepEqual(lib.postArgs(inputs, 'h1'), [
    'resume', '--holder', 'h1', '--holder-exited', '--if-held',
    '--config', 'f.toml', '--lease', 'ns/l', '--namespace=apps', '--context', 'prod',
  ]);
});

test('post plan: what the main step left decides', () => {
  const run = lib.readInputs(env({ command: 'run', run: 'x' }));
  const pause = lib.readInputs(env({ command: 'pause' }));
  const kept = lib.readInputs(env({ command: 'pause', 'keep-paused': 'true' }));
  const table = [
    [{}, run, false, /before it chose a holder/],
    [{ holder: 'h' }, run, false, /never started/],
    [{ holder: 'h', pid: '9', command: 'run', exit_code: '0' }, run, false, /complete handoff/],
    [{ holder: 'h', pid: '9', command: 'run', exit_code: '130' }, run, true, /exit 130 \(cancelled\) without reporting its cleanup/],
    // Nothing taken: exit 2 (usage) and 3 (refused) never act, the refusal is not reported twice.
    [{ holder: 'h', pid: '9', command: 'run', exit_code: '2' }, run, false, /exit 2 \(usage-error\): it holds nothing/],
    [{ holder: 'h', pid: '9', command: 'run', exit_code: '3' }, run, false, /exit 3 \(refused\): it holds nothing/],
    [{ holder: 'h', pid: '9', command: 'pause', exit_code: '3' }, pause, false, /holds nothing/],
    // Cleanup reported complete: whatever the exit code.
    [{ holder: 'h', pid: '9', command: 'run', exit_code: '130', cleanup: 'complete' }, run, false, /cleanup complete \(exit 130, cancelled\)/],
    [{ holder: 'h', pid: '9', command: 'pause', exit_code: '4', cleanup: 'complete' }, pause, false, /cleanup complete/],
    [{ holder: 'h', pid: '9', command: 'run', exit_code: '7' }, run, true, /exit 7 \(cleanup-failed\)/],
    [{ holder: 'h', pid: '9', command: 'run' }, run, true, /did not report how it ended/],
    [{ holder: 'h', pid: '9', command: 'pause', exit_code: '0' }, pause, true, /job is over/],
    [{ holder: 'h', pid: '9', command: 'pause', exit_code: '0' }, kept, false, /stays in place/],
  ];
  for (const [state, inputs, act, why] of table) {
    const plan = lib.postPlan(state, inputs);
    assert.equal(plan.act, act, JSON.stringify(state));
    assert.match(plan.why, why);
  }
});

test('file commands: a value cannot end its block', () => {
  let n = 0;
  const random = (k) => Buffer.alloc(k, n++);
  const evil = 'x\nghadelimiter_000000000000000000000000\noutcome<<y';
  const text = lib.fileCommand('holder', evil, random);
  assert.equal(text, `holder<<ghadelimiter_010101010101010101010101\n${evil}\nghadelimiter_010101010101010101010101\n`);
});

test('outputs written by flux-handoff are found; exit codes map', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fh-lib-'));
  const file = path.join(dir, 'out');
  fs.writeFileSync(file, 'holder=h\noutcome=cancelled\nsummary<<EOF\na=b\ncleanup=no\nEOF\ncleanup=complete\n');
  assert.equal(lib.hasOutput({ GITHUB_OUTPUT: file }, 'outcome'), true);
  assert.equal(lib.hasOutput({ GITHUB_OUTPUT: file }, 'proven_after_s'), false);
  assert.equal(lib.outputValue({ GITHUB_OUTPUT: file }, 'cleanup'), 'complete');
  assert.equal(lib.outputValue({ GITHUB_OUTPUT: file }, 'summary'), 'a=b\ncleanup=no');
  assert.equal(lib.outputValue({}, 'cleanup'), undefined);
  fs.rmSync(dir, { recursive: true });
  assert.equal(lib.exitCodeOf(3, null, os.constants.signals), 3);
  assert.equal(lib.exitCodeOf(null, 'SIGKILL', os.constants.signals), 137);
  assert.equal(lib.outcome(130), 'cancelled');
  assert.equal(lib.outcome(42), 'failed');
});

test('start time is read past a command name with spaces and parentheses', () => {
  const fields = ['S', ...Array.from({ length: 18 }, (_, i) => String(i)), '424242', 'rest'];
  const stat = `77 (a) b) ${fields.join(' ')}`;
  assert.equal(lib.startTime(77, () => stat), '424242');
  assert.equal(lib.startTime(77, () => stat.replace(') S', ') Z')), null);
  assert.equal(lib.startTime(77, () => { throw new Error('gone'); }), null);
});

test('action_trust: the post step runs only the binary the main step ran', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fh-post-'));
  const bin = path.join(dir, 'flux-handoff');
  fs.writeFileSync(bin, '#!/bin/sh\necho hi\n', { mode: 0o755 });
  const want = lib.binarySum(bin, {});
  assert.match(want, /^[0-9a-f]{64}$/);
  // By name on PATH, as the `binary` input may give it.
  assert.equal(lib.binarySum('flux-handoff', { PATH: `/nonexistent:${dir}` }), want);
  assert.equal(lib.binaryProblem(bin, want, {}), null);
  // A main step from before the sum was saved: nothing to check against.
  assert.equal(lib.binaryProblem(bin, undefined, {}), null);
  fs.writeFileSync(bin, '#!/bin/sh\necho evil\n');
  assert.match(lib.binaryProblem(bin, want, {}), /is not the binary the main step ran .*nothing was run/);
  // The action's own version: the sum it ships decides, whatever the state says.
  const evil = lib.binarySum(bin, {});
  assert.match(lib.binaryProblem(bin, evil, {}, want), /is not the binary this action ships the sum of .*nothing was run/);
  assert.match(lib.binaryProblem(bin, undefined, {}, want), /is not the binary this action ships the sum of/);
  fs.rmSync(bin);
  assert.match(lib.binaryProblem(bin, want, {}), /is gone: nothing was run/);
  fs.rmSync(dir, { recursive: true });
});
