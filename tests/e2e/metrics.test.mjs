// GET /metrics parses as Prometheus text (with a prom2json-style parser) and
// its counters move as requests run; GET /fit answers for the served model.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { GRAFT_BIN, WORK_DIR, startServer, testModel, getJson, postRaw } from './graft.mjs';

const XDG = path.join(WORK_DIR, 'metrics-xdg');
process.env.XDG_DATA_HOME = XDG;
process.env.HF_HOME = path.join(WORK_DIR, 'metrics-hf');

async function scrape(server) {
  const res = await fetch(server.baseURL + '/metrics');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const families = parsePrometheusTextFormat(await res.text());
  const byName = Object.fromEntries(families.map((f) => [f.name, f]));
  // One value, by name and labels (0 when the sample is not there yet).
  const value = (name, labels = {}) => {
    const f = byName[name];
    if (!f) return 0;
    const m = f.metrics.find((s) => Object.entries(labels).every(([k, v]) => s.labels?.[k] === v));
    if (!m) return 0;
    return Number(m.value ?? m.count);
  };
  return { byName, value };
}

const complete = (server, extra = {}) => postRaw(server, '/v1/completions', JSON.stringify({
  prompt: 'The quick brown fox jumps over the lazy dog, again and again', max_tokens: 6, temperature: 0, ignore_eos: true, ...extra,
}));

describe('/metrics', () => {
  let server;
  before(async () => {
    rmSync(XDG, { recursive: true, force: true });
    mkdirSync(path.join(XDG, 'graft', 'adapters'), { recursive: true });
    execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--peft',
      path.join(XDG, 'graft', 'adapters', 'scribe'), '--rank', '4'], { stdio: 'pipe' });
    server = await startServer();
  });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  it('names its families as Prometheus asks, with their types', async () => {
    assert.equal((await fetch(server.baseURL + '/health')).status, 200);
    const { byName } = await scrape(server);
    const types = {
      graft_http_requests_total: 'COUNTER', graft_prompt_tokens_total: 'COUNTER',
      graft_generation_tokens_total: 'COUNTER', graft_requests_total: 'COUNTER',
      graft_time_to_first_token_seconds: 'HISTOGRAM', graft_inter_token_latency_seconds: 'HISTOGRAM',
      graft_requests_running: 'GAUGE', graft_requests_waiting: 'GAUGE', graft_kv_cells_used: 'GAUGE',
      graft_kv_cells_reserved: 'GAUGE', graft_kv_cells_budget: 'GAUGE', graft_prefix_cache_hit_tokens_total: 'COUNTER',
      graft_adapters_loaded: 'GAUGE', process_resident_memory_bytes: 'GAUGE',
    };
    for (const [name, type] of Object.entries(types)) {
      assert.ok(byName[name], `${name} is missing`);
      assert.equal(byName[name].type, type, name);
      assert.ok(byName[name].help.length > 0, name);
    }
    assert.equal(Number(byName.graft_kv_cells_budget.metrics[0].value), 4 * 256);
    assert.ok(Number(byName.process_resident_memory_bytes.metrics[0].value) > 1 << 20);
    const buckets = byName.graft_time_to_first_token_seconds.metrics[0].buckets;
    assert.ok('+Inf' in buckets && '0.1' in buckets, JSON.stringify(buckets));
  });

  it('counts requests by route and status, tokens and latencies as they run', async () => {
    const a = await scrape(server);
    const route = { route: '/v1/completions', method: 'POST' };
    const whole = await complete(server);
    assert.equal(whole.status, 200, whole.text);
    const streamed = await complete(server, { stream: true });
    assert.equal(streamed.status, 200);
    assert.equal((await complete(server, { max_tokens: 'many' })).status, 400);
    assert.equal((await fetch(server.baseURL + '/no/such/route')).status, 404);
    const b = await scrape(server);
    assert.equal(b.value('graft_http_requests_total', { ...route, status: '200' }) -
                 a.value('graft_http_requests_total', { ...route, status: '200' }), 2);
    assert.equal(b.value('graft_http_requests_total', { ...route, status: '400' }) -
                 a.value('graft_http_requests_total', { ...route, status: '400' }), 1);
    assert.equal(b.value('graft_http_requests_total', { route: 'unmatched', method: 'GET', status: '404' }) -
                 a.value('graft_http_requests_total', { route: 'unmatched', method: 'GET', status: '404' }), 1);
    // The scrape itself is counted too.
    assert.ok(b.value('graft_http_requests_total', { route: '/metrics', method: 'GET', status: '200' }) >= 2);
    const usage = whole.json.usage;
    assert.equal(b.value('graft_generation_tokens_total') - a.value('graft_generation_tokens_total'), 12);
    assert.equal(b.value('graft_prompt_tokens_total') - a.value('graft_prompt_tokens_total'), 2 * usage.prompt_tokens);
    assert.equal(b.value('graft_requests_total', { outcome: 'finished' }) -
                 a.value('graft_requests_total', { outcome: 'finished' }), 2);
    assert.equal(b.value('graft_time_to_first_token_seconds') - a.value('graft_time_to_first_token_seconds'), 2);
    assert.equal(b.value('graft_inter_token_latency_seconds') - a.value('graft_inter_token_latency_seconds'), 10);
    const ttft = b.byName.graft_time_to_first_token_seconds.metrics[0];
    assert.ok(Number(ttft.sum) > 0);
    assert.equal(Number(ttft.buckets['+Inf']), Number(ttft.count));
    // The same prompt again: its prefix comes from the cache.
    assert.ok(b.value('graft_prefix_cache_hit_tokens_total') > a.value('graft_prefix_cache_hit_tokens_total'));
    // The last event reaches the client a moment before the engine closes the
    // step that sent it, so "running" may still count it for that moment.
    let running = b.value('graft_requests_running');
    for (let i = 0; i < 50 && running !== 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
      running = (await scrape(server)).value('graft_requests_running');
    }
    assert.equal(running, 0);
  });

  it('counts adapter loads, uses and unloads by adapter', async () => {
    const load = await postRaw(server, '/v1/adapters', JSON.stringify({ id: 'scribe' }));
    assert.equal(load.status, 200, load.text);
    const loaded = await scrape(server);
    assert.equal(loaded.value('graft_adapters_loaded'), 1);
    assert.equal((await complete(server, { adapter: 'scribe' })).status, 200);
    assert.equal((await complete(server, { adapter: 'scribe' })).status, 200);
    const res = await fetch(server.baseURL + '/v1/adapters/scribe', { method: 'DELETE' });
    assert.equal(res.status, 200);
    const m = await scrape(server);
    assert.equal(m.value('graft_adapter_loads_total', { adapter: 'scribe' }), 1);
    assert.equal(m.value('graft_adapter_requests_total', { adapter: 'scribe' }), 2);
    assert.equal(m.value('graft_adapter_unloads_total', { adapter: 'scribe' }), 1);
    assert.equal(m.value('graft_adapters_loaded'), 0);
  });
});

describe('GET /fit', () => {
  let server;
  before(async () => { server = await startServer(); });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  it('answers for the served model and its settings', async () => {
    const { status, body } = await getJson(server, '/fit');
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.fits, true);
    assert.equal(body.settings.ctx, 256);
    assert.equal(body.settings.parallel, 4);
    assert.equal(body.settings.kv_budget_tokens, 1024);
    assert.equal(body.model.arch, 'qwen3');
    assert.equal(body.model.quantization, 'F16');
    const m = body.memory;
    assert.equal(m.total, m.weights_mapped + m.weights_repacked + m.weights_copied + m.kv_cache + m.compute + m.adapters + m.requests +
                 m.tokenizer + m.fixed);
    assert.equal(body.machines.length, 6);
    assert.deepEqual(body.machines.map((r) => r.memory_gib), [8, 16, 24, 32, 64, 128]);
    assert.ok(body.max_safe_context >= 256);
    assert.ok(body.usable.bytes > 0);
  });

  it('takes other settings as query parameters', async () => {
    const base = (await getJson(server, '/fit')).body;
    const { status, body } = await getJson(server, '/fit?ctx=2048&parallel=2&kv_type=q8_0&adapters=2&adapter_rank=8');
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.settings.ctx, 2048);
    assert.equal(body.settings.parallel, 2);
    assert.equal(body.settings.kv_type, 'q8_0');
    assert.equal(body.settings.kv_budget_tokens, 4096);
    assert.ok(body.memory.adapters > 0);
    assert.ok(body.memory.kv_cache > base.memory.kv_cache);
    const budget = await getJson(server, '/fit?kv_budget=512');
    assert.equal(budget.body.settings.kv_budget_tokens, 512);
  });

  it('refuses unknown and bad parameters, naming them', async () => {
    for (const [query, param] of [['bogus=1', 'bogus'], ['ctx=abc', 'ctx'], ['parallel=0', 'parallel'],
      ['kv_type=q5_1', 'kv_type'], ['kv_budget=lots', 'kv_budget'], ['kv_budget=16&ctx=256', 'kv_budget']]) {
      const { status, body } = await getJson(server, `/fit?${query}`);
      assert.equal(status, 400, query);
      assert.equal(body.error.param, param, query);
    }
  });
});

describe('graft serve plans memory with the fit', () => {
  const model = () => testModel();
  const fit = (args) => {
    const r = spawnSync(GRAFT_BIN, ['fit', model(), '--threads', '2', '--json', '--no-machines', '--no-probe', ...args],
      { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout);
  };

  it('refuses settings that cannot fit, with the numbers graft fit gives', () => {
    const need = fit(['--ctx', '4096', '--parallel', '16', '--memory', '100GiB']).memory.total;
    const memory = `${need - (1 << 20)}B`;
    const report = fit(['--ctx', '4096', '--parallel', '16', '--memory', memory]);
    assert.equal(report.fits, false);
    assert.match(report.reason, /but only .* is usable/);
    assert.ok(report.max_safe_context > 0 && report.max_safe_context < 4096);
    assert.equal(report.max_parallel, 15);
    const serve = spawnSync(GRAFT_BIN, ['serve', model(), '--ctx', '4096', '--parallel', '16', '--memory', memory,
      '--threads', '2', '--port', '0'], { encoding: 'utf8', timeout: 60000 });
    assert.equal(serve.status, 1, serve.stderr);
    assert.match(serve.stderr, /does not fit in memory with --ctx 4096 --parallel 16: it needs .* but only .* is usable/);
    // The same numbers (a process's own memory differs by a few pages: one KV block at most).
    const ctx = Number(serve.stderr.match(/The largest context that fits with --parallel 16 is (\d+) tokens/)[1]);
    assert.ok(Math.abs(ctx - report.max_safe_context) <= 256, `${ctx} vs ${report.max_safe_context}`);
    const parallel = Number(serve.stderr.match(/at most (\d+) requests fit \(--parallel \d+\)/)[1]);
    assert.equal(parallel, report.max_parallel);
  });

  it('runs as many requests as fit when --parallel is not given', async () => {
    const two = fit(['--ctx', '4096', '--parallel', '2', '--memory', '100GiB']).memory.total;
    const three = fit(['--ctx', '4096', '--parallel', '3', '--memory', '100GiB']).memory.total;
    const memory = `${Math.round((two + three) / 2)}B`;
    const child = spawn(GRAFT_BIN, ['serve', model(), '--ctx', '4096', '--memory', memory, '--threads', '2',
      '--port', '0'], { env: { ...process.env, OMP_WAIT_POLICY: 'passive' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    await new Promise((resolve, reject) => {
      child.stderr.on('data', (d) => { log += d; if (/serving '/.test(log)) resolve(); });
      child.on('exit', (code) => reject(new Error(`graft serve exited with ${code}:\n${log}`)));
    });
    child.kill('SIGTERM');
    await new Promise((resolve) => child.on('exit', resolve));
    assert.match(log, /4 requests at once do not fit in memory here: using 2/);
    assert.match(log, /context 4096 tokens, 2 requests at once, KV budget 8192 tokens/);
  });
});
