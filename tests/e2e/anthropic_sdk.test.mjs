// graft serve through the official Anthropic SDK (@anthropic-ai/sdk): the
// Messages API whole and streamed, a tool-use round trip, count_tokens and
// bad input. With temperature 0 each answer must hold the same tokens as the
// same conversation sent to /v1/chat/completions.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { GRAFT_BIN, WORK_DIR, startServer, testModel } from './graft.mjs';

const XDG = path.join(WORK_DIR, 'anthropic-xdg');
process.env.XDG_DATA_HOME = XDG;
process.env.HF_HOME = path.join(WORK_DIR, 'anthropic-hf');

const tools = [{
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const openaiTools = tools.map((t) => ({
  type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema },
}));

describe('Anthropic SDK against graft serve', () => {
  let server;
  let client;
  let openai;
  before(async () => {
    rmSync(XDG, { recursive: true, force: true });
    mkdirSync(path.join(XDG, 'graft', 'adapters'), { recursive: true });
    execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--strength', '1', '--peft',
      path.join(XDG, 'graft', 'adapters', 'scribe'), '--rank', '8', '--seed', '1'], { stdio: 'pipe' });
    server = await startServer();
    client = new Anthropic({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
    openai = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, `graft serve did not shut down cleanly:\n${server.log()}`);
  });

  it('answers a message with the tokens /v1/chat/completions gives', async () => {
    const res = await client.messages.create({
      model: 'tiny', max_tokens: 12, temperature: 0, system: 'You are terse.',
      messages: [{ role: 'user', content: 'Name three colours.' }],
    });
    assert.equal(res.type, 'message');
    assert.equal(res.role, 'assistant');
    assert.match(res.id, /^msg_/);
    assert.equal(res.stop_reason, 'max_tokens');
    assert.equal(res.content.length, 1);
    assert.equal(res.content[0].type, 'text');
    const chat = await openai.chat.completions.create({
      model: 'tiny', max_tokens: 12, temperature: 0,
      messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name three colours.' }],
    });
    assert.equal(res.content[0].text, chat.choices[0].message.content);
    assert.equal(res.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(res.usage.output_tokens, 12);
  });

  it('takes system blocks and content blocks as the strings they hold', async () => {
    const params = { model: 'tiny', max_tokens: 6, temperature: 0 };
    const blocks = await client.messages.create({
      ...params, system: [{ type: 'text', text: 'You are terse.' }],
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Name three ' }, { type: 'text', text: 'colours.' }] }],
    });
    const plain = await client.messages.create({
      ...params, system: 'You are terse.', messages: [{ role: 'user', content: 'Name three colours.' }],
    });
    assert.deepEqual(blocks.content, plain.content);
    assert.equal(blocks.usage.input_tokens, plain.usage.input_tokens);
  });

  it('streams Anthropic\'s event sequence, adding up to the whole answer', async () => {
    const params = { model: 'tiny', max_tokens: 10, temperature: 0, messages: [{ role: 'user', content: 'Hello there' }] };
    const whole = await client.messages.create(params);
    const stream = await client.messages.create({ ...params, stream: true });
    const types = [];
    let text = '';
    let usage = null;
    let stop = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'message_start') assert.equal(event.message.usage.input_tokens, whole.usage.input_tokens);
      if (event.type === 'content_block_delta') {
        assert.equal(event.delta.type, 'text_delta');
        text += event.delta.text;
      }
      if (event.type === 'message_delta') {
        usage = event.usage;
        stop = event.delta.stop_reason;
      }
    }
    assert.equal(types[0], 'message_start');
    assert.equal(types[1], 'content_block_start');
    assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    assert.ok(types.slice(2, -3).every((t) => t === 'content_block_delta'));
    assert.equal(text, whole.content[0].text);
    assert.equal(usage.output_tokens, 10);
    assert.equal(stop, 'max_tokens');
    // The SDK's own stream helper assembles the same message.
    const final = await client.messages.stream(params).finalMessage();
    assert.deepEqual(final.content, whole.content);
    assert.equal(final.stop_reason, 'max_tokens');
  });

  it('carries a tool-use round trip as /v1/chat/completions does', async () => {
    const question = 'What is the weather in Paris?';
    const res = await client.messages.create({
      model: 'tiny', max_tokens: 8, temperature: 0, tools,
      messages: [
        { role: 'user', content: question },
        { role: 'assistant', content: [
          { type: 'text', text: 'Let me look.' },
          { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
        ] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: '18 C and sunny' }] },
      ],
    });
    const chat = await openai.chat.completions.create({
      model: 'tiny', max_tokens: 8, temperature: 0, tools: openaiTools,
      messages: [
        { role: 'user', content: question },
        { role: 'assistant', content: 'Let me look.', tool_calls: [
          { id: 'toolu_01', type: 'function', function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Paris' }) } },
        ] },
        { role: 'tool', tool_call_id: 'toolu_01', content: '18 C and sunny' },
      ],
    });
    assert.equal(res.usage.input_tokens, chat.usage.prompt_tokens);
    const text = res.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
    assert.equal(text, chat.choices[0].message.content ?? '');
    // The tools and the tool result reached the prompt.
    const bare = await client.messages.countTokens({ model: 'tiny', messages: [{ role: 'user', content: question }] });
    assert.ok(res.usage.input_tokens > bare.input_tokens + 30);
    for (const block of res.content) assert.ok(['text', 'tool_use', 'thinking'].includes(block.type));
  });

  it('counts tokens as a message would use them', async () => {
    const messages = [{ role: 'user', content: 'Count me.' }];
    const count = await client.messages.countTokens({ model: 'tiny', system: 'Be brief.', messages });
    const res = await client.messages.create({ model: 'tiny', max_tokens: 1, system: 'Be brief.', messages });
    assert.equal(count.input_tokens, res.usage.input_tokens);
    const withTools = await client.messages.countTokens({ model: 'tiny', system: 'Be brief.', messages, tools });
    assert.ok(withTools.input_tokens > count.input_tokens);
  });

  it('stops at a stop sequence', async () => {
    const params = { model: 'tiny', max_tokens: 12, temperature: 0, messages: [{ role: 'user', content: 'Hello there' }] };
    const whole = await client.messages.create(params);
    const words = whole.content[0].text.trim().split(' ');
    assert.ok(words.length >= 3, whole.content[0].text);
    const res = await client.messages.create({ ...params, stop_sequences: ['zzzz-never', words[2]] });
    assert.equal(res.stop_reason, 'stop_sequence');
    assert.equal(res.stop_sequence, words[2]);
    assert.ok(res.content[0].text.length < whole.content[0].text.length);
    assert.ok(!res.content[0].text.includes(words[2]));
    assert.ok(whole.content[0].text.startsWith(res.content[0].text));
  });

  function badRequest(field, pattern) {
    return (err) => {
      assert.ok(err instanceof Anthropic.BadRequestError, `got ${err?.constructor?.name}: ${err}`);
      assert.equal(err.status, 400);
      assert.equal(err.error.type, 'error');
      assert.equal(err.error.error.type, 'invalid_request_error');
      assert.match(err.error.error.message, pattern ?? new RegExp(field.replace(/[.[\]]/g, '\\$&')));
      return true;
    };
  }

  it('refuses bad input with errors in Anthropic\'s shape', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    await assert.rejects(client.messages.create({ model: 'tiny', messages }), badRequest('max_tokens', /'max_tokens' is required/));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 'many', messages }), badRequest('max_tokens'));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, messages: 'Hi' }), badRequest('messages'));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, messages: [] }), badRequest('messages'));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, temperature: 1.5, messages }),
      badRequest('temperature'));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'tool', content: 'x' }] }),
      badRequest('messages[0].role'));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: '' } }] }] }),
    badRequest('messages[0].content[0].type', /image/));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, messages, frobnicate: true }),
      badRequest('frobnicate'));
    await assert.rejects(client.messages.create({ max_tokens: 4, messages }), badRequest('model'));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, messages, metadata: { user_id: 7 } }),
      badRequest('metadata.user_id'));
  });

  it('refuses what graft cannot honour, naming the field', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
      await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, messages, tools, tool_choice }),
        badRequest('tool_choice', /cannot force a tool call/));
    }
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, messages,
      thinking: { type: 'enabled', budget_tokens: 1024 } }), badRequest('thinking'));
    await assert.rejects(client.messages.create({ model: 'tiny', max_tokens: 4, messages,
      tools: [{ type: 'web_search_20250305', name: 'web_search' }] }), badRequest('tools[0].type'));
    // tool_choice auto and none are honoured: none leaves the tools out of the prompt.
    const none = await client.messages.countTokens({ model: 'tiny', messages, tools, tool_choice: { type: 'none' } });
    const bare = await client.messages.countTokens({ model: 'tiny', messages });
    assert.equal(none.input_tokens, bare.input_tokens);
  });

  it('refuses an unknown adapter with an error in Anthropic\'s shape', async () => {
    await assert.rejects(
      client.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }], adapter: 'nope' }),
      badRequest('adapter', /nope/));
  });

  it('answers metadata.user_id and top_k', async () => {
    const res = await client.messages.create({ model: 'tiny', max_tokens: 3, top_k: 1, top_p: 0.9,
      metadata: { user_id: 'u-1' }, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(res.usage.output_tokens, 3);
  });

  it('selects a loaded adapter through the adapter field, as /v1/chat/completions and /v1/responses do', async () => {
    const load = await fetch(`${server.baseURL}/v1/adapters`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 'scribe' }),
    });
    assert.equal(load.status, 200, await load.text());
    const messages = [{ role: 'user', content: 'Tell me a story.' }];
    const params = { model: 'tiny', max_tokens: 10, temperature: 0, messages };
    const base = await client.messages.create(params);
    const tuned = await client.messages.create({ ...params, adapter: 'scribe' });
    const chat = await openai.chat.completions.create({ ...params, adapter: 'scribe' });
    assert.equal(tuned.content[0].text, chat.choices[0].message.content);
    assert.notEqual(tuned.content[0].text, base.content[0].text);
    const response = await openai.responses.create({
      model: 'tiny', max_output_tokens: 10, temperature: 0, input: 'Tell me a story.', adapter: 'scribe',
    });
    assert.equal(response.output_text, tuned.content[0].text);
  });
});

describe('Anthropic SDK against graft serve --api-key', () => {
  let server;
  before(async () => { server = await startServer(['--api-key', 'sekrit']); });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  it('sends the key as x-api-key, which graft takes as it takes a bearer token', async () => {
    const params = { model: 'tiny', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] };
    const wrong = new Anthropic({ baseURL: server.baseURL, apiKey: 'nope', maxRetries: 0 });
    await assert.rejects(wrong.messages.create(params), (err) => err instanceof Anthropic.AuthenticationError);
    const right = new Anthropic({ baseURL: server.baseURL, apiKey: 'sekrit', maxRetries: 0 });
    assert.equal((await right.messages.create(params)).usage.output_tokens, 2);
  });
});
