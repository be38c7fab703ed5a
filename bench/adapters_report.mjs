// The tables of bench/adapters.sh, from the JSON files in $OUT.
import { percentile, rounds } from './report_common.mjs';

const { OUT: out, RANK: rank, STREAMS: streams, TOKENS: tokens } = process.env;
const dtypes = process.env.DTYPES.split(/\s+/).filter((d) => d);

// Every round's file of one measurement ("graft-shared" -> graft-shared.1.json, ...).
const runs = (name) => rounds(out, name);
const f = (x) => (x === undefined || x === null || Number.isNaN(x) ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(2));

// {tps: best round, p50, p95: TTFT over every request, n: requests} or null.
function serving(name) {
  const r = runs(name);
  if (r.length === 0) return null;
  const ttfts = r.flatMap((x) => x.ttft_ms);
  return { tps: Math.max(...r.map((x) => x.tps)), all: r.map((x) => x.tps), p50: percentile(ttfts, 50),
           p95: percentile(ttfts, 95), n: ttfts.length };
}
const ttft = (s) => (s ? `${f(s.p50)} / ${f(s.p95)}` : '-');
const ratio = (a, b) => (a && b ? (a.tps / b.tps).toFixed(2) : '-');

const D = (d) => d.toUpperCase();
const g = { base: serving('graft-base-f16'), shared: serving('graft-shared') };
const l = { base: serving('llama-base'), shared: serving('llama-shared'), different: serving('llama-different-f16') };
for (const d of dtypes) g[d] = serving(`graft-different-${d}`);

const lines = [
  `| ${streams} streams x ${tokens} tokens, rank-${rank} adapters | graft tok/s | graft TTFT p50 / p95 ms | ` +
    'llama-server tok/s | llama-server TTFT p50 / p95 ms | graft / llama-server tok/s |',
  '| --- | ---: | ---: | ---: | ---: | ---: |',
  `| base model (graft: no adapter loaded yet; llama-server: started without --lora) | ${f(g.base?.tps)} | ` +
    `${ttft(g.base)} | ${f(l.base?.tps)} | ${ttft(l.base)} | ${ratio(g.base, l.base)} |`,
  `| one shared F16 adapter, all ${streams} streams | ${f(g.shared?.tps)} | ${ttft(g.shared)} | ` +
    `${f(l.shared?.tps)} | ${ttft(l.shared)} | ${ratio(g.shared, l.shared)} |`,
];
for (const d of dtypes) {
  const label = d === 'f16'
    ? `${streams} different F16 adapters (llama-server: serialized by design, it batches only equal adapter sets)`
    : `${streams} different ${D(d)} adapters (graft only)`;
  const ls = d === 'f16' ? l.different : null;
  lines.push(`| ${label} | ${f(g[d]?.tps)} | ${ttft(g[d])} | ${f(ls?.tps)} | ${ttft(ls)} | ${ratio(g[d], ls)} |`);
}

// Loading and memory, per dtype.
const mib = (kib) => kib / 1024;
function memory(name) {
  const r = runs(name);
  if (r.length === 0) return null;
  const growth = r.map((x) => mib(x.after_kib - x.before_kib));
  return { min: Math.min(...growth), max: Math.max(...growth) };
}
const range = (m) => (m ? (Math.abs(m.max - m.min) < 0.5 ? f(m.min) : `${f(m.min)} - ${f(m.max)}`) : '-');
lines.push('', `| ${streams} adapters of | load ms at the client, p50 / max of N | graft's own load_ms, p50 | ` +
  'files MiB | resident memory growth MiB, graft | llama-server |', '| --- | ---: | ---: | ---: | ---: | ---: |');
const loadStats = {};
for (const d of dtypes) {
  const loads = runs(`graft-load-${d}`).flatMap((x) => x.loads);
  if (loads.length === 0) continue;
  const client = loads.map((x) => x.client_ms);
  loadStats[d] = { p50: percentile(client, 50), max: Math.max(...client) };
  const files = loads.filter((x, i) => loads.findIndex((y) => y.id === x.id) === i)
    .reduce((s, x) => s + x.size_bytes, 0) / 2 ** 20;
  lines.push(`| ${D(d)} | ${f(loadStats[d].p50)} / ${f(loadStats[d].max)} of ${client.length} | ` +
    `${f(percentile(loads.map((x) => x.server_ms), 50))} | ${f(files)} | ${range(memory(`graft-rss-${d}`))} | ` +
    `${d === 'f16' ? range(memory('llama-rss-f16')) : '-'} |`);
}

// Targets and ratios.
const yes = (ok) => (ok ? 'yes' : 'NO');
lines.push('', '| check | value | target | met |', '| --- | ---: | --- | --- |');
if (g.f16 && g.base) {
  const r = g.f16.tps / g.base.tps;
  lines.push(`| graft: ${streams} different F16 adapters / base tok/s | ${r.toFixed(2)} | >= 0.8 | ${yes(r >= 0.8)} |`);
}
if (g.f16 && l.different) {
  const r = g.f16.tps / l.different.tps;
  lines.push(`| ${streams} different F16 adapters: graft / llama-server tok/s | ${r.toFixed(2)} | > 1 | ${yes(r > 1)} |`);
}
if (loadStats.f16) {
  lines.push(`| graft: loading an F16 adapter, max ms at the client | ${f(loadStats.f16.max)} | < 100 | ` +
    `${yes(loadStats.f16.max < 100)} |`);
}
for (const d of dtypes.filter((x) => x !== 'f16')) {
  if (g[d] && g.f16) lines.push(`| graft: ${D(d)} / F16 adapters tok/s | ${(g[d].tps / g.f16.tps).toFixed(2)} | | |`);
}
if (l.different && l.base) {
  lines.push(`| llama-server: different adapters / base tok/s | ${(l.different.tps / l.base.tps).toFixed(2)} | | |`);
}
if (l.shared && l.base) {
  lines.push(`| llama-server: one shared adapter / base tok/s | ${(l.shared.tps / l.base.tps).toFixed(2)} | | |`);
}
console.log(lines.join('\n'));

const noise = dtypes.filter((d) => d !== 'f16').map((d) => [d, serving(`graft-base-${d}`)]).filter(([, s]) => s);
console.log(`\ntok/s: aggregate completion tokens per second of the ${streams} concurrent requests, the best of ` +
  `${g.base?.all.length ?? 0} rounds (each round: ${[g.base, l.base, g.f16, l.different].map((s) => s?.all.map(f).join(' ') ?? '-').join(' | ')} for graft base | llama base | graft F16 | llama F16).`);
if (noise.length) {
  console.log(`graft base on the ${noise.map(([d]) => D(d)).join(' and ')} servers (before loading, not in the ` +
    `table; shows the noise): ${noise.map(([d, s]) => `${D(d)} ${s.all.map(f).join(' ')}`).join(', ')} tok/s.`);
}
console.log(`TTFT: nearest-rank p50 and p95 over all ${g.base?.n ?? 0} requests of a row (with few requests, p95 ` +
  'is the slowest).\nMemory: resident memory after the adapter runs minus after the base run (graft: one process, ' +
  'before and after loading; llama-server: the server started with --lora minus the one without). Load: the ' +
  'whole POST /v1/adapters call at the client; llama-server loads adapters only at start-up.');
console.log(`Results and server logs: ${out}`);
