// The pure parts of the flux-handoff action: reading inputs, building the command line, the
// holder, and the runner's file commands. No I/O beyond the files the runner hands us, no npm
// dependency (the action ships as these plain files).
//
// How the runner talks to a JavaScript action (actions/runner, src/Runner.Worker):
// - each input `name` arrives as the environment variable `INPUT_<NAME>`, spaces turned into
//   `_` and upper-cased, hyphens kept (Handlers/Handler.cs, AddInputsToEnvironment); inputs are
//   evaluated again for the post step (ActionRunner.cs);
// - `GITHUB_STATE`, `GITHUB_OUTPUT` and `GITHUB_STEP_SUMMARY` name files fresh for each step,
//   read back when the step's process has ended, whatever way it ended (FileCommandManager.cs,
//   processed in a `finally` in ActionRunner.cs);
// - what the main step saved in `GITHUB_STATE` reaches the post step as `STATE_<name>`
//   (ActionRunner.cs, "intra-action state").
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { sha256, urlProblem } = require('./install');

/** The subcommands the action runs, by the `command` input. */
const COMMANDS = {
  run: ['run'],
  pause: ['pause'],
  'ghcr-reassert': ['ghcr', 'reassert'],
  resume: ['resume'],
};

/** Exit codes of flux-handoff (handoff-cli/src/exit.rs) as the `outcome` output words. */
const OUTCOMES = {
  0: 'succeeded',
  1: 'internal-error',
  2: 'usage-error',
  3: 'refused',
  4: 'timeout',
  5: 'registry-error',
  6: 'api-error',
  7: 'cleanup-failed',
  8: 'pause-broken',
  130: 'cancelled',
};

/** Flags (with a value) that say where the Lease and the cluster are; the post step keeps them. */
// --target/--parent too: resume looks for the holder's fences in their namespaces (and -n).
const RELEASE_FLAGS = [
  '--lease', '--context', '--namespace', '-n', '--kubeconfig', '--config', '--target', '-t', '--parent',
];

class InputError extends Error {}

/** The value of input `name` as the runner passes it, trimmed ('' when unset). */
function input(env, name) {
  const key = `INPUT_${name.replace(/ /g, '_').toUpperCase()}`;
  return (env[key] || '').trim();
}

/** `true`/`false` inputs; anything else is refused. */
function booleanInput(env, name) {
  const v = input(env, name).toLowerCase();
  if (v === '' || v === 'false') return false;
  if (v === 'true') return true;
  throw new InputError(`input ${name} must be true or false, not ${JSON.stringify(v)}`);
}

/** The inputs, checked: a mistake is one clear error before anything runs. */
function readInputs(env) {
  const command = input(env, 'command');
  if (!Object.hasOwn(COMMANDS, command)) {
    throw new InputError(
      `input command must be one of ${Object.keys(COMMANDS).join(', ')}, not ${JSON.stringify(command)}`,
    );
  }
  const inputs = {
    command,
    args: splitArgs(env.INPUT_ARGS || ''),
    run: (env.INPUT_RUN || '').trim(),
    // Empty: install the release archive (install.js) of `version`.
    binary: input(env, 'binary'),
    version: input(env, 'version').replace(/^v/, ''),
    downloadUrl: input(env, 'download-url'),
    kubeconfig: input(env, 'kubeconfig'),
    config: input(env, 'config'),
    reason: input(env, 'reason'),
    holder: input(env, 'holder'),
    keepPaused: booleanInput(env, 'keep-paused'),
    postWaitSeconds: positiveInteger(input(env, 'post-wait-seconds') || '60', 'post-wait-seconds'),
    recoverFinishedRuns: booleanInput(env, 'recover-finished-runs'),
    waitLease: input(env, 'wait-lease'),
    maxHold: input(env, 'max-hold'),
    eventsAddr: input(env, 'events-addr'),
  };
  if (inputs.eventsAddr !== '' && !/^https?:\/\/[^\s@#]+$/.test(inputs.eventsAddr)) {
    throw new InputError('input events-addr must be an http(s) URL without credentials (notification-controller\'s event server)');
  }
  if (inputs.waitLease !== '' && command === 'resume') {
    throw new InputError('input wait-lease is only for command: run, pause or ghcr-reassert');
  }
  if (inputs.waitLease !== '' && !/^[0-9][0-9a-z ]*$/.test(inputs.waitLease)) {
    throw new InputError(`input wait-lease must be a duration such as 90s or 5m, not ${JSON.stringify(inputs.waitLease)}`);
  }
  if (inputs.maxHold !== '' && command === 'resume') {
    throw new InputError('input max-hold is only for command: run, pause or ghcr-reassert');
  }
  if (inputs.maxHold !== '' && !/^[0-9][0-9a-z ]*$/.test(inputs.maxHold)) {
    throw new InputError(`input max-hold must be a duration such as 30m or 2h, not ${JSON.stringify(inputs.maxHold)}`);
  }
  if (inputs.downloadUrl !== '' && (/\s/.test(inputs.downloadUrl) || urlProblem(inputs.downloadUrl))) {
    throw new InputError(`input download-url ${/\s/.test(inputs.downloadUrl) ? 'is not a URL' : urlProblem(inputs.downloadUrl)} (the release's base: <url>/flux-handoff_<version>_checksums.txt)`);
  }
  if (inputs.recoverFinishedRuns && command === 'resume') {
    throw new InputError('input recover-finished-runs is only for command: run, pause or ghcr-reassert');
  }
  if (command === 'run' && inputs.run === '') {
    throw new InputError('input run is required with command: run (the command to run while paused)');
  }
  if (command !== 'run' && inputs.run !== '') {
    throw new InputError(`input run is only for command: run, not ${command}`);
  }
  if (command === 'resume' && inputs.holder === '') {
    throw new InputError('input holder is required with command: resume (the holder to release)');
  }
  if (command !== 'resume' && inputs.holder !== '') {
    throw new InputError(`input holder is only for command: resume; ${command} makes its own holder`);
  }
  if (inputs.keepPaused && command !== 'pause') {
    throw new InputError('input keep-paused is only for command: pause');
  }
  if (inputs.holder !== '' && !isHolder(inputs.holder)) {
    throw new InputError('input holder is not a holder (lowercase letters, digits, . and -, at most 63)');
  }
  for (const a of inputs.args) {
    if (a === '--holder' || a.startsWith('--holder=')) {
      throw new InputError('input args must not carry --holder: the action sets it');
    }
  }
  return inputs;
}

/** `args`: one argument a line; blank lines are skipped, each line is trimmed. */
function splitArgs(text) {
  return text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '');
}

function positiveInteger(text, name) {
  if (!/^[0-9]{1,5}$/.test(text) || Number(text) === 0) {
    throw new InputError(`input ${name} must be a whole number of seconds above 0`);
  }
  return Number(text);
}

/** Holder syntax (flux-fence/src/holder.rs): [a-z0-9.-], alphanumeric at both ends, <= 63. */
function isHolder(text) {
  return text.length <= 63 && /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/.test(text);
}

/**
 * A fresh holder: `gh<run id>.<attempt>-<6 hex>` in a workflow run, `local-<6 hex>` elsewhere.
 * `random` returns n random bytes (injected for tests).
 */
function generateHolder(env, random = crypto.randomBytes) {
  const suffix = random(3).toString('hex');
  const numeric = (s) => typeof s === 'string' && /^[0-9]{1,20}$/.test(s);
  if (numeric(env.GITHUB_RUN_ID) && numeric(env.GITHUB_RUN_ATTEMPT)) {
    return `gh${env.GITHUB_RUN_ID}.${env.GITHUB_RUN_ATTEMPT}-${suffix}`;
  }
  return `local-${suffix}`;
}

/** Global flags from the inputs (they go before the subcommand). */
function globalArgs(inputs) {
  const a = [];
  if (inputs.kubeconfig) a.push('--kubeconfig', inputs.kubeconfig);
  if (inputs.config) a.push('--config', inputs.config);
  if (inputs.reason) a.push('--reason', inputs.reason);
  return a;
}

/** The main step's flux-handoff command line (without the binary). */
function mainArgs(inputs, holder) {
  const a = [...globalArgs(inputs), ...COMMANDS[inputs.command], '--holder', holder];
  if (inputs.recoverFinishedRuns) a.push('--recover-finished-runs');
  if (inputs.waitLease) a.push('--wait-lease', inputs.waitLease);
  if (inputs.maxHold) a.push('--max-hold', inputs.maxHold);
  if (inputs.eventsAddr) a.push('--events-addr', inputs.eventsAddr);
  a.push(...inputs.args);
  if (inputs.command === 'run') {
    // The same shell a `run:` step with `shell: bash` gets (ScriptHandlerHelpers.cs).
    a.push('--', 'bash', '--noprofile', '--norc', '-e', '-o', 'pipefail', '-c', inputs.run);
  }
  return a;
}

/**
 * The environment variable flux-handoff reads a GitHub token from before `GITHUB_TOKEN`, and
 * never hands on to the command it runs (flux-fence's `liveness::TOKEN_ENV`; flux-suspend's
 * `command` removes it from the command's environment).
 */
const TOKEN_ENV = 'FLUX_HANDOFF_GITHUB_TOKEN';

/**
 * What the runner gives this action's process and a `run:` step does not get: the inputs
 * (`INPUT_*`, the `github-token` input among them, set by default) and the runtime's token.
 */
function actionOnly(name) {
  return name.startsWith('INPUT_') || name === 'ACTIONS_RUNTIME_TOKEN';
}

/**
 * flux-handoff's environment for either step: ours without what only the action was given
 * ([actionOnly]), so the command it runs sees what a `run:` step would. The main step adds,
 * with `recover-finished-runs`, the `github-token` input as FLUX_HANDOFF_GITHUB_TOKEN (never
 * on the command line, never GITHUB_TOKEN): flux-handoff asks GitHub with it and removes it
 * from the command's environment, so the deploy script never holds it.
 */
function stepEnv(env) {
  const out = {};
  for (const [k, v] of Object.entries(env)) {
    if (!actionOnly(k)) out[k] = v;
  }
  return out;
}

/** The main step's flux-handoff environment ([stepEnv], with the token for recovery). */
function mainEnv(env) {
  const out = stepEnv(env);
  const token = env['INPUT_GITHUB-TOKEN'] || '';
  if (token !== '' && booleanInput(env, 'recover-finished-runs') === true) out[TOKEN_ENV] = token;
  return out;
}

/**
 * The post step's command line: release by holder what `holder` still holds, with only the
 * flags that say where the Lease, the cluster and the fenced objects are (the main command's other flags, e.g.
 * ghcr's, mean nothing to resume). They follow the subcommand: `--lease` is resume's own flag,
 * the others are global and accepted there too.
 */
function postArgs(inputs, holder) {
  // --if-held: act only while `holder` holds the Lease; never take a free one.
  const a = ['resume', '--holder', holder, '--holder-exited', '--if-held'];
  if (inputs.kubeconfig) a.push('--kubeconfig', inputs.kubeconfig);
  if (inputs.config) a.push('--config', inputs.config);
  // A release by the post step is news too: it posts its `resumed` events where the main did.
  if (inputs.eventsAddr) a.push('--events-addr', inputs.eventsAddr);
  const args = inputs.args;
  for (let i = 0; i < args.length; i++) {
    const flag = RELEASE_FLAGS.find((f) => args[i] === f || args[i].startsWith(`${f}=`));
    if (flag === undefined) continue;
    a.push(args[i]);
    if (args[i] === flag && i + 1 < args.length) a.push(args[++i]);
  }
  return a;
}

/**
 * What the post step does, from what the main step left in the state. It acts only where
 * something may still be held: not after exit 2 or 3 (nothing was taken, and the main step
 * already reported why), not after flux-handoff reported its cleanup complete (whatever its
 * exit code), not after a complete handoff; and then only with `--if-held` (postArgs), so a
 * free Lease, or one another run holds, is never taken.
 */
function postPlan(state, inputs) {
  if (!state.holder) {
    return { act: false, why: 'the main step stopped before it chose a holder: nothing was taken' };
  }
  if (!state.pid) {
    return { act: false, why: `flux-handoff never started for ${state.holder}: nothing was taken` };
  }
  const code = state.exit_code;
  if (code === '2' || code === '3') {
    return {
      act: false,
      why: `flux-handoff for ${state.holder} ended with exit ${code} (${outcome(Number(code))}): it holds nothing, and the main step reported why`,
    };
  }
  if (state.cleanup === 'complete') {
    return {
      act: false,
      why: `flux-handoff for ${state.holder} reported its cleanup complete (exit ${code}, ${outcome(Number(code))}): nothing is held`,
    };
  }
  if (code === '0') {
    if (state.command !== 'pause') {
      return { act: false, why: `flux-handoff finished a complete handoff for ${state.holder} (exit 0): nothing to release` };
    }
    if (inputs.keepPaused) {
      return {
        act: false,
        why: `the pause by ${state.holder} stays in place (keep-paused: true); release it with: flux-handoff resume --holder ${state.holder}`,
      };
    }
    return { act: true, why: `the job is over: releasing the pause by ${state.holder}` };
  }
  const how = code === undefined || code === ''
    ? 'did not report how it ended (the main step was stopped)'
    : `ended with exit ${code} (${outcome(Number(code))}) without reporting its cleanup complete`;
  return { act: true, why: `flux-handoff for ${state.holder} ${how}: releasing whatever ${state.holder} still holds` };
}

/** The `outcome` word for an exit code. */
function outcome(code) {
  return Object.hasOwn(OUTCOMES, code) ? OUTCOMES[code] : 'failed';
}

/** The exit code of a child that ended with `code` or by `signal` (128 + its number). */
function exitCodeOf(code, signal, signals) {
  if (code !== null && code !== undefined) return code;
  const n = signals[signal];
  return typeof n === 'number' ? 128 + n : 1;
}

/** The action's own state saved by the main step, from `STATE_*`. */
function readState(env) {
  const s = {};
  for (const [k, v] of Object.entries(env)) {
    if (k.startsWith('STATE_')) s[k.slice('STATE_'.length)] = v;
  }
  return s;
}

/**
 * One `name<<delimiter` block for GITHUB_OUTPUT / GITHUB_STATE: a delimiter found nowhere in
 * the value, so a value cannot end the block and add others.
 */
function fileCommand(name, value, random = crypto.randomBytes) {
  let delimiter;
  do {
    delimiter = `ghadelimiter_${random(12).toString('hex')}`;
  } while (String(value).includes(delimiter) || name.includes(delimiter));
  return `${name}<<${delimiter}\n${value}\n${delimiter}\n`;
}

/** Appends `name=value` to the file named by `env[variable]` (no-op when it is unset). */
function appendFileCommand(env, variable, name, value) {
  const path = env[variable];
  if (!path) return false;
  fs.appendFileSync(path, fileCommand(name, value), { encoding: 'utf8' });
  return true;
}

/** Whether the GITHUB_OUTPUT file already has output `name` (flux-handoff wrote it). */
function hasOutput(env, name) {
  return outputValue(env, name) !== undefined;
}

/**
 * The last value of output `name` in the GITHUB_OUTPUT file (`name=value` lines and
 * `name<<delimiter` blocks, as the runner reads them), or undefined.
 */
function outputValue(env, name) {
  const path = env.GITHUB_OUTPUT;
  if (!path) return undefined;
  let text;
  try {
    text = fs.readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
  return parseFileCommands(text)[name];
}

/** `name=value` lines and `name<<delimiter` blocks into an object (the last value wins). */
function parseFileCommands(text) {
  const out = {};
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const eq = line.indexOf('=');
    const hd = line.indexOf('<<');
    if (eq > 0 && (hd < 0 || eq < hd)) {
      out[line.slice(0, eq)] = line.slice(eq + 1);
    } else if (hd > 0) {
      const delimiter = line.slice(hd + 2);
      const value = [];
      for (i++; i < lines.length && lines[i] !== delimiter; i++) value.push(lines[i]);
      out[line.slice(0, hd)] = value.join('\n');
    }
  }
  return out;
}

/** Escapes text for a workflow command's data (`%`, CR, LF), as handoff-cli's output.rs does. */
function escapeData(text) {
  return String(text).replace(/%/g, '%25').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
}

/**
 * The sha256 of the binary `name` runs as (a path, or the first executable file of that name on
 * env.PATH), or null when there is none.
 */
function binarySum(name, env) {
  const candidates = name.includes('/')
    ? [name]
    : (env.PATH || '').split(':').filter((d) => d !== '').map((d) => path.join(d, name));
  for (const p of candidates) {
    try {
      fs.accessSync(p, fs.constants.X_OK);
      if (!fs.statSync(p).isFile()) continue;
      return sha256(fs.readFileSync(p));
    } catch {
      // Not there, not executable: the next one.
    }
  }
  return null;
}

/**
 * Why the post step must not run `binary`, or null: it is not the binary whose sha256 the main
 * step saved (`want`; a main step from before the action saved it checks nothing), or, when
 * the main step installed the action's own version, not the binary whose sha256 the action
 * ships for it (`pinned`, from action/checksums.txt: never what a cache or a step wrote).
 */
function binaryProblem(binary, want, env, pinned = null) {
  if (!want && !pinned) return null;
  const got = binarySum(binary, env);
  if (got === null) return `${binary}, the binary the main step ran, is gone: nothing was run`;
  if (pinned && got !== pinned) return `${binary} is not the binary this action ships the sum of (sha256 ${got}, shipped ${pinned}): nothing was run`;
  if (want && got !== want) return `${binary} is not the binary the main step ran (sha256 ${got}, ran ${want}): nothing was run`;
  return null;
}

/** The start time of process `pid` (field 22 of /proc/<pid>/stat), or null without /proc. */
function startTime(pid, read = (p) => fs.readFileSync(p, 'utf8')) {
  let stat;
  try {
    stat = read(`/proc/${pid}/stat`);
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may hold spaces: count after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state): field 22 is fields[19]. A zombie has exited.
  if (fields[0] === 'Z') return null;
  return fields[19] || null;
}

module.exports = {
  COMMANDS,
  InputError,
  TOKEN_ENV,
  appendFileCommand,
  binaryProblem,
  binarySum,
  escapeData,
  exitCodeOf,
  fileCommand,
  generateHolder,
  hasOutput,
  input,
  isHolder,
  mainArgs,
  mainEnv,
  outcome,
  outputValue,
  parseFileCommands,
  postArgs,
  postPlan,
  readInputs,
  readState,
  splitArgs,
  startTime,
  stepEnv,
};
