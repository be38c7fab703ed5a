// The table of bench/serve.sh, from the JSON files in $OUT
// (<server>-<scenario>.<round>.json, written by bench/serve_client.mjs).
import { percentile, rounds as roundsOf } from './report_common.mjs';

const out = process.env.OUT;
// Every round's result of one server and scenario.
const rounds = (who, scenario) => roundsOf(out, `${who}-${scenario}`);
// One figure of one server: all rounds' samples of `field`, then the percentile p.
function figure(who, scenario, field, p) {
  return percentile(rounds(who, scenario).flatMap((r) => r[field] ?? []).filter((x) => x !== null), p);
}
const samples = (who, scenario, field) => rounds(who, scenario).flatMap((r) => r[field] ?? []).length;

// label, scenario, field, percentile, better, target (ratio, or ms for 'abs'; null: none)
const rows = [
  ['1 client: decode tok/s (median run)', 'single', 'decode_tps', 50, 'higher', 0.97],
  ['1 client: TTFT p50 ms', 'single', 'ttft_ms', 50, 'lower', null],
  ['1 client: TTFT p95 ms', 'single', 'ttft_ms', 95, 'lower', null],
  ['4 clients, short prompts: aggregate tok/s (median round)', 'short4', 'aggregate_tps', 50, 'higher', 1.0],
  ['4 clients, short prompts: TTFT p50 ms', 'short4', 'ttft_ms', 50, 'lower', 1.0],
  ['4 clients, short prompts: TTFT p95 ms', 'short4', 'ttft_ms', 95, 'lower', null],
  ['4 clients, ~300-token prompts: TTFT p50 ms', 'long4', 'ttft_ms', 50, 'lower', 0.5],
  ['4 clients, ~300-token prompts: TTFT p95 ms', 'long4', 'ttft_ms', 95, 'lower', null],
  ['4 clients, ~300-token prompts sharing 250: TTFT p50 ms', 'shared4', 'ttft_ms', 50, 'lower', null],
  ['4 clients, ~300-token prompts sharing 250: TTFT p95 ms', 'shared4', 'ttft_ms', 95, 'lower', null],
  ['/health p50 ms while 8 streams generate', 'health8', 'health_ms', 50, 'lower', null],
  ['/health p95 ms while 8 streams generate', 'health8', 'health_ms', 95, 'lower', null],
  ['/health p99 ms while 8 streams generate', 'health8', 'health_ms', 99, 'abs', 20],
  ['/stats (llama-server: /slots) p50 ms while 8 streams generate', 'health8', 'stats_ms', 50, 'lower', null],
  ['/stats (llama-server: /slots) p95 ms while 8 streams generate', 'health8', 'stats_ms', 95, 'lower', null],
  ['/stats (llama-server: /slots) p99 ms while 8 streams generate', 'health8', 'stats_ms', 99, 'lower', null],
  ['8 streams: aggregate tok/s (median round)', 'health8', 'aggregate_tps', 50, 'higher', null],
];
const fmt = (x) => (x === null || x === undefined ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(2));
const lines = [
  '| metric | graft | llama-server | graft / llama | target | met |',
  '| --- | ---: | ---: | ---: | --- | --- |',
];
for (const [label, s, key, p, dir, target] of rows) {
  const g = figure('graft', s, key, p);
  const l = figure('llama', s, key, p);
  if (g === undefined && l === undefined) continue;
  const ratio = g && l ? g / l : null;
  let goal = '';
  let met = '';
  if (target !== null && dir === 'abs') {
    goal = `graft <= ${target} ms`;
    met = g === undefined ? '?' : g <= target ? 'yes' : 'NO';
  } else if (target !== null) {
    goal = dir === 'higher' ? `>= ${target}x` : `<= ${target}x`;
    met = ratio === null ? '?' : (dir === 'higher' ? ratio >= target : ratio <= target) ? 'yes' : 'NO';
  }
  lines.push(`| ${label} | ${fmt(g)} | ${fmt(l)} | ${ratio === null ? '-' : ratio.toFixed(2)} | ${goal} | ${met} |`);
}
console.log(lines.join('\n'));

const n = (s, key) => `graft ${samples('graft', s, key)}, llama-server ${samples('llama', s, key)}`;
console.log(`\nSamples: TTFT 1 client ${n('single', 'ttft_ms')}; short4 ${n('short4', 'ttft_ms')}; long4 ` +
  `${n('long4', 'ttft_ms')}; shared4 ${n('shared4', 'ttft_ms')}; /health ${n('health8', 'health_ms')}; ` +
  `stats ${n('health8', 'stats_ms')}.`);
for (const s of ['long4', 'shared4', 'short4']) {
  const g = rounds('graft', s), l = rounds('llama', s);
  if (!g.length || !l.length) continue;
  const tokens = g.flatMap((r) => r.prompt_tokens ?? []);
  console.log(`${s} TTFTs ms (all requests): graft ${g.flatMap((r) => r.ttft_ms).map(Math.round).join(' ')} | ` +
    `llama-server ${l.flatMap((r) => r.ttft_ms).map(Math.round).join(' ')}` +
    (tokens.length ? ` | prompt tokens ${Math.min(...tokens)}-${Math.max(...tokens)}` : ''));
}
console.log('\nPercentiles are nearest-rank over every sample of every round (with few samples, p95 is the ' +
  `slowest). Results and server logs: ${out}`);
