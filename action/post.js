// The post step (post-if: always()): runs after the main step ended for any reason, including
// cancellation, and acts only where something may still be held (lib.postPlan): not after
// exit 2 or 3, not after flux-handoff reported its cleanup complete, not after a complete
// handoff. Otherwise it waits until that flux-handoff process is gone (if the runner killed the
// main step, flux-handoff may still be releasing), then runs
// `flux-handoff resume --holder H --holder-exited --if-held`, which writes only while H holds
// the Lease (a free Lease is never taken) and releases by compare-and-swap whatever H still
// holds (fences, then the Lease), and prints what it released.
'use strict';

const { spawn } = require('node:child_process');
const os = require('node:os');

const { pinnedSums } = require('./install');
const lib = require('./lib');

async function main() {
  const env = process.env;
  const state = lib.readState(env);
  let inputs;
  try {
    inputs = lib.readInputs(env);
  } catch (e) {
    if (!(e instanceof lib.InputError)) throw e;
    // The main step refused the same inputs before starting anything.
    console.log(`nothing to do: the inputs were refused (${e.message}), nothing was started`);
    return;
  }
  const plan = lib.postPlan(state, inputs);
  if (!plan.act) {
    console.log(`nothing to do: ${plan.why}`);
    return;
  }
  console.log(plan.why);
  if (!(await gone(state, inputs.postWaitSeconds))) {
    console.log(`::error::flux-handoff (pid ${state.pid}) was still running ${inputs.postWaitSeconds}s into the post step; killed it before releasing by holder`);
    try {
      process.kill(Number(state.pid), 'SIGKILL');
    } catch {
      // Gone in the meantime.
    }
    await gone(state, 5);
  }
  const args = lib.postArgs(inputs, state.holder);
  // The binary the main step ran (installed or given).
  const binary = state.binary || inputs.binary || 'flux-handoff';
  // Not a binary someone put in its place since (a shared runner's tool cache or temp); for
  // the action's own version, the binary whose sum the action ships.
  const problem = lib.binaryProblem(binary, state.binary_sha256, env, shippedBinary(env, state.version));
  if (problem) {
    console.log(`::error::${lib.escapeData(problem)}; ${state.holder} may still hold fences: run flux-handoff fences`);
    process.exitCode = 1;
    return;
  }
  console.log(`$ ${binary} ${args.join(' ')}`);
  const code = await new Promise((resolve) => {
    const child = spawn(binary, args, { stdio: ['ignore', 'inherit', 'inherit'], env: lib.stepEnv(env) });
    child.on('error', (e) => {
      console.log(`::error::cannot start ${lib.escapeData(binary)}: ${lib.escapeData(e.message)}; ${state.holder} may still hold fences: run flux-handoff fences`);
      resolve(1);
    });
    child.on('exit', (c, s) => resolve(lib.exitCodeOf(c, s, os.constants.signals)));
  });
  if (code === 0) {
    console.log(`released by holder: nothing of ${state.holder} is held any more`);
  } else {
    console.log(`::error::releasing ${state.holder} failed (exit ${code}, ${lib.outcome(code)}); run: flux-handoff fences`);
    process.exitCode = code;
  }
}

/** The binary sum the action ships for `version` on this runner (action/checksums.txt), or null. */
function shippedBinary(env, version) {
  if (!version) return null;
  try {
    return pinnedSums(env, version).binary;
  } catch {
    // No release archive for this platform: the main step ran a given binary.
    return null;
  }
}

/**
 * Waits up to `seconds` until the main step's flux-handoff (pid and start time from the state)
 * has exited; true once it has. A pid now used by another process counts as gone.
 */
async function gone(state, seconds) {
  const pid = Number(state.pid);
  const alive = () => {
    try {
      process.kill(pid, 0);
    } catch {
      return false;
    }
    const start = lib.startTime(pid);
    if (start === null) return !state.pid_start && process.platform !== 'linux';
    return !state.pid_start || start === state.pid_start;
  };
  const deadline = Date.now() + seconds * 1000;
  let said = false;
  while (alive()) {
    if (Date.now() >= deadline) return false;
    if (!said) {
      console.log(`waiting for flux-handoff (pid ${pid}) of the main step to exit (up to ${seconds}s)`);
      said = true;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return true;
}

main().catch((e) => {
  console.log(`::error::${lib.escapeData(e.stack || String(e))}`);
  process.exitCode = 1;
});
