// The table of bench/serve_while_training.sh, from the JSON files in $OUT
// (<setup>-<scenario>.<round>.json, written by bench/serve_client.mjs).
import { percentile, rounds as roundsOf } from './report_common.mjs';

const out = process.env.OUT;
const setups = (process.env.SETUPS ?? 'idle train train-n0').split(/\s+/).filter(Boolean);
const rounds = (setup, scenario) => roundsOf(out, `${setup}-${scenario}`);
const figure = (setup, scenario, field, p) =>
  percentile(rounds(setup, scenario).flatMap((r) => r[field] ?? []).filter((x) => x !== null), p);

const describe = {
  idle: 'no job',
  train: 'job at --train-nice 19',
  'train-n0': 'job at --train-nice 0',
};
// label, scenario, field, percentile, target: [kind, value] against idle ('ratio') or absolute ms ('abs')
const rows = [
  ['4 clients: aggregate tok/s (median round)', 'short4', 'aggregate_tps', 50, null],
  ['4 clients: TTFT p50 ms', 'short4', 'ttft_ms', 50, ['ratio', 2]],
  ['4 clients: TTFT p95 ms', 'short4', 'ttft_ms', 95, null],
  ['/health p50 ms while 8 streams generate', 'health8', 'health_ms', 50, null],
  ['/health p99 ms while 8 streams generate', 'health8', 'health_ms', 99, ['abs', 20]],
  ['8 streams: aggregate tok/s (median round)', 'health8', 'aggregate_tps', 50, null],
];
const fmt = (x) => (x === undefined ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(2));
const lines = [
  `| metric | ${setups.map((s) => describe[s] ?? s).join(' | ')} | target |`,
  `| --- | ${setups.map(() => '---:').join(' | ')} | --- |`,
];
for (const [label, scenario, field, p, target] of rows) {
  const values = setups.map((s) => figure(s, scenario, field, p));
  let goal = '';
  if (target?.[0] === 'ratio') {
    const idle = figure('idle', scenario, field, p);
    const trained = figure('train', scenario, field, p);
    goal = `job <= ${target[1]}x no job: ${idle && trained ? `${(trained / idle).toFixed(2)}x, ${trained <= target[1] * idle ? 'met' : 'NOT met'}` : '?'}`;
  } else if (target?.[0] === 'abs') {
    const trained = figure('train', scenario, field, p);
    goal = `<= ${target[1]} ms with a job: ${trained === undefined ? '?' : trained <= target[1] ? 'met' : 'NOT met'}`;
  }
  lines.push(`| ${label} | ${values.map(fmt).join(' | ')} | ${goal} |`);
}
console.log(lines.join('\n'));
console.log('\nTTFT: time from sending a streaming request to its first token; tok/s: generated tokens of all');
console.log('clients over the wall time of the round; /health: round trip on a kept-alive connection every 25 ms.');
