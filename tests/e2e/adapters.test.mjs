// Adapters through HTTP: the three states (available -> loaded -> selected),
// unloading, bad input, and --force-adapter, against a real `graft serve`.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { GRAFT_BIN, WORK_DIR, startServer, testModel, getJson, postRaw } from './graft.mjs';

// The user's store lives in the work folder, so nothing outside the test is scanned.
const XDG = path.join(WORK_DIR, 'adapters-xdg');
const STORE = path.join(XDG, 'graft', 'adapters');
const EXTRA = path.join(WORK_DIR, 'adapters-extra');
process.env.XDG_DATA_HOME = XDG;
// Adapter repos in the Hugging Face cache are available too: keep the user's out.
process.env.HF_HOME = path.join(WORK_DIR, 'adapters-hf-home');

function makeAdapter(args) {
  execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--strength', '1', ...args], { stdio: 'pipe' });
}

function setUpStore() {
  rmSync(XDG, { recursive: true, force: true });
  rmSync(EXTRA, { recursive: true, force: true });
  mkdirSync(STORE, { recursive: true });
  mkdirSync(EXTRA, { recursive: true });
  makeAdapter(['--peft', path.join(STORE, 'poet'), '--rank', '8', '--seed', '1', '--stamp']);
  makeAdapter(['--gguf', path.join(STORE, 'pirate.gguf'), '--rank', '4', '--seed', '2', '--targets', 'attn']);
  makeAdapter(['--peft', path.join(EXTRA, 'lawyer'), '--rank', '8', '--seed', '3']);
  // A corrupt adapter: a valid config, weights cut in half.
  makeAdapter(['--peft', path.join(STORE, 'corrupt'), '--rank', '8', '--seed', '4']);
  const weights = path.join(STORE, 'corrupt', 'adapter_model.safetensors');
  writeFileSync(weights, 'this is not a safetensors file');
  // An adapter for a model of another shape (a wider MLP).
  const other = path.join(WORK_DIR, 'qwen3-other.gguf');
  execFileSync(GRAFT_BIN, ['make-test-model', other, '--arch', 'qwen3', '--embd', '128', '--layers', '2',
    '--heads', '4', '--kv-heads', '2', '--head-dim', '32', '--ffn', '384', '--type', 'f16'], { stdio: 'pipe' });
  execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', other, '--peft', path.join(STORE, 'misfit'), '--stamp'],
    { stdio: 'pipe' });
  // A file outside every adapter folder.
  mkdirSync(path.join(WORK_DIR, 'outside'), { recursive: true });
  copyFileSync(path.join(STORE, 'pirate.gguf'), path.join(WORK_DIR, 'outside', 'stray.gguf'));
}

async function del(server, route) {
  const res = await fetch(server.baseURL + route, { method: 'DELETE' });
  return { status: res.status, json: await res.json() };
}

async function complete(server, extra) {
  const res = await postRaw(server, '/v1/completions', JSON.stringify({
    prompt: 'The quick brown fox', max_tokens: 12, temperature: 0, ...extra,
  }));
  return res;
}

async function text(server, extra) {
  const res = await complete(server, extra);
  assert.equal(res.status, 200, res.text);
  return res.json.choices[0].text;
}

async function load(server, body) {
  return postRaw(server, '/v1/adapters', JSON.stringify(body));
}

describe('adapters over HTTP', () => {
  let server;
  before(async () => {
    setUpStore();
    server = await startServer(['--adapter-dir', EXTRA]);
  });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  it('lists what is available, compatible first, with the reason for the rest', async () => {
    const { status, body } = await getJson(server, '/v1/adapters/available');
    assert.equal(status, 200);
    const ids = body.data.map((a) => a.id);
    assert.deepEqual(ids, ['lawyer', 'pirate', 'poet', 'corrupt', 'misfit']);
    const byId = Object.fromEntries(body.data.map((a) => [a.id, a]));
    assert.equal(byId.poet.compatible, true);
    assert.equal(byId.poet.stamped, true);
    assert.equal(byId.poet.rank, 8);
    assert.equal(byId.pirate.format, 'gguf');
    assert.equal(byId.lawyer.path, path.join(EXTRA, 'lawyer'));
    assert.equal(byId.corrupt.compatible, false);
    assert.match(byId.corrupt.reason, /safetensors/);
    assert.equal(byId.misfit.compatible, false);
    assert.match(byId.misfit.reason, /fingerprint/);
    for (const a of body.data) assert.equal(a.loaded, false);
    assert.deepEqual((await getJson(server, '/v1/adapters')).body.data, []);
  });

  it('goes available -> loaded -> selected -> unloaded', async () => {
    const base = await text(server, {});
    // Selecting before loading is a 400 that names the adapter.
    let res = await complete(server, { adapter: 'poet' });
    assert.equal(res.status, 400, res.text);
    assert.equal(res.json.error.param, 'adapter');
    assert.equal(res.json.error.code, 'adapter_not_loaded');
    assert.match(res.json.error.message, /'poet'/);

    res = await load(server, { id: 'poet' });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.id, 'poet');
    assert.equal(res.json.rank, 8);
    assert.ok(res.json.size_bytes > 0);
    assert.deepEqual(res.json.layers, [0, 1]);
    res = await load(server, { id: 'pirate' });
    assert.equal(res.status, 200, res.text);

    const loaded = (await getJson(server, '/v1/adapters')).body.data;
    assert.deepEqual(loaded.map((a) => a.id), ['pirate', 'poet']);
    const available = (await getJson(server, '/v1/adapters/available')).body.data;
    assert.equal(available.find((a) => a.id === 'poet').loaded, true);

    const poet = await text(server, { adapter: 'poet' });
    const pirate = await text(server, { adapter: 'pirate' });
    const both = await text(server, { adapter: 'poet+pirate' });
    const half = await text(server, { adapter: 'poet@0.5' });
    assert.notEqual(poet, base);
    assert.notEqual(pirate, poet);
    assert.notEqual(both, poet);
    assert.notEqual(half, poet);
    assert.equal(await text(server, { adapter: 'none' }), base);
    assert.equal(await text(server, { adapter: 'poet' }), poet);  // selection is per request, nothing sticks

    // Concurrent requests with different selections each get their own.
    const together = await Promise.all(['poet', 'none', 'pirate', 'poet+pirate', 'poet'].map((a) => text(server, { adapter: a })));
    assert.deepEqual(together, [poet, base, pirate, both, poet]);

    // Through the openai SDK, with the extra body field.
    const client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
    const sdk = await client.completions.create({ model: 'tiny', prompt: 'The quick brown fox', max_tokens: 12, temperature: 0, adapter: 'poet' });
    assert.equal(sdk.choices[0].text, poet);
    await assert.rejects(
      client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], adapter: 'lawyer' }),
      (e) => e instanceof OpenAI.BadRequestError && /'lawyer' is not loaded/.test(e.message));

    res = await del(server, '/v1/adapters/poet');
    assert.equal(res.status, 200, JSON.stringify(res.json));
    assert.equal(res.json.deleted, true);
    res = await complete(server, { adapter: 'poet' });
    assert.equal(res.status, 400);
    assert.equal(res.json.error.code, 'adapter_not_loaded');
    assert.equal((await del(server, '/v1/adapters/poet')).status, 404);
    // Loading it again gives the same text.
    assert.equal((await load(server, { id: 'poet' })).status, 200);
    assert.equal(await text(server, { adapter: 'poet' }), poet);
  });

  it('refuses to unload an adapter a running request uses', async () => {
    assert.equal((await load(server, { id: 'lawyer' })).status, 200);
    const controller = new AbortController();
    const res = await fetch(`${server.baseURL}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200, stream: true, ignore_eos: true, adapter: 'lawyer' }),
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    await reader.read();  // the request is running
    const busy = await del(server, '/v1/adapters/lawyer');
    assert.equal(busy.status, 409, JSON.stringify(busy.json));
    assert.match(busy.json.error.message, /in use/);
    controller.abort();
    await reader.read().catch(() => {});
    // Once the request is gone, it unloads.
    let status = 409;
    for (let i = 0; i < 50 && status === 409; ++i) {
      status = (await del(server, '/v1/adapters/lawyer')).status;
      if (status === 409) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(status, 200);
  });

  it('gives bad input a clear 4xx and keeps serving', async () => {
    let res = await complete(server, { adapter: 'nosuch' });
    assert.equal(res.status, 400);
    assert.equal(res.json.error.code, 'adapter_not_found');
    assert.match(res.json.error.message, /'nosuch'/);
    res = await complete(server, { adapter: 'misfit' });
    assert.equal(res.status, 400);
    assert.equal(res.json.error.code, 'adapter_incompatible');
    res = await complete(server, { adapter: 7 });
    assert.equal(res.status, 400);
    assert.equal(res.json.error.param, 'adapter');
    res = await complete(server, { adapter: 'poet@fast' });
    assert.equal(res.status, 400);
    assert.equal(res.json.error.code, 'invalid_adapter_spec');

    res = await load(server, { id: 'corrupt' });
    assert.equal(res.status, 400, res.text);
    assert.match(res.json.error.message, /not a safetensors file/);
    res = await load(server, { id: 'misfit' });
    assert.equal(res.status, 400, res.text);
    assert.equal(res.json.error.code, 'incompatible_adapter');
    res = await load(server, { id: 'nosuch' });
    assert.equal(res.status, 404, res.text);
    res = await load(server, { id: '../outside/stray' });
    assert.equal(res.status, 400, res.text);
    res = await load(server, { path: path.join(WORK_DIR, 'outside', 'stray.gguf') });
    assert.equal(res.status, 403, res.text);
    res = await load(server, { path: path.join(STORE, '..', '..', '..', 'outside', 'stray.gguf') });
    assert.equal(res.status, 403, res.text);
    res = await load(server, { path: '/etc/passwd' });
    assert.equal(res.status, 403, res.text);
    res = await load(server, { id: 5 });
    assert.equal(res.status, 400, res.text);
    res = await load(server, {});
    assert.equal(res.status, 400, res.text);
    res = await postRaw(server, '/v1/adapters', '{"id": ');
    assert.equal(res.status, 400, res.text);
    // A path inside an adapter folder loads, under the id given.
    res = await load(server, { path: path.join(STORE, 'pirate.gguf'), id: 'pirate-2' });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.id, 'pirate-2');

    assert.equal((await getJson(server, '/health')).status, 200);
    assert.equal(typeof (await text(server, {})), 'string');
  });
});

describe('--force-adapter', () => {
  let server;
  before(async () => { server = await startServer(['--adapter-dir', EXTRA, '--force-adapter', 'poet']); });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  it('makes the adapter every request\'s default, visible in /health and /stats', async () => {
    const health = (await getJson(server, '/health')).body;
    assert.equal(health.adapter, 'poet');
    const stats = (await getJson(server, '/stats')).body;
    assert.equal(stats.adapters.default, 'poet');
    assert.deepEqual(stats.adapters.loaded.map((a) => a.id), ['poet']);
    const byDefault = await text(server, {});
    assert.equal(await text(server, { adapter: 'poet' }), byDefault);
    assert.notEqual(await text(server, { adapter: 'none' }), byDefault);
    const res = await del(server, '/v1/adapters/poet');
    assert.equal(res.status, 409);
    assert.match(res.json.error.message, /default/);
  });

  it('refuses to start with an adapter it cannot load', async () => {
    await assert.rejects(startServer(['--force-adapter', 'nosuch']), /--force-adapter: no adapter 'nosuch'/);
    await assert.rejects(startServer(['--force-adapter', 'corrupt']), /not a safetensors file/);
  });
});
