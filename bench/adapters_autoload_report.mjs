// The auto-loading table of bench/adapters.sh, from the JSON files in $OUT.
import { percentile, rounds } from './report_common.mjs';

const { OUT: out, STREAMS: streams, TOKENS: tokens, ROTATE_ADAPTERS: n, ROTATE_MAX: max, PER_STREAM: per } =
  process.env;
const f = (x) => (x === undefined || x === null || Number.isNaN(x) ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(2));

function row(label, name) {
  const r = rounds(out, name);
  if (r.length === 0) return `| ${label} | - | - | - | - | - | - |`;
  const ttfts = r.flatMap((x) => x.ttft_ms);
  const best = Math.max(...r.map((x) => x.tps));
  const sum = (k) => r.map((x) => x[k]).join(' / ');
  return `| ${label} | ${f(best)} | ${f(percentile(ttfts, 50))} / ${f(percentile(ttfts, 95))} | ` +
    `${r.map((x) => x.requests).join(' / ')} | ${sum('loads')} | ${sum('evictions')} | ${sum('most_loaded')} |`;
}

console.log([
  '',
  `| ${streams} streams x ${per} requests x ${tokens} tokens, rotating over ${n} F16 adapters by model name | ` +
    'tok/s | TTFT p50 / p95 ms | requests (all succeeded) | loads by requests | unloads to make room | most loaded at once |',
  '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  row(`all ${n} resident (loaded first, no limit)`, 'graft-rotate-resident'),
  row(`--auto-load-adapters --max-loaded-adapters ${max}`, 'graft-rotate-limited'),
].join('\n'));
console.log(`\ntok/s: aggregate completion tokens per second over the whole rotation, the best round; TTFT over ` +
  'every request (a request that waits for its adapter to load, or for room, counts the wait). Loads, unloads ' +
  'and most loaded: per round, from /stats and polling /v1/adapters every 20 ms.');
console.log(`Results and server logs: ${out}`);
