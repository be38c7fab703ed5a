// Status: the served model (context, KV budget, parallel requests), graft's
// version, and live /stats as small charts over the last few minutes.
import { useEffect, useState } from 'preact/hooks';
import { api, formatBytes } from '../api.js';
import { useApp } from '../app.jsx';
import { Chart } from '../components/Chart.jsx';

const POLL_MS = 1000;
const KEEP = 180;  // samples (3 minutes)

const SERIES = {
  requests: [
    { label: 'running', color: '#2563eb' },
    { label: 'waiting', color: '#d97706' },
  ],
  kv: [
    { label: 'KV used %', color: '#7c3aed' },
    { label: 'KV reserved %', color: '#a3a3a3' },
  ],
  speed: [{ label: 'tokens/s', color: '#059669' }],
  cache: [{ label: 'prefix-cache hit tokens/s', color: '#db2777' }],
};

function pct(part, whole) {
  return whole > 0 ? (100 * part) / whole : 0;
}

function Fact({ label, children, testId }) {
  return (
    <div class="fact">
      <div class="muted small">{label}</div>
      <div class="fact-value" data-testid={testId}>
        {children}
      </div>
    </div>
  );
}

export function StatusPage() {
  const { model } = useApp();
  const [health, setHealth] = useState(null);
  const [stats, setStats] = useState(null);
  const [error, setError] = useState('');
  const [history, setHistory] = useState([]);

  useEffect(() => {
    let stopped = false;
    let timer = 0;
    let lastHits = null;
    const poll = async () => {
      try {
        const [h, s] = await Promise.all([api.get('/health'), api.get('/stats')]);
        if (stopped) return;
        setHealth(h);
        setStats(s);
        setError('');
        const now = Date.now() / 1000;
        const hits = s.prefix_cache.hit_tokens;
        const hitRate = lastHits ? Math.max(0, (hits - lastHits.hits) / Math.max(0.001, now - lastHits.t)) : 0;
        lastHits = { hits, t: now };
        const b = s.batch;
        setHistory((old) =>
          [
            ...old,
            {
              t: now,
              running: s.requests.running,
              waiting: s.requests.waiting,
              kvUsed: pct(b.kv_tokens, b.kv_budget_tokens),
              kvReserved: pct(b.kv_reserved_tokens, b.kv_budget_tokens),
              tps: s.tokens_per_second,
              hitRate,
            },
          ].slice(-KEEP),
        );
      } catch (err) {
        if (!stopped) setError(err.describe ? err.describe() : err.message);
      }
      if (!stopped) timer = setTimeout(poll, document.hidden ? 5 * POLL_MS : POLL_MS);
    };
    poll();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, []);

  const col = (k) => history.map((p) => p[k]);
  const ts = col('t');
  const meta = model?.meta ?? {};
  const b = stats?.batch;
  return (
    <div class="status-page pad">
      <h2>Status</h2>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <div class="facts">
        <Fact label="model">{model?.id ?? '–'}</Fact>
        <Fact label="graft">{health?.version ?? '–'}</Fact>
        <Fact label="context">{meta.n_ctx ? `${meta.n_ctx} tokens` : '–'}</Fact>
        <Fact label="requests at once">{meta.parallel ?? '–'}</Fact>
        <Fact label="KV budget">{b ? `${b.kv_budget_tokens} tokens (${formatBytes(b.kv_budget_bytes)})` : '–'}</Fact>
        <Fact label="default adapter">{health ? health.adapter || 'none' : '–'}</Fact>
        <Fact label="adapters loaded">{health?.adapters_loaded ?? '–'}</Fact>
        <Fact label="uptime">{health ? `${Math.round(health.uptime_s)} s` : '–'}</Fact>
      </div>
      {stats && (
        <div class="facts" data-testid="live-stats">
          <Fact label="running / waiting">
            {stats.requests.running} / {stats.requests.waiting}
          </Fact>
          <Fact label="served / failed / cancelled" testId="served">
            {stats.requests.served} / {stats.requests.failed} / {stats.requests.cancelled}
          </Fact>
          <Fact label="KV in use">
            {b.kv_tokens} tokens ({formatBytes(b.kv_bytes)})
          </Fact>
          <Fact label="tokens/s">{stats.tokens_per_second.toFixed(1)}</Fact>
          <Fact label="tokens generated">{stats.tokens.completion}</Fact>
          <Fact label="prefix-cache hits">
            {stats.prefix_cache.hit_tokens} tokens, {stats.prefix_cache.entries} entries
          </Fact>
        </div>
      )}
      <div class="charts">
        <Chart title="Requests" series={SERIES.requests} data={[ts, col('running'), col('waiting')]} timeAxis />
        <Chart title="KV cache" series={SERIES.kv} data={[ts, col('kvUsed'), col('kvReserved')]} timeAxis yRange={[0, 100]} />
        <Chart title="Generation" series={SERIES.speed} data={[ts, col('tps')]} timeAxis />
        <Chart title="Prefix cache" series={SERIES.cache} data={[ts, col('hitRate')]} timeAxis />
      </div>
    </div>
  );
}
