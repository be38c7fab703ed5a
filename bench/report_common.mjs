// What the report scripts of bench/ share: reading one measurement's rounds
// and taking percentiles of their samples.
import { readdirSync, readFileSync } from 'node:fs';

// Every round's result of one measurement, in round order: the JSON files
// `${name}.1.json`, `${name}.2.json`, ... in the folder `out`.
export function rounds(out, name) {
  const prefix = `${name}.`;
  return readdirSync(out).filter((f) => f.startsWith(prefix) && /^\d+\.json$/.test(f.slice(prefix.length)))
    .sort((a, b) => parseInt(a.slice(prefix.length), 10) - parseInt(b.slice(prefix.length), 10))
    .map((f) => JSON.parse(readFileSync(`${out}/${f}`, 'utf8')));
}

// Nearest-rank percentile: the smallest sample with at least p% of samples at or below it.
export function percentile(values, p) {
  if (!values.length) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)];
}
