// Helpers for the end-to-end tests: make a test model with the graft binary,
// start `graft serve` on a free port, stop it.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';

export const GRAFT_BIN = process.env.GRAFT_BIN;
export const BUNDLE_DIR = process.env.GRAFT_BUNDLE_DIR;
export const WORK_DIR = process.env.GRAFT_E2E_DIR ?? path.resolve('e2e-work');

if (!GRAFT_BIN || !existsSync(GRAFT_BIN)) {
  throw new Error(`GRAFT_BIN must name the built graft binary (got '${GRAFT_BIN}'): run the tests through ctest`);
}
if (!BUNDLE_DIR || !existsSync(BUNDLE_DIR)) {
  throw new Error(`GRAFT_BUNDLE_DIR must name the llama.cpp release tree (got '${BUNDLE_DIR}')`);
}

// A tiny random-weight Qwen3 model with Qwen3's own chat template (written
// once). `learnable`: every output row has the same scale, so that a trained
// adapter can make the model write special tokens (<|im_end|>, <think>) and
// end its answers; the usual model shrinks their logits so that random text
// reads as words.
export function testModel({ learnable = false } = {}) {
  mkdirSync(WORK_DIR, { recursive: true });
  const file = path.join(WORK_DIR, learnable ? 'qwen3-tiny-learnable.gguf' : 'qwen3-tiny.gguf');
  if (!existsSync(file)) {
    execFileSync(GRAFT_BIN, [
      'make-test-model', file, '--arch', 'qwen3',
      '--vocab', path.join(BUNDLE_DIR, 'models/ggml-vocab-qwen2.gguf'),
      '--embd', '128', '--layers', '2', '--heads', '4', '--kv-heads', '2', '--head-dim', '32', '--ffn', '256',
      '--ctx', '4096', '--type', 'f16',
      '--chat-template', path.join(BUNDLE_DIR, 'models/templates/Qwen-Qwen3-0.6B.jinja'),
      ...(learnable ? ['--unreadable-scale', '1'] : []),
    ], { stdio: 'pipe' });
  }
  return file;
}

// Starts `graft serve` on a free port; resolves once it listens.
export async function startServer(extraArgs = [], { ctx = 256, env = {}, model = testModel() } = {}) {
  const args = ['serve', model, '--port', '0', '--ctx', String(ctx), '--parallel', '4', '--threads', '2',
    '--alias', 'tiny', ...extraArgs];
  // Compute threads that sleep instead of spinning keep the test quick on a busy machine.
  const child = spawn(GRAFT_BIN, args, {
    env: { ...process.env, OMP_WAIT_POLICY: 'passive', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`graft serve did not start:\n${log}`)), 60000);
    child.stderr.on('data', (data) => {
      log += data;
      const m = log.match(/serving '.*' on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`graft serve exited with ${code}:\n${log}`));
    });
  });
  child.stdout.on('data', () => {});
  return {
    port,
    baseURL: `http://127.0.0.1:${port}`,
    log: () => log,
    // Stops with SIGTERM; resolves to the exit code (0 = clean shutdown).
    stop: () => new Promise((resolve) => {
      if (child.exitCode !== null) return resolve(child.exitCode);
      child.removeAllListeners('exit');
      child.on('exit', (code) => resolve(code));
      child.kill('SIGTERM');
    }),
    alive: () => child.exitCode === null,
    pid: child.pid,
    // Kills it with SIGKILL (no shutdown at all); resolves once it is gone.
    kill9: () => new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.removeAllListeners('exit');
      child.on('exit', () => resolve());
      child.kill('SIGKILL');
    }),
  };
}

export async function getJson(server, route) {
  const res = await fetch(server.baseURL + route);
  return { status: res.status, body: await res.json() };
}

export async function postRaw(server, route, body, headers = {}) {
  const res = await fetch(server.baseURL + route, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, text, json };
}
