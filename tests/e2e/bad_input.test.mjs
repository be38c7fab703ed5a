// Bad input against graft serve: each gets a clear 4xx (or is shrugged off)
// and the server keeps serving afterwards.
import { describe, it, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, getJson, postRaw } from './graft.mjs';

const chat = (extra = {}) => JSON.stringify({
  model: 'tiny', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, ...extra,
});

async function expect400(server, body, param, route = '/v1/chat/completions') {
  const res = await postRaw(server, route, body);
  assert.equal(res.status, 400, `${body.slice(0, 80)} → ${res.text}`);
  assert.equal(res.json.error.type, 'invalid_request_error');
  assert.equal(typeof res.json.error.message, 'string');
  if (param !== undefined) assert.equal(res.json.error.param, param, res.text);
  return res.json.error;
}

async function stats(server) {
  return (await getJson(server, '/stats')).body;
}

describe('bad input', () => {
  let server;
  before(async () => { server = await startServer(['--max-body', '16']); });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });
  afterEach(async () => {
    assert.ok(server.alive(), 'graft serve died');
    const health = await getJson(server, '/health');
    assert.equal(health.status, 200);
    const res = await postRaw(server, '/v1/completions', JSON.stringify({ prompt: 'still here', max_tokens: 2 }));
    assert.equal(res.status, 200, res.text);
  });

  it('malformed JSON', async () => {
    const error = await expect400(server, '{"messages": [{"role": "user", "content": "hi"', null);
    assert.equal(error.code, 'invalid_json');
    await expect400(server, 'not json at all', null);
  });

  it('wrong types name the field', async () => {
    await expect400(server, chat({ temperature: 'hot' }), 'temperature');
    await expect400(server, chat({ max_tokens: '5' }), 'max_tokens');
    await expect400(server, chat({ stop: { a: 1 } }), 'stop');
    await expect400(server, chat({ messages: 'hello' }), 'messages');
    await expect400(server, chat({ messages: [{ role: 'user', content: 7 }] }), 'messages[0].content');
    await expect400(server, JSON.stringify({ prompt: { text: 'x' } }), 'prompt', '/v1/completions');
  });

  it('negative max_tokens', async () => {
    await expect400(server, chat({ max_tokens: -1 }), 'max_tokens');
    await expect400(server, chat({ max_completion_tokens: -20 }), 'max_completion_tokens');
  });

  it('NaN temperature', async () => {
    // JSON has no NaN: sent raw it is malformed JSON, sent as a string it is the wrong type.
    await expect400(server, '{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', null);
    await expect400(server, chat({ temperature: 'NaN' }), 'temperature');
  });

  it('fields graft knows but does not implement', async () => {
    for (const [field, value] of [['grammar', 'root ::= "a"'], ['json_schema', { type: 'object' }], ['best_of', 2],
      ['mirostat', 2], ['n_probs', 3]]) {
      const error = await expect400(server, chat({ [field]: value }), field);
      assert.equal(error.code, 'unsupported_parameter');
    }
    const error = await expect400(server, chat({ response_format: { type: 'json_object' } }), 'response_format');
    assert.equal(error.code, 'unsupported_value');
    // The values that ask for nothing pass, as clients that send every option send them.
    const res = await postRaw(server, '/v1/chat/completions', chat({ grammar: '', mirostat: 0, mirostat_tau: 5, cache_prompt: true }));
    assert.equal(res.status, 200, res.text);
  });

  it('a prompt longer than the context', async () => {
    const prompt = 'word '.repeat(400);  // the server runs with --ctx 256
    const error = await expect400(server, JSON.stringify({ prompt, max_tokens: 4 }), 'prompt', '/v1/completions');
    assert.equal(error.code, 'context_length_exceeded');
    assert.match(error.message, /context/);
    const chatError = await expect400(server, chat({ messages: [{ role: 'user', content: prompt }] }), 'messages');
    assert.equal(chatError.code, 'context_length_exceeded');
  });

  it('a 50 MB body', async () => {
    const body = JSON.stringify({ prompt: 'x'.repeat(50 * 1024 * 1024), max_tokens: 1 });
    let status = 0;
    try {
      status = (await postRaw(server, '/v1/completions', body)).status;
    } catch (err) {
      // The server may close the connection before the client has sent it all.
      status = `connection closed (${err.cause?.code ?? err.message})`;
    }
    assert.equal(status, 413);
  });

  it('a client that disconnects mid-stream frees its KV', async () => {
    const before = await stats(server);
    const controller = new AbortController();
    const res = await fetch(`${server.baseURL}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'An endless story:', max_tokens: 240, ignore_eos: true, stream: true }),
      signal: controller.signal,
    });
    const reader = res.body.getReader();
    await reader.read();  // the first chunk: the request is running
    const during = await stats(server);
    assert.equal(during.requests.running, 1);
    assert.ok(during.batch.kv_bytes > 0);
    controller.abort();
    let after;
    for (let i = 0; i < 200; i++) {
      after = await stats(server);
      if (after.requests.cancelled > before.requests.cancelled && after.requests.running === 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(after.requests.cancelled, before.requests.cancelled + 1);
    assert.equal(after.requests.running, 0);
    assert.equal(after.batch.kv_bytes, 0);
    assert.ok(after.tokens.completion - before.tokens.completion < 240, 'generation went on after the disconnect');
  });

  it('200 concurrent connections that open and close', async () => {
    const port = server.port;
    const open = (i) => new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => {
        if (i % 3 === 0) socket.write('GET /health HTTP/1.1\r\nHost: x\r\n');  // half a request
        if (i % 3 === 1) socket.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"pro');
        setTimeout(() => { socket.destroy(); resolve(); }, 20);
      });
      socket.on('error', () => resolve());
    });
    await Promise.all(Array.from({ length: 200 }, (_, i) => open(i)));
    const answers = await Promise.all(Array.from({ length: 50 }, () => getJson(server, '/health')));
    assert.ok(answers.every((a) => a.status === 200));
  });
});
