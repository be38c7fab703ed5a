// The Pi coding agent (npm @mariozechner/pi-coding-agent, its real CLI in
// print mode) against `graft serve`, set up by `graft pi install` in a
// temporary HOME: graft's extension sends $GRAFT_ADAPTER, else the shared
// selection (`graft adapters use`), with each request to graft's provider,
// and the server's per-adapter request counters show which adapter each run
// used. Pi may talk to graft only: a guard loaded into its process refuses
// and records any other connection.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { GRAFT_BIN, WORK_DIR, startServer, testModel, getJson, postRaw } from './graft.mjs';

const ROOT = path.join(WORK_DIR, 'pi');
const XDG = path.join(ROOT, 'xdg'); // graft's state folder (the shared selection) and adapter store
const STORE = path.join(XDG, 'graft', 'adapters');
const HOME = path.join(ROOT, 'home');
const WORKSPACE = path.join(ROOT, 'workspace'); // Pi's cwd: no AGENTS.md, no project settings
const GUARD_LOG = path.join(ROOT, 'network.log');
process.env.XDG_DATA_HOME = XDG;
process.env.HF_HOME = path.join(ROOT, 'hf-home');

const PI_CLI = path.join(path.dirname(fileURLToPath(import.meta.resolve('@mariozechner/pi-coding-agent'))), 'cli.js');
const GUARD = new URL('./network_guard.mjs', import.meta.url).href;

function graft(args, env = {}) {
  return execFileSync(GRAFT_BIN, args, { env: { ...process.env, ...env }, stdio: 'pipe', encoding: 'utf8' });
}

// The environment of a Pi run: the temporary HOME, no keys of real providers,
// every startup network feature off, and the network guard.
function piEnv(extra) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/_API_KEY$|_TOKEN$|^PI_|^NODE_OPTIONS$|^GRAFT_ADAPTER$/.test(k)) env[k] = v;
  }
  return {
    ...env,
    HOME,
    PI_OFFLINE: '1',
    PI_SKIP_VERSION_CHECK: '1',
    PI_TELEMETRY: '0',
    NODE_OPTIONS: `--import=${GUARD}`,
    GRAFT_NETWORK_GUARD_LOG: GUARD_LOG,
    ...extra,
  };
}

// `pi -p` with one prompt; resolves to its output once it exits 0.
function runPi(env = {}, args = ['--provider', 'graft', '--model', 'tiny']) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [PI_CLI, '-p', '--offline', '--no-session', ...args, 'Say hello.'], {
      cwd: WORKSPACE,
      env: piEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { out += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 120000); // a bound for a loaded machine; a run takes seconds
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`pi exited with ${code ?? signal}:\n${out}`));
    });
  });
}

// The requests each adapter (and "none", the base model) has served so far.
async function counts(server) {
  const stats = await getJson(server, '/stats');
  assert.equal(stats.status, 200);
  const loaded = await getJson(server, '/v1/adapters');
  assert.equal(loaded.status, 200);
  const requests = { none: 0, a: 0, b: 0, ...stats.body.adapters.requests };
  // /v1/adapters counts the same per loaded adapter.
  for (const a of loaded.body.data) assert.equal(a.requests, requests[a.id] ?? 0, JSON.stringify(loaded.body));
  return requests;
}

// Runs `run` and returns how many requests each of none, a and b gained.
async function delta(server, run) {
  const before = await counts(server);
  await run();
  const after = await counts(server);
  return Object.fromEntries(['none', 'a', 'b'].map((k) => [k, after[k] - before[k]]));
}

describe('Pi with graft', () => {
  let server;
  before(async () => {
    rmSync(ROOT, { recursive: true, force: true });
    mkdirSync(STORE, { recursive: true });
    mkdirSync(WORKSPACE, { recursive: true });
    // Pi compacts a conversation that nears the context (minus 16k tokens it keeps for the
    // reply): with the test model's 4k context it would, after every answer.
    mkdirSync(path.join(HOME, '.pi', 'agent'), { recursive: true });
    writeFileSync(path.join(HOME, '.pi', 'agent', 'settings.json'), JSON.stringify({ compaction: { enabled: false } }));
    for (const [id, seed] of [['a', '1'], ['b', '2']]) {
      execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--peft', path.join(STORE, id),
        '--rank', '4', '--seed', seed, '--strength', '1'], { stdio: 'pipe' });
    }
    // b is the server's default: requests that name no adapter use it, so the
    // counters tell "unchanged" from an explicit "none".
    server = await startServer(['--force-adapter', 'b'], { ctx: 4096 });
    const loaded = await postRaw(server, '/v1/adapters', JSON.stringify({ id: 'a' }));
    assert.equal(loaded.status, 200, loaded.text);
  });
  after(async () => { if (server) assert.equal(await server.stop(), 0, server.log()); });

  it('graft pi install writes the provider and the extension, and keeps the rest', async () => {
    const agent = path.join(HOME, '.pi', 'agent');
    mkdirSync(agent, { recursive: true });
    // Another provider, pointing at graft too (so the guard allows it): its requests must go out unchanged.
    writeFileSync(path.join(agent, 'models.json'), JSON.stringify({
      providers: {
        elsewhere: {
          baseUrl: `${server.baseURL}/v1`, api: 'openai-completions', apiKey: 'x',
          compat: { supportsStore: false, supportsReasoningEffort: false, supportsStrictMode: false },
          models: [{ id: 'tiny', maxTokens: 4 }],
        },
      },
    }));
    const args = ['pi', 'install', '--url', server.baseURL, '--max-tokens', '4'];
    const first = graft(args, { HOME, PI_CODING_AGENT_DIR: '' });
    assert.match(first, /wrote Pi's provider 'graft': model 'tiny'/);
    const models = JSON.parse(readFileSync(path.join(agent, 'models.json'), 'utf8'));
    assert.ok(models.providers.elsewhere, 'the other provider is kept');
    const provider = models.providers.graft;
    assert.equal(provider.baseUrl, `${server.baseURL}/v1`);
    assert.equal(provider.api, 'openai-completions');
    assert.deepEqual(provider.models.map((m) => [m.id, m.contextWindow, m.maxTokens]), [['tiny', 4096, 4]]);
    const extension = readFileSync(path.join(agent, 'extensions', 'graft-adapter.ts'), 'utf8');
    assert.equal(extension, readFileSync(new URL('../../integrations/pi/graft-adapter.ts', import.meta.url), 'utf8'));
    // Idempotent.
    const second = graft(args, { HOME, PI_CODING_AGENT_DIR: '' });
    assert.match(second, /kept Pi's provider/);
    assert.match(second, /kept graft's adapter extension/);
  });

  it('sends nothing without GRAFT_ADAPTER or a shared selection: the server default serves', async () => {
    assert.ok(!existsSync(path.join(XDG, 'graft', 'selection.json')));
    assert.deepEqual(await delta(server, () => runPi()), { none: 0, a: 0, b: 1 });
  });

  it('sends GRAFT_ADAPTER', async () => {
    assert.deepEqual(await delta(server, () => runPi({ GRAFT_ADAPTER: 'a' })), { none: 0, a: 1, b: 0 });
  });

  it('sends the shared selection that graft adapters use wrote (a stack counts for each adapter)', async () => {
    assert.match(graft(['adapters', 'use', 'a+b', '--url', server.baseURL]), /a\+b/);
    assert.equal(JSON.parse(readFileSync(path.join(XDG, 'graft', 'selection.json'), 'utf8')).adapter, 'a+b');
    assert.deepEqual(await delta(server, () => runPi()), { none: 0, a: 1, b: 1 });
    // An unknown adapter is refused and changes nothing.
    assert.throws(() => graft(['adapters', 'use', 'nosuch', '--url', server.baseURL]), /unknown adapter 'nosuch'/);
    assert.equal((await getJson(server, '/v1/adapters/selection')).body.adapter, 'a+b');
  });

  it('sends "none" from the server when this machine has no state file, and leaves other providers alone', async () => {
    graft(['adapters', 'use', 'none', '--url', server.baseURL]);
    // Pi with another state folder: the extension asks the server for the selection.
    const elsewhere = path.join(ROOT, 'xdg-elsewhere');
    assert.deepEqual(await delta(server, () => runPi({ XDG_DATA_HOME: elsewhere })), { none: 1, a: 0, b: 0 });
    assert.deepEqual(await delta(server, () => runPi({ GRAFT_ADAPTER: 'a' }, ['--provider', 'elsewhere', '--model', 'tiny'])),
      { none: 0, a: 0, b: 1 });
  });

  it('never left this machine', () => {
    assert.ok(!existsSync(GUARD_LOG), existsSync(GUARD_LOG) ? readFileSync(GUARD_LOG, 'utf8') : '');
  });
});
