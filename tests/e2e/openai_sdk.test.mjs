// graft serve through the official openai SDK: chat and completions (whole and
// streamed), models, tools, and the SDK's typed errors for a 400 and a 401.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './graft.mjs';

const messages = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Name three colours.' },
];

async function streamedChat(client, params) {
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      if (choice.delta.content) text += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  return { text, finish, usage, role };
}

describe('openai SDK against graft serve', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, `graft serve did not shut down cleanly:\n${server.log()}`);
  });

  it('lists the served model', async () => {
    const models = await client.models.list();
    const ids = [];
    for await (const m of models) ids.push(m.id);
    assert.deepEqual(ids, ['tiny']);
    const one = await client.models.retrieve('tiny');
    assert.equal(one.id, 'tiny');
  });

  it('answers a chat request', async () => {
    const res = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 8, temperature: 0 });
    assert.equal(res.object, 'chat.completion');
    assert.equal(res.choices.length, 1);
    assert.equal(res.choices[0].message.role, 'assistant');
    assert.equal(typeof res.choices[0].message.content, 'string');
    assert.ok(res.choices[0].message.content.length > 0);
    assert.equal(res.choices[0].finish_reason, 'length');
    assert.equal(res.usage.completion_tokens, 8);
    assert.ok(res.usage.prompt_tokens > 10);
    assert.equal(res.usage.total_tokens, res.usage.prompt_tokens + res.usage.completion_tokens);
  });

  it('streams a chat answer equal to the whole one', async () => {
    const params = { model: 'tiny', messages, max_tokens: 16, temperature: 0 };
    const whole = await client.chat.completions.create(params);
    const streamed = await streamedChat(client, params);
    assert.equal(streamed.role, 'assistant');
    assert.equal(streamed.text, whole.choices[0].message.content);
    assert.equal(streamed.finish, 'length');
    assert.equal(streamed.usage.completion_tokens, 16);
    assert.equal(streamed.usage.prompt_tokens, whole.usage.prompt_tokens);
  });

  it('completes a prompt, whole and streamed', async () => {
    const params = { model: 'tiny', prompt: 'The quick brown fox', max_tokens: 12, temperature: 0 };
    const whole = await client.completions.create(params);
    assert.equal(whole.object, 'text_completion');
    assert.equal(typeof whole.choices[0].text, 'string');
    assert.equal(whole.usage.completion_tokens, 12);
    const stream = await client.completions.create({ ...params, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, whole.choices[0].text);
  });

  it('takes a chat request with tools and answers with a well-formed message', async () => {
    const tools = [{
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'The weather in a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    }];
    const res = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools,
      max_tokens: 12,
      temperature: 0,
    });
    const choice = res.choices[0];
    assert.ok(['stop', 'length', 'tool_calls'].includes(choice.finish_reason));
    assert.equal(choice.message.role, 'assistant');
    for (const call of choice.message.tool_calls ?? []) {
      assert.equal(call.type, 'function');
      assert.equal(typeof call.id, 'string');
      assert.equal(typeof call.function.name, 'string');
      assert.equal(typeof call.function.arguments, 'string');
    }
    // The tools reached the prompt: it is longer than without them.
    const plain = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'What is the weather in Paris?' }], max_tokens: 1,
    });
    assert.ok(res.usage.prompt_tokens > plain.usage.prompt_tokens + 20);
  });

  it('surfaces a 400 as BadRequestError naming the field', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'tiny', messages, temperature: 9 }),
      (err) => {
        assert.ok(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name}: ${err}`);
        assert.equal(err.status, 400);
        assert.equal(err.param, 'temperature');
        assert.match(err.message, /temperature/);
        return true;
      },
    );
  });

  it('refuses a forced tool call, which graft cannot honour yet, as BadRequestError', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];
    for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
      await assert.rejects(
        client.chat.completions.create({ model: 'tiny', messages, tools, tool_choice, max_tokens: 4 }),
        (err) => {
          assert.ok(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name}: ${err}`);
          assert.equal(err.param, 'tool_choice');
          assert.equal(err.code, 'unsupported_value');
          return true;
        },
      );
    }
  });

  it('gives four concurrent greedy requests the text each gets alone', async () => {
    const prompts = ['red', 'green green', 'blue blue blue', 'a much longer prompt about the colour yellow'];
    const ask = (p) => client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: p }], max_tokens: 12, temperature: 0,
    }).then((r) => r.choices[0].message.content);
    const alone = [];
    for (const p of prompts) alone.push(await ask(p));
    const together = await Promise.all(prompts.map(ask));
    assert.deepEqual(together, alone);
  });
});

describe('openai SDK against graft serve --api-key', () => {
  let server;
  before(async () => { server = await startServer(['--api-key', 'sekrit']); });
  after(async () => { assert.equal(await server.stop(), 0); });

  it('surfaces a 401 as AuthenticationError and accepts the right key', async () => {
    const wrong = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err?.constructor?.name}: ${err}`);
      assert.equal(err.status, 401);
      return true;
    });
    const right = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'sekrit', maxRetries: 0 });
    const res = await right.completions.create({ model: 'tiny', prompt: 'hi', max_tokens: 2 });
    assert.equal(res.usage.completion_tokens, 2);
    const health = await fetch(`${server.baseURL}/health`);
    assert.equal(health.status, 200, '/health needs no key');
  });
});
