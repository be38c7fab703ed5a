// Adapters: everything in the adapter folders and everything loaded, with
// its metadata and state (available / loaded / in use / default), size and
// load time; load and unload buttons whose failures (403, 409, …) are shown
// as the server words them.
import { useEffect, useState } from 'preact/hooks';
import { api, formatBytes } from '../api.js';
import { useApp } from '../app.jsx';
import { stateOf } from './state.js';

function fmtLoss(v) {
  return typeof v === 'number' ? v.toFixed(3) : '–';
}

function fmtDate(text) {
  if (!text) return '–';
  const d = new Date(text);
  return Number.isNaN(d.getTime()) ? text : d.toLocaleString();
}

function Row({ row, busy, onLoad, onUnload }) {
  const a = row.available ?? {};
  const l = row.loaded;
  const state = stateOf(row);
  const targets = l?.targets ?? a.targets;
  return (
    <tr data-adapter-row={row.id}>
      <td>
        <strong>{row.id}</strong>
        <div class="muted small path" title={l?.path ?? a.path}>
          {l?.path ?? a.path}
        </div>
      </td>
      <td>
        <span class={`badge state-${state.replace(' ', '-')}`} data-state>
          {state}
          {state === 'in use' ? ` (${l.in_use})` : ''}
        </span>
        {l?.default && <span class="badge state-default">default</span>}
        {a.reason && <div class="muted small">{a.reason}</div>}
      </td>
      <td>{a.base ?? '–'}</td>
      <td>{l?.rank ?? a.rank ?? '–'}</td>
      <td class="small">{targets?.length ? targets.join(', ') : '–'}</td>
      <td>{a.task ?? '–'}</td>
      <td class="small">{a.dataset ?? '–'}</td>
      <td class="small">{fmtDate(a.created)}</td>
      <td>
        {fmtLoss(a.train_loss)} / {fmtLoss(a.valid_loss)}
      </td>
      <td>{formatBytes(l?.size_bytes ?? a.size_bytes) || '–'}</td>
      <td>{l ? `${Math.round(l.load_ms)} ms` : '–'}</td>
      <td class="actions">
        {l ? (
          <button onClick={onUnload} disabled={busy}>
            Unload
          </button>
        ) : (
          <button class="primary" onClick={onLoad} disabled={busy || !a.compatible}>
            Load
          </button>
        )}
      </td>
    </tr>
  );
}

export function AdaptersPage() {
  const { adapters, refreshAdapters } = useApp();
  const [busy, setBusy] = useState('');
  const [message, setMessage] = useState(null);  // {kind, text}

  useEffect(() => {
    refreshAdapters();
    const timer = setInterval(() => {
      if (!document.hidden) refreshAdapters();
    }, 4000);
    return () => clearInterval(timer);
  }, [refreshAdapters]);

  const act = async (id, verb, call) => {
    setBusy(id);
    setMessage(null);
    try {
      const result = await call();
      setMessage({
        kind: 'ok',
        text: verb === 'load' ? `Loaded ${id} (${Math.round(result.load_ms)} ms).` : `Unloaded ${id}.`,
      });
    } catch (err) {
      const why = {
        409: verb === 'unload' ? 'it is in use by a request or is the server default; try again when it is idle' : 'it is already loaded',
        403: 'the server does not allow this path',
        404: verb === 'unload' ? 'it is not loaded' : 'no adapter by that id',
      }[err.status];
      setMessage({ kind: 'error', text: `Cannot ${verb} ${id}: ${err.describe ? err.describe() : err.message}${why ? ` — ${why}.` : ''}` });
    } finally {
      setBusy('');
      refreshAdapters();
    }
  };

  return (
    <div class="adapters-page pad">
      <div class="row between">
        <h2>Adapters</h2>
        <button onClick={() => refreshAdapters()}>Refresh</button>
      </div>
      <p class="muted small">
        <strong>available</strong>: on disk, costs nothing · <strong>loaded</strong>: mounted in the server, costs memory ·{' '}
        <strong>in use</strong>: a request runs with it · <strong>default</strong>: the server's <code>--force-adapter</code>.
        {adapters.defaultSpec ? (
          <>
            {' '}
            Every request without an adapter uses <code>{adapters.defaultSpec}</code>.
          </>
        ) : null}
      </p>
      {message && (
        <p class={message.kind === 'error' ? 'error' : 'ok'} role={message.kind === 'error' ? 'alert' : 'status'} data-testid="adapters-message">
          {message.text}
        </p>
      )}
      {adapters.error && (
        <p class="error" role="alert">
          Cannot list adapters: {adapters.error}
        </p>
      )}
      <div class="table-wrap">
        <table class="adapters">
          <thead>
            <tr>
              <th>id</th>
              <th>state</th>
              <th>base</th>
              <th>rank</th>
              <th>targets</th>
              <th>task</th>
              <th>dataset</th>
              <th>created</th>
              <th>train / val loss</th>
              <th>size</th>
              <th>load time</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {adapters.rows.map((row) => (
              <Row
                key={row.id}
                row={row}
                busy={busy !== ''}
                onLoad={() => act(row.id, 'load', () => api.post('/v1/adapters', { id: row.id }))}
                onUnload={() => act(row.id, 'unload', () => api.del(`/v1/adapters/${encodeURIComponent(row.id)}`))}
              />
            ))}
          </tbody>
        </table>
      </div>
      {adapters.rows.length === 0 && <p class="muted">No adapters yet. Put adapters in one of the folders below, or train one on the Train page.</p>}
      {adapters.folders.length > 0 && (
        <p class="muted small">
          Adapter folders: {adapters.folders.map((f, i) => (
            <>
              {i ? ', ' : ''}
              <code>{f}</code>
            </>
          ))}
        </p>
      )}
    </div>
  );
}
