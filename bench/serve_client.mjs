// A small concurrent streaming client for bench/serve.sh: the same requests
// against any OpenAI-compatible server (graft, llama-server). No packages.
//
//   node bench/serve_client.mjs --url http://127.0.0.1:8080 --scenario single [--round 1]
//        [--stats-path /stats]
//
// Scenarios:
//   single   1 stream, short prompt, 128 tokens, 3 runs: decode tok/s, TTFT
//   short4   4 concurrent streams, short prompts, 128 tokens: aggregate tok/s, TTFT
//   long4    4 concurrent streams, ~300-token prompts, 32 tokens: TTFT
//   shared4  like long4, but the prompts share a ~250-token preamble
//   health8  8 concurrent streams, 128 tokens; /health and the stats route
//            (--stats-path: graft's /stats, llama-server's /slots) each
//            polled every 25 ms on a kept-alive connection of its own
// Prints one JSON object with every sample (the caller takes percentiles).
//
// Prompts are fixed: words from a seeded generator, each prompt starting with
// "Note N:" where N depends only on the scenario, the round (--round) and the
// request, so every server gets exactly the same prompts, and no request can
// reuse more than the first few tokens ("Note" and N's leading digits) of
// another's KV unless the scenario says so.
// --gen-tokens N makes every scenario generate N tokens (default: 128, and 32
// for long4 and shared4), for a quick run.
import { Worker } from 'node:worker_threads';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const URL_BASE = args.url ?? 'http://127.0.0.1:8080';
const SCENARIO = args.scenario ?? 'single';
const ROUNDS = Number(args.rounds ?? 1);
const ROUND = Number(args.round ?? 1);
const STATS_PATH = args['stats-path'] ?? '/stats';
const GEN_TOKENS = args['gen-tokens'] ? Number(args['gen-tokens']) : null;
const gen = (n) => GEN_TOKENS ?? n;
const SCENARIOS = ['single', 'short4', 'long4', 'shared4', 'health8'];
if (!SCENARIOS.includes(SCENARIO)) throw new Error(`unknown scenario ${SCENARIO}`);

const WORDS = ('the of and to in is was for on that with as by at from his her they this be are an or not had ' +
  'have one all were we when there can more if out so said what up its about into than them only other new ' +
  'some could time these two may first then do any like my now over such our man me even most made after ' +
  'also did many before must through back years where much your way well down should because each just ' +
  'those people how too little state good very make world still own see men work long get here between both ' +
  'life being under never day same another know while last might us great old year off come since against go ' +
  'came right used take three').split(' ');

let seed = 12345;
function rand() {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
}
function words(n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(WORDS[Math.floor(rand() * WORDS.length)]);
  return out.join(' ');
}
let serial = 100000 * (SCENARIOS.indexOf(SCENARIO) + 1) + 1000 * ROUND;
const unique = () => `Note ${serial++}:`;
const PREAMBLE = words(250);

async function stream(prompt, maxTokens) {
  const t0 = performance.now();
  const res = await fetch(`${URL_BASE}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'bench', prompt, max_tokens: maxTokens, temperature: 0, stream: true, ignore_eos: true,
      stream_options: { include_usage: true },
    }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = '';
  let first = null;
  let last = null;
  let chunks = 0;
  let usage = null;
  for await (const part of res.body) {
    buffer += decoder.decode(part, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') continue;
        const json = JSON.parse(data);
        if (json.usage) usage = json.usage;
        const text = json.choices?.[0]?.text;
        if (text) {
          const now = performance.now();
          if (first === null) first = now;
          last = now;
          chunks++;
        }
      }
    }
  }
  const t1 = performance.now();
  const tokens = usage?.completion_tokens ?? maxTokens;
  return {
    ttft_ms: first - t0,
    total_ms: t1 - t0,
    tokens,
    prompt_tokens: usage?.prompt_tokens ?? null,
    decode_tps: last > first ? (tokens - 1) / ((last - first) / 1000) : null,
    chunks,
  };
}

async function concurrent(prompts, maxTokens) {
  const t0 = performance.now();
  const results = await Promise.all(prompts.map((p) => stream(p, maxTokens)));
  const wall = (performance.now() - t0) / 1000;
  const tokens = results.reduce((s, r) => s + r.tokens, 0);
  return { results, wall, aggregate_tps: tokens / wall };
}

// /health and the stats route are polled from worker threads, each over a
// kept-alive socket with a hand-written request: fetch() adds about a
// millisecond of its own per call and tens of milliseconds on its tail when
// the machine is busy, which would be measured as the server's latency. A
// server that closes the connection (llama-server does every 100 requests)
// gets a new one, and that request's time includes connecting.
async function poller(path) {
  const worker = new Worker(`
    const { parentPort } = require('node:worker_threads');
    const net = require('node:net');
    const url = new URL(process.argv[2]);
    const path = process.argv[3];
    const request = 'GET ' + path + ' HTTP/1.1\\r\\nHost: ' + url.host + '\\r\\n\\r\\n';
    let stop = false;
    parentPort.on('message', () => { stop = true; });
    let socket = null;
    let buffer = Buffer.alloc(0);
    let done = null;
    function onData(data) {
      buffer = Buffer.concat([buffer, data]);
      const head = buffer.indexOf('\\r\\n\\r\\n');
      if (head < 0) return;
      const length = /content-length:\\s*(\\d+)/i.exec(buffer.subarray(0, head).toString());
      if (!length) throw new Error(path + ' answered without a Content-Length');
      const end = head + 4 + Number(length[1]);
      if (buffer.length < end) return;
      if (!buffer.subarray(0, 12).toString().endsWith('200')) throw new Error(path + ': ' + buffer.toString());
      buffer = buffer.subarray(end);
      const resolve = done;
      done = null;
      resolve();
    }
    async function connected() {
      if (socket) return socket;
      const s = net.connect(Number(url.port), url.hostname);
      s.setNoDelay(true);
      await new Promise((resolve, reject) => { s.once('connect', resolve); s.once('error', reject); });
      s.on('data', onData);
      s.on('close', () => {
        if (socket === s) socket = null;
        if (done) connected().then((again) => again.write(request));  // closed before answering: ask again
      });
      buffer = Buffer.alloc(0);
      return (socket = s);
    }
    (async () => {
      const lat = [];
      while (!stop) {
        const t0 = performance.now();
        const s = await connected();
        await new Promise((resolve) => { done = resolve; s.write(request); });
        lat.push(performance.now() - t0);
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      socket?.destroy();
      parentPort.postMessage(lat);
    })();
  `, { eval: true, argv: [URL_BASE, path] });
  return {
    stop: () => new Promise((resolve) => {
      worker.once('message', (lat) => { worker.terminate(); resolve(lat); });
      worker.postMessage('stop');
    }),
  };
}

const round2 = (values) => values.map((v) => Math.round(v * 100) / 100);

async function main() {
  await stream(`${unique()} warm up`, 4);  // load, first graphs
  const out = { scenario: SCENARIO, round: ROUND };
  if (SCENARIO === 'single') {
    const runs = [];
    for (let i = 0; i < 3 * ROUNDS; i++) runs.push(await stream(`${unique()} ${words(16)}`, gen(128)));
    out.decode_tps = runs.map((r) => r.decode_tps);
    out.ttft_ms = round2(runs.map((r) => r.ttft_ms));
  } else if (SCENARIO === 'short4' || SCENARIO === 'long4' || SCENARIO === 'shared4') {
    const maxTokens = gen(SCENARIO === 'short4' ? 128 : 32);
    const ttfts = [];
    const aggregates = [];
    const promptTokens = [];
    for (let round = 0; round < ROUNDS; round++) {
      const prompts = [0, 1, 2, 3].map(() => {
        if (SCENARIO === 'short4') return `${unique()} ${words(16)}`;
        if (SCENARIO === 'long4') return `${unique()} ${words(296)}`;
        return `${PREAMBLE} ${unique()} ${words(46)}`;
      });
      const r = await concurrent(prompts, maxTokens);
      ttfts.push(...r.results.map((x) => x.ttft_ms));
      promptTokens.push(...r.results.map((x) => x.prompt_tokens));
      aggregates.push(r.aggregate_tps);
    }
    out.ttft_ms = round2(ttfts);
    out.aggregate_tps = aggregates;
    out.prompt_tokens = promptTokens.filter((x) => x !== null);
  } else if (SCENARIO === 'health8') {
    const health = await poller('/health');
    const stats = await poller(STATS_PATH);
    const prompts = Array.from({ length: 8 }, () => `${unique()} ${words(16)}`);
    const r = await concurrent(prompts, gen(128));
    out.health_ms = round2(await health.stop());
    out.stats_ms = round2(await stats.stop());
    out.stats_path = STATS_PATH;
    out.aggregate_tps = [r.aggregate_tps];
  }
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
