// graft serve's Responses API through the official openai SDK
// (client.responses): whole and streamed, a function-call round trip,
// previous_response_id chaining, GET and DELETE, and bad input. With
// temperature 0 each answer must hold the same tokens as the same
// conversation sent to /v1/chat/completions.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './graft.mjs';

const tools = [{
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const chatTools = [{
  type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: tools[0].parameters },
}];

describe('openai SDK responses against graft serve', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer([], { ctx: 512 });
    client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, `graft serve did not shut down cleanly:\n${server.log()}`);
  });

  it('answers with the tokens /v1/chat/completions gives', async () => {
    const res = await client.responses.create({
      model: 'tiny', instructions: 'You are terse.', input: 'Name three colours.', max_output_tokens: 12, temperature: 0,
    });
    assert.equal(res.object, 'response');
    assert.match(res.id, /^resp_/);
    assert.equal(res.status, 'incomplete');
    assert.equal(res.incomplete_details.reason, 'max_output_tokens');
    assert.equal(res.output.length, 1);
    assert.equal(res.output[0].type, 'message');
    assert.equal(res.output[0].role, 'assistant');
    const chat = await client.chat.completions.create({
      model: 'tiny', max_tokens: 12, temperature: 0,
      messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name three colours.' }],
    });
    assert.equal(res.output_text, chat.choices[0].message.content);
    assert.equal(res.output[0].content[0].text, chat.choices[0].message.content);
    assert.equal(res.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(res.usage.output_tokens, 12);
    assert.equal(res.usage.total_tokens, res.usage.input_tokens + 12);
  });

  it('takes input items as the string they hold', async () => {
    const params = { model: 'tiny', max_output_tokens: 6, temperature: 0 };
    const items = await client.responses.create({ ...params, input: [
      { role: 'developer', content: 'You are terse.' },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Name three ' }, { type: 'input_text', text: 'colours.' }] },
    ] });
    const plain = await client.responses.create({ ...params, instructions: 'You are terse.', input: 'Name three colours.' });
    assert.equal(items.output_text, plain.output_text);
    assert.equal(items.usage.input_tokens, plain.usage.input_tokens);
  });

  it('streams typed events, numbered, adding up to the whole answer', async () => {
    const params = { model: 'tiny', input: 'Hello there', max_output_tokens: 10, temperature: 0 };
    const whole = await client.responses.create(params);
    const stream = await client.responses.create({ ...params, stream: true });
    const types = [];
    let text = '';
    let last = null;
    let seq = 0;
    for await (const event of stream) {
      types.push(event.type);
      assert.equal(event.sequence_number, seq++);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.output_text.done') assert.equal(event.text, text);
      last = event;
    }
    assert.deepEqual(types.slice(0, 4),
      ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.deepEqual(types.slice(-4),
      ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    assert.equal(text, whole.output_text);
    assert.equal(last.response.usage.output_tokens, 10);
    assert.equal(last.response.output[0].content[0].text, whole.output_text);
    // The SDK's stream helper assembles the same response.
    const final = await client.responses.stream({ ...params, max_output_tokens: 10 }).finalResponse();
    assert.equal(final.output[0].content[0].text, whole.output_text);
  });

  it('carries a function-call round trip as /v1/chat/completions does', async () => {
    const question = 'What is the weather in Paris?';
    const res = await client.responses.create({
      model: 'tiny', max_output_tokens: 8, temperature: 0, tools,
      input: [
        { role: 'user', content: question },
        { type: 'function_call', call_id: 'call_01', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_01', output: '18 C and sunny' },
      ],
    });
    const chat = await client.chat.completions.create({
      model: 'tiny', max_tokens: 8, temperature: 0, tools: chatTools,
      messages: [
        { role: 'user', content: question },
        { role: 'assistant', content: '', tool_calls: [
          { id: 'call_01', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_01', content: '18 C and sunny' },
      ],
    });
    assert.equal(res.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(res.output_text, chat.choices[0].message.content ?? '');
    for (const item of res.output) assert.ok(['message', 'function_call', 'reasoning'].includes(item.type));
    const bare = await client.responses.create({ model: 'tiny', max_output_tokens: 1, input: question });
    assert.ok(res.usage.input_tokens > bare.usage.input_tokens + 30);
  });

  it('chains on previous_response_id, then GETs and DELETEs a stored response', async () => {
    const first = await client.responses.create({
      model: 'tiny', instructions: 'You are terse.', input: 'Hi', max_output_tokens: 5, temperature: 0,
    });
    const second = await client.responses.create({
      model: 'tiny', previous_response_id: first.id, input: 'And again?', max_output_tokens: 5, temperature: 0,
    });
    assert.equal(second.previous_response_id, first.id);
    // The same conversation sent whole: the earlier turn's instructions are not carried over.
    const chat = await client.chat.completions.create({
      model: 'tiny', max_tokens: 5, temperature: 0,
      messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: first.output_text },
        { role: 'user', content: 'And again?' }],
    });
    assert.equal(second.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(second.output_text, chat.choices[0].message.content);

    const got = await client.responses.retrieve(first.id);
    assert.equal(got.id, first.id);
    assert.equal(got.output_text, first.output_text);
    await client.responses.delete(first.id);
    await assert.rejects(client.responses.retrieve(first.id), (err) => err instanceof OpenAI.NotFoundError);
    await assert.rejects(client.responses.delete(first.id), (err) => err instanceof OpenAI.NotFoundError);
    await assert.rejects(
      client.responses.create({ model: 'tiny', previous_response_id: first.id, input: 'x', max_output_tokens: 2 }),
      (err) => err instanceof OpenAI.NotFoundError && err.param === 'previous_response_id');
  });

  it('keeps nothing with store: false', async () => {
    const res = await client.responses.create({ model: 'tiny', input: 'Hi', max_output_tokens: 2, store: false });
    assert.equal(res.store, false);
    await assert.rejects(client.responses.retrieve(res.id), (err) => err instanceof OpenAI.NotFoundError);
  });

  function badRequest(param) {
    return (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name}: ${err}`);
      assert.equal(err.status, 400);
      assert.equal(err.param, param);
      return true;
    };
  }

  it('refuses bad input and what graft cannot honour, naming the field', async () => {
    const base = { model: 'tiny', max_output_tokens: 2 };
    await assert.rejects(client.responses.create({ model: 'tiny' }), badRequest('input'));
    await assert.rejects(client.responses.create({ ...base, input: 7 }), badRequest('input'));
    await assert.rejects(client.responses.create({ ...base, input: 'x', temperature: 5 }), badRequest('temperature'));
    await assert.rejects(client.responses.create({ ...base, input: 'x', max_output_tokens: 0 }), badRequest('max_tokens'));
    await assert.rejects(client.responses.create({ ...base, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }),
      badRequest('input[0].content[0].type'));
    await assert.rejects(client.responses.create({ ...base, input: 'x', tools, tool_choice: 'required' }), badRequest('tool_choice'));
    await assert.rejects(client.responses.create({ ...base, input: 'x', tools: [{ type: 'web_search' }] }), badRequest('tools[0].type'));
    await assert.rejects(client.responses.create({ ...base, input: 'x', reasoning: { effort: 'high' } }), badRequest('reasoning'));
    await assert.rejects(client.responses.create({ ...base, input: 'x', text: { format: { type: 'json_object' } } }),
      badRequest('text.format'));
    await assert.rejects(client.responses.create({ ...base, input: 'x', frobnicate: 1 }), badRequest('frobnicate'));
    await assert.rejects(client.responses.create({ ...base, input: 'x', adapter: 'nope' }), badRequest('adapter'));
  });
});
