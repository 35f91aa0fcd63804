// The main step: run the flux-handoff command the inputs describe, with a holder chosen here
// and saved in the action's state before flux-handoff starts, so the post step can release
// whatever that holder still holds however this step ends.
//
// Cancellation: the runner sends SIGINT to this process only, SIGTERM 7.5 s later and SIGKILL
// 2.5 s after that (actions/runner src/Runner.Sdk/ProcessInvoker.cs). flux-handoff runs in our
// process group but the runner signals our pid alone, so both signals are forwarded to it: the
// first makes it release and exit 130, the second makes it stop its command at once and still
// release. If we are killed before it is done, the post step waits for it to be gone.
'use strict';

const { spawn } = require('node:child_process');
const os = require('node:os');

const { InstallError, install } = require('./install');
const lib = require('./lib');

async function main() {
  const env = process.env;
  let inputs;
  try {
    inputs = lib.readInputs(env);
  } catch (e) {
    if (!(e instanceof lib.InputError)) throw e;
    console.log(`::error::${lib.escapeData(e.message)}`);
    process.exitCode = 2;
    return;
  }
  const holder = inputs.command === 'resume' ? inputs.holder : lib.generateHolder(env);
  // Saved before flux-handoff starts: the runner reads this file whatever way the step ends.
  lib.appendFileCommand(env, 'GITHUB_STATE', 'holder', holder);
  lib.appendFileCommand(env, 'GITHUB_STATE', 'command', inputs.command);
  lib.appendFileCommand(env, 'GITHUB_OUTPUT', 'holder', holder);

  console.log(`holder: ${holder}`);
  // The binary: the `binary` input, else the verified release archive (tool cache first).
  let binary = inputs.binary;
  let sum = null;
  if (!binary) {
    try {
      let version;
      ({ bin: binary, sha256: sum, version } = await install({ env, inputs }));
      // The post step checks the binary against the sum the action ships for this version.
      lib.appendFileCommand(env, 'GITHUB_STATE', 'version', version);
    } catch (e) {
      if (!(e instanceof InstallError)) throw e;
      console.log(`::error::${lib.escapeData(e.message)}`);
      lib.appendFileCommand(env, 'GITHUB_OUTPUT', 'outcome', 'not-started');
      process.exitCode = 1;
      return;
    }
  } else {
    sum = lib.binarySum(binary, env);
  }
  // The post step runs the same binary, after checking it is the same (a step's state is the
  // runner's: no other job can write it, unlike the tool cache).
  lib.appendFileCommand(env, 'GITHUB_STATE', 'binary', binary);
  if (sum) lib.appendFileCommand(env, 'GITHUB_STATE', 'binary_sha256', sum);
  const args = lib.mainArgs(inputs, holder);
  console.log(`$ ${binary} ${args.map(quote).join(' ')}`);
  const child = spawn(binary, args, { stdio: ['ignore', 'inherit', 'inherit'], env: lib.mainEnv(env) });
  let ended = false;
  let started = false;
  const pending = [];
  child.on('spawn', () => {
    started = true;
    lib.appendFileCommand(env, 'GITHUB_STATE', 'pid', String(child.pid));
    const start = lib.startTime(child.pid);
    if (start) lib.appendFileCommand(env, 'GITHUB_STATE', 'pid_start', start);
    // A signal that came while it was being started is delivered now.
    for (const sig of pending.splice(0)) child.kill(sig);
  });
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
      if (ended) return;
      if (!started) {
        pending.push(sig);
        return;
      }
      console.log(`${sig}: forwarding it to flux-handoff (pid ${child.pid}) so it releases what ${holder} holds`);
      child.kill(sig);
    });
  }
  child.on('error', (e) => {
    ended = true;
    // Never started (not found, not executable): nothing was taken.
    console.log(`::error::cannot start ${lib.escapeData(binary)}: ${lib.escapeData(e.message)} (the binary input; docs/github-actions.md says how to install it)`);
    lib.appendFileCommand(env, 'GITHUB_OUTPUT', 'outcome', 'not-started');
    process.exitCode = 1;
  });
  child.on('exit', (code, signal) => {
    ended = true;
    const exit = lib.exitCodeOf(code, signal, os.constants.signals);
    lib.appendFileCommand(env, 'GITHUB_STATE', 'exit_code', String(exit));
    // flux-handoff says `cleanup=complete` when it holds nothing any more: the post step then
    // stands down whatever the exit code (a cancel that released everything is 130).
    if (lib.outputValue(env, 'cleanup') === 'complete') {
      lib.appendFileCommand(env, 'GITHUB_STATE', 'cleanup', 'complete');
    }
    lib.appendFileCommand(env, 'GITHUB_OUTPUT', 'exit-code', String(exit));
    // flux-handoff writes its outcome itself when it reaches its end; one killed did not.
    if (!lib.hasOutput(env, 'outcome')) {
      lib.appendFileCommand(env, 'GITHUB_OUTPUT', 'outcome', lib.outcome(exit));
    }
    const how = signal ? `was killed by ${signal}` : `exited with ${exit}`;
    console.log(`flux-handoff ${how} (${lib.outcome(exit)})`);
    process.exitCode = exit;
  });
}

/** Shell-style quoting for the log line only. */
function quote(a) {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`;
}

main().catch((e) => {
  console.log(`::error::${lib.escapeData(e.stack || String(e))}`);
  process.exitCode = 1;
});
