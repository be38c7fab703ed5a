// The client of bench/adapters.sh: the same requests against graft serve and
// llama-server. No packages.
//
//   node bench/adapters_client.mjs --url URL --server graft|llama --mode MODE [--streams 8]
//        [--tokens 64] [--round R] [--adapters a1,a2,...]
//
// Modes:
//   load       graft only: POST /v1/adapters {"id": a} for each of --adapters,
//              one after the other, each timed at the client (the whole HTTP
//              call); prints {loads: [{id, client_ms, server_ms, size_bytes}]}
//   base       STREAMS concurrent streamed completions with no adapter
//   shared     the same, every stream on the first adapter
//   different  the same, stream i on adapter i
//   rotate     graft only: STREAMS streams, each making --per-stream requests
//              one after the other, request j of stream i on adapter
//              (i + j * STREAMS) mod N of the N --adapters, named as the
//              request's "model" (for --auto-load-adapters); also polls
//              /v1/adapters and reports the most adapters loaded at once and
//              /stats' load counts. Every request must succeed.
// A load mode prints {tps, ttft_ms: [...], tokens}: aggregate completion
// tokens per second over the wall time of the STREAMS requests, and each
// request's time to first token. One warm-up request in the same mode runs
// first and is not counted.
//
// How each server is asked: graft names the adapter in the request field
// "adapter"; llama-server, started with every adapter in --lora order, gets
// the per-request field "lora" with an explicit scale for each loaded
// adapter (1 for the chosen one, 0 for the others), since a request without
// it gets every loaded adapter at its start-up scale.
//
// Prompts are fixed: "Note N: " and 16 words drawn by a generator seeded with
// N, where N depends only on the mode, the round and the stream. Both servers
// get exactly the same prompts; two requests of one server run share at most
// their first few tokens ("Note" and N's leading digits), so neither server
// can reuse more of another request's KV than that.

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const url = args.url ?? 'http://127.0.0.1:8080';
const server = args.server;
const mode = args.mode;
const streams = Number(args.streams ?? 8);
const tokens = Number(args.tokens ?? 64);
const round = Number(args.round ?? 1);
const adapters = (args.adapters ?? '').split(',').filter((a) => a);
const perStream = Number(args['per-stream'] ?? 3);
if (server !== 'graft' && server !== 'llama') throw new Error(`--server graft|llama, not ${server}`);

const WORDS = ('the of and to in is was for on that with as by at from his her they this be are an or not had ' +
  'have one all were we when there can more if out so said what up its about into than them only other new ' +
  'some could time these two may first then do any like my now over such our man me even most made after ' +
  'also did many before must through back years where much your way well down should because each just ' +
  'those people how too little state good very make world still own see men work long get here between both ' +
  'life being under never day same another know while last might us great old year off come since against go ' +
  'came right used take three').split(' ');

// mulberry32: a small seeded generator, the same in every run.
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const MODES = ['base', 'shared', 'different', 'rotate'];
function prompt(stream, warmup, k = 0) {
  const n = 100000 * (MODES.indexOf(mode) + 1) + 1000 * round + (warmup ? 999 : stream) + 10000 * k;
  const rand = generator(n);
  const words = Array.from({ length: 16 }, () => WORDS[Math.floor(rand() * WORDS.length)]);
  return `Note ${n}: ${words.join(' ')}`;
}

// The adapter of a stream in this mode (an index into `adapters`), or null.
function adapterOf(stream) {
  if (mode === 'base') return null;
  if (adapters.length === 0) throw new Error(`--mode ${mode} needs --adapters`);
  return mode === 'shared' ? 0 : stream % adapters.length;
}

function body(stream, warmup, k = 0) {
  const b = { model: 'bench', prompt: prompt(stream, warmup, k), max_tokens: warmup ? 4 : tokens, temperature: 0,
              ignore_eos: true, stream: true, stream_options: { include_usage: true } };
  if (mode === 'rotate') {
    b.model = adapters[(stream + k * streams) % adapters.length];
    return JSON.stringify(b);
  }
  const a = adapterOf(stream);
  if (server === 'graft' && a !== null) b.adapter = adapters[a];
  if (server === 'llama' && a !== null) b.lora = adapters.map((_, j) => ({ id: j, scale: j === a ? 1 : 0 }));
  return JSON.stringify(b);
}

async function complete(stream, warmup = false, k = 0) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: body(stream, warmup, k) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = '', first = null, usage = null;
  for await (const part of res.body) {
    buffer += decoder.decode(part, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const json = JSON.parse(line.slice(6));
        if (json.error) throw new Error(`stream error: ${JSON.stringify(json.error)}`);
        if (json.usage) usage = json.usage;
        if (first === null && json.choices?.[0]?.text) first = performance.now();
      }
    }
  }
  if (!usage) throw new Error('the stream ended without usage');
  if (first === null) throw new Error('the stream produced no text');
  return { ttft_ms: first - t0, tokens: usage.completion_tokens };
}

async function load() {
  await fetch(`${url}/health`).then((r) => r.text());  // fetch's own first-call set-up, not timed
  const loads = [];
  for (const id of adapters) {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/adapters`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id }) });
    const json = await res.json();
    const clientMs = performance.now() - t0;
    if (res.status !== 200) throw new Error(`loading ${id}: HTTP ${res.status}: ${JSON.stringify(json)}`);
    loads.push({ id, client_ms: clientMs, server_ms: json.load_ms, size_bytes: json.size_bytes });
  }
  return { loads };
}

async function run() {
  await complete(0, true);
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: streams }, (_, i) => complete(i)));
  const seconds = (performance.now() - t0) / 1000;
  const total = results.reduce((s, r) => s + r.tokens, 0);
  if (total !== streams * tokens) throw new Error(`${total} tokens generated, ${streams * tokens} asked for`);
  return { tps: total / seconds, ttft_ms: results.map((r) => r.ttft_ms), tokens: total };
}

async function stats() {
  return (await (await fetch(`${url}/stats`)).json()).adapters;
}

async function rotate() {
  if (server !== 'graft') throw new Error('--mode rotate is graft only');
  if (adapters.length === 0) throw new Error('--mode rotate needs --adapters');
  const before = await stats();
  let polling = true, mostLoaded = 0;
  const poll = (async () => {
    while (polling) {
      const loaded = (await (await fetch(`${url}/v1/adapters`)).json()).data.length;
      mostLoaded = Math.max(mostLoaded, loaded);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: streams }, async (_, i) => {
    const out = [];
    for (let k = 0; k < perStream; ++k) out.push(await complete(i, false, k));
    return out;
  }));
  const seconds = (performance.now() - t0) / 1000;
  polling = false;
  await poll;
  const after = await stats();
  const flat = results.flat();
  const total = flat.reduce((s, r) => s + r.tokens, 0);
  if (total !== streams * perStream * tokens) throw new Error(`${total} tokens generated, ${streams * perStream * tokens} asked for`);
  return { tps: total / seconds, ttft_ms: flat.map((r) => r.ttft_ms), tokens: total, requests: flat.length,
           loads: after.auto_load.loads - before.auto_load.loads,
           evictions: after.auto_load.evictions - before.auto_load.evictions,
           most_loaded: mostLoaded, max_loaded: after.auto_load.max_loaded };
}

const out = mode === 'load' ? await load() : mode === 'rotate' ? await rotate()
  : MODES.includes(mode) ? await run() : null;
if (!out) throw new Error(`unknown --mode ${mode}`);
console.log(JSON.stringify({ server, mode, round, ...out }));
