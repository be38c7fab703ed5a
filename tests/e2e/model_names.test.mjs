// Adapters as model names through the official openai SDK: /v1/models lists
// them (vLLM's convention), `model` selects them as `adapter` does, unknown
// models are a 404, and --auto-load-adapters loads what a request names —
// mlx-lm adapter folders included.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { GRAFT_BIN, WORK_DIR, startServer, testModel, getJson } from './graft.mjs';

const XDG = path.join(WORK_DIR, 'names-xdg');
const STORE = path.join(XDG, 'graft', 'adapters');
process.env.XDG_DATA_HOME = XDG;
process.env.HF_HOME = path.join(WORK_DIR, 'names-hf-home');

function makeAdapter(args) {
  execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--strength', '1', ...args], { stdio: 'pipe' });
}

function setUpStore() {
  rmSync(XDG, { recursive: true, force: true });
  mkdirSync(STORE, { recursive: true });
  // The same weights as PEFT and as mlx-lm (A and B transposed, scale a multiplier).
  makeAdapter(['--peft', path.join(STORE, 'poet'), '--mlx', path.join(STORE, 'poet-mlx'), '--rank', '8',
    '--alpha', '12', '--seed', '1']);
  makeAdapter(['--peft', path.join(STORE, 'pirate'), '--rank', '4', '--seed', '2']);
}

const prompt = { max_tokens: 12, temperature: 0 };
const messages = [{ role: 'user', content: 'Write a line about the sea.' }];

async function chat(client, body) {
  const r = await client.chat.completions.create({ messages, ...prompt, ...body });
  return r.choices[0].message.content;
}

describe('adapters as model names', () => {
  let server, client;
  before(async () => {
    setUpStore();
    server = await startServer(['--alias', 'tiny-too']);
    client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
    for (const id of ['poet', 'pirate']) {
      const res = await fetch(`${server.baseURL}/v1/adapters`, { method: 'POST', body: JSON.stringify({ id }) });
      assert.equal(res.status, 200, await res.text());
    }
  });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  it('lists the base, its aliases and each loaded adapter with its parent', async () => {
    const models = [];
    for await (const m of client.models.list()) models.push(m);
    assert.deepEqual(models.map((m) => [m.id, m.parent ?? null]),
      [['tiny', null], ['tiny-too', null], ['pirate', 'tiny'], ['poet', 'tiny']]);
    assert.equal((await client.models.retrieve('poet')).parent, 'tiny');
  });

  it('selects an adapter or a stack by model name, token for token as the adapter field', async () => {
    const base = await chat(client, { model: 'tiny' });
    const poet = await chat(client, { model: 'tiny', adapter: 'poet' });
    assert.notEqual(poet, base);
    assert.equal(await chat(client, { model: 'poet' }), poet);
    assert.equal(await chat(client, { model: 'tiny-too', adapter: 'poet' }), poet);
    assert.equal(await chat(client, { model: 'poet@0.5+pirate' }), await chat(client, { model: 'tiny', adapter: 'poet@0.5+pirate' }));
    const stream = await client.chat.completions.create({ model: 'poet', messages, ...prompt, stream: true });
    let streamed = '';
    for await (const chunk of stream) {
      streamed += chunk.choices[0]?.delta?.content ?? '';
      assert.equal(chunk.model, 'poet', 'a chunk answers with the adapter the request named');
    }
    assert.equal(streamed, poet);
    const completion = await client.completions.create({ model: 'pirate', prompt: 'The quick brown fox', ...prompt });
    const viaField = await client.completions.create({ model: 'tiny', adapter: 'pirate', prompt: 'The quick brown fox', ...prompt });
    assert.equal(completion.choices[0].text, viaField.choices[0].text);
    // The answer names the model as the request did (vLLM's convention); the base model keeps its id.
    assert.equal(completion.model, 'pirate');
    assert.equal(viaField.model, 'tiny');
    assert.equal((await client.chat.completions.create({ model: 'poet@0.5+pirate', messages, ...prompt })).model, 'poet@0.5+pirate');
    const response = await client.responses.create({ model: 'poet', input: 'Write a line about the sea.', max_output_tokens: 12, temperature: 0 });
    const responseViaField = await client.responses.create({ model: 'tiny', adapter: 'poet', input: 'Write a line about the sea.', max_output_tokens: 12, temperature: 0 });
    assert.equal(response.output_text, responseViaField.output_text);
  });

  it('refuses a model and an adapter that disagree, and unknown models', async () => {
    await assert.rejects(chat(client, { model: 'poet', adapter: 'pirate' }),
      (e) => e instanceof OpenAI.BadRequestError && /'model' selects adapter poet but 'adapter' selects pirate/.test(e.message));
    await assert.rejects(chat(client, { model: 'gpt-4o' }),
      (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found' && /'gpt-4o' does not exist/.test(e.message));
    // In the store but not loaded, without --auto-load-adapters: says how to load it.
    await assert.rejects(chat(client, { model: 'poet-mlx' }),
      (e) => e instanceof OpenAI.BadRequestError && /POST \/v1\/adapters/.test(e.message) && /--auto-load-adapters/.test(e.message));
  });
});

describe('--auto-load-adapters', () => {
  let server, client;
  before(async () => {
    setUpStore();
    server = await startServer(['--auto-load-adapters', '--max-loaded-adapters', '2']);
    client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  it('loads what a request names, once for many, and mlx-lm adapters give what PEFT gives', async () => {
    const texts = await Promise.all(Array.from({ length: 6 }, () => chat(client, { model: 'poet-mlx' })));
    for (const t of texts) assert.equal(t, texts[0]);
    let stats = (await getJson(server, '/stats')).body.adapters;
    assert.equal(stats.auto_load.loads, 1);
    const loaded = (await getJson(server, '/v1/adapters')).body.data;
    assert.deepEqual(loaded.map((a) => [a.id, a.format]), [['poet-mlx', 'mlx']]);
    assert.equal(loaded[0].scale, 1.5);
    assert.equal(await chat(client, { model: 'poet' }), texts[0]);
    // A third adapter with room for two: the least recently used idle one goes.
    await chat(client, { model: 'pirate' });
    stats = (await getJson(server, '/stats')).body.adapters;
    assert.equal(stats.auto_load.loads, 3);
    assert.equal(stats.auto_load.evictions, 1);
    assert.deepEqual(stats.loaded.map((a) => a.id), ['pirate', 'poet']);
    await assert.rejects(chat(client, { model: 'nosuch' }), (e) => e instanceof OpenAI.NotFoundError);
  });
});
