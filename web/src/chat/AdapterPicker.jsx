// The chat's adapter selector: none by default, one adapter or a stack of up
// to four, each with an optional scale. Picking an adapter that is only
// available loads it first (POST /v1/adapters) and says so; a failed load
// shows the server's error and selects nothing. "Use everywhere" writes the
// selection shown as the one graft's clients share (the terminal's `graft
// adapters use`, the Pi extension): PUT /v1/adapters/selection.
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { useApp } from '../app.jsx';
import { specOf, stateOf, validScale } from '../adapters/state.js';

const MAX_STACK = 4;

export function AdapterPicker() {
  const { adapters, refreshAdapters, selection, setSelection } = useApp();
  const [busy, setBusy] = useState('');
  const [notice, setNotice] = useState(null);  // {kind: 'ok' | 'error', text}
  const [shared, setShared] = useState(undefined);  // the shared selection: a spec, null (none set), undefined (unknown)
  useEffect(() => {
    api.get('/v1/adapters/selection').then((s) => setShared(s.adapter), () => setShared(undefined));
  }, []);
  const { stack } = selection;
  const hasDefault = !!adapters.defaultSpec;
  const picked = new Set(stack.map((s) => s.id));
  const rows = adapters.rows.filter((r) => r.loaded || (r.available && r.available.compatible));

  const pick = async (row, on) => {
    setNotice(null);
    if (!on) {
      setSelection({ mode: 'spec', stack: stack.filter((s) => s.id !== row.id) });
      return;
    }
    if (!row.loaded) {
      setBusy(row.id);
      try {
        const loaded = await api.post('/v1/adapters', { id: row.id });
        setNotice({ kind: 'ok', text: `Loaded ${row.id} into the server (${Math.round(loaded.load_ms)} ms).` });
        await refreshAdapters();
      } catch (err) {
        // 409: someone else loaded it meanwhile; anything else is a real failure.
        if (err.status !== 409) {
          setNotice({ kind: 'error', text: `Cannot load ${row.id}: ${err.describe ? err.describe() : err.message}` });
          await refreshAdapters();
          return;
        }
        await refreshAdapters();
      } finally {
        setBusy('');
      }
    }
    setSelection((old) => ({ mode: 'spec', stack: [...old.stack.filter((s) => s.id !== row.id), { id: row.id, scale: '' }] }));
  };

  const setScale = (id, scale) =>
    setSelection((old) => ({ mode: 'spec', stack: old.stack.map((s) => (s.id === id ? { ...s, scale } : s)) }));

  const badScale = stack.find((s) => !validScale(s.scale));
  const sends = selection.mode === 'default' ? null : specOf(stack);
  return (
    <section class="adapter-picker" aria-label="Adapter">
      <h3>Adapter</h3>
      <label class="choice">
        <input
          type="radio"
          name="adapter-mode"
          checked={selection.mode === 'default' || (!hasDefault && !stack.length)}
          onChange={() => setSelection({ mode: 'default', stack: [] })}
        />
        {hasDefault ? `server default (${adapters.defaultSpec})` : 'none (base model)'}
      </label>
      {hasDefault && (
        <label class="choice">
          <input
            type="radio"
            name="adapter-mode"
            checked={selection.mode === 'spec' && !stack.length}
            onChange={() => setSelection({ mode: 'spec', stack: [] })}
          />
          none (base model)
        </label>
      )}
      {rows.length === 0 && <p class="muted small">No adapters in the store. See the Adapters page.</p>}
      <ul class="adapter-options">
        {rows.map((row) => {
          const on = picked.has(row.id);
          const item = stack.find((s) => s.id === row.id);
          const own = (row.loaded ?? row.available)?.scale;
          return (
            <li key={row.id}>
              <label class="choice">
                <input
                  type="checkbox"
                  data-adapter={row.id}
                  checked={on || busy === row.id}
                  disabled={busy !== '' || (!on && stack.length >= MAX_STACK)}
                  onChange={(e) => pick(row, e.currentTarget.checked)}
                />
                <span class="adapter-id">{row.id}</span>
                <span class={`badge state-${stateOf(row).replace(' ', '-')}`}>{busy === row.id ? 'loading…' : stateOf(row)}</span>
              </label>
              {on && (
                <label class="scale">
                  scale
                  <input
                    type="text"
                    inputMode="decimal"
                    data-scale={row.id}
                    placeholder={own != null ? `${Number(own.toFixed(3))} (own)` : 'own'}
                    value={item.scale}
                    onInput={(e) => setScale(row.id, e.currentTarget.value)}
                    aria-invalid={!validScale(item.scale)}
                  />
                </label>
              )}
            </li>
          );
        })}
      </ul>
      {stack.length >= MAX_STACK && <p class="muted small">At most {MAX_STACK} adapters stack.</p>}
      {badScale && (
        <p class="error small" role="alert">
          The scale of {badScale.id} must be a number.
        </p>
      )}
      <p class="small">
        Sends <code data-testid="adapter-spec">{sends === null ? '(no adapter field)' : `adapter: "${sends}"`}</code>
      </p>
      <p class="small shared-selection">
        Shared with the terminal and Pi:{' '}
        <code data-testid="shared-selection">{shared === undefined ? '?' : shared === null ? '(none set)' : shared}</code>{' '}
        <button
          type="button"
          data-testid="use-everywhere"
          disabled={busy !== '' || !!badScale}
          title="Make this selection the one graft adapters use and the Pi extension send"
          onClick={async () => {
            setNotice(null);
            try {
              const saved = await api.put('/v1/adapters/selection', { adapter: sends });
              setShared(saved.adapter);
              setNotice({ kind: 'ok', text: saved.adapter === null ? 'Cleared the shared selection.' : `Shared selection is now ${saved.adapter}.` });
            } catch (err) {
              setNotice({ kind: 'error', text: `Cannot share the selection: ${err.describe ? err.describe() : err.message}` });
            }
          }}
        >
          Use everywhere
        </button>
      </p>
      {notice && (
        <p class={notice.kind === 'error' ? 'error small' : 'ok small'} role={notice.kind === 'error' ? 'alert' : 'status'}>
          {notice.text}
        </p>
      )}
      {adapters.error && (
        <p class="error small" role="alert">
          Cannot list adapters: {adapters.error}
        </p>
      )}
    </section>
  );
}

// The request's `adapter` field (null: leave it out) and the label a reply gets.
export function selectionRequest(selection, defaultSpec) {
  if (selection.mode === 'default') {
    return { field: null, label: defaultSpec ? `${defaultSpec} (server default)` : 'none' };
  }
  const spec = specOf(selection.stack);
  return { field: spec, label: spec };
}

export function selectionValid(selection) {
  return selection.stack.every((s) => validScale(s.scale));
}
