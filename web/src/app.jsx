// The page: a header with the four pages (Chat, Adapters, Train, Status),
// the API key dialog, and the state the pages share (the served model, the
// adapters, the chat's adapter selection).
import { createContext } from 'preact';
import { useCallback, useContext, useEffect, useState } from 'preact/hooks';
import { api, apiKey, onAuthRequired, setApiKey } from './api.js';
import { fetchAdapters } from './adapters/state.js';
import { ChatPage } from './chat/ChatPage.jsx';
import { AdaptersPage } from './adapters/AdaptersPage.jsx';
import { TrainPage } from './train/TrainPage.jsx';
import { StatusPage } from './status/StatusPage.jsx';

const AppContext = createContext(null);
export const useApp = () => useContext(AppContext);

const PAGES = [
  ['chat', 'Chat'],
  ['adapters', 'Adapters'],
  ['train', 'Train'],
  ['status', 'Status'],
];

function currentRoute() {
  const [page, ...rest] = location.hash.replace(/^#\/?/, '').split('/');
  return { page: PAGES.some(([p]) => p === page) ? page : 'chat', rest: rest.map(decodeURIComponent) };
}

export function navigate(page, ...rest) {
  location.hash = `#/${[page, ...rest.map(encodeURIComponent)].join('/')}`;
}

function KeyDialog({ onDone, refused }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState(refused ? 'The server refused the stored key: enter it again.' : '');
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      await api.tryKey(key);
      setApiKey(key);
      onDone();
    } catch (err) {
      setError(
        err.status === 401
          ? `The server refused this key: ${err.message}`
          : `Cannot check the key: ${err.describe ? err.describe() : err.message}`,
      );
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="modal-backdrop">
      <form class="modal" onSubmit={submit} aria-labelledby="key-title">
        <h2 id="key-title">API key</h2>
        <p>This graft server needs an API key (its <code>--api-key</code>). The page keeps it for this tab only.</p>
        <input
          type="password"
          name="api-key"
          autocomplete="current-password"
          placeholder="API key"
          value={key}
          onInput={(e) => setKey(e.currentTarget.value)}
          autoFocus
        />
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <div class="row end">
          <button type="submit" class="primary" disabled={busy || !key}>
            Use this key
          </button>
        </div>
      </form>
    </div>
  );
}

export function App() {
  const [route, setRoute] = useState(currentRoute);
  const [auth, setAuth] = useState({ needed: false, refused: false });
  const [model, setModel] = useState(null);
  const [loadError, setLoadError] = useState('');
  const [adapters, setAdapters] = useState({ rows: [], defaultSpec: '', folders: [], error: '' });
  // The chat's adapter selection: 'default' (no field: the server's default)
  // or a stack of {id, scale} (empty: "none").
  const [selection, setSelection] = useState({ mode: 'default', stack: [] });

  useEffect(() => {
    const onHash = () => setRoute(currentRoute());
    window.addEventListener('hashchange', onHash);
    return () => window.removeEventListener('hashchange', onHash);
  }, []);
  useEffect(() => onAuthRequired(() => setAuth({ needed: true, refused: !!apiKey() })), []);

  const refreshAdapters = useCallback(async () => {
    try {
      const next = await fetchAdapters();
      setAdapters({ ...next, error: '' });
      return next;
    } catch (err) {
      setAdapters((old) => ({ ...old, error: err.describe ? err.describe() : err.message }));
      return null;
    }
  }, []);

  const start = useCallback(async () => {
    try {
      const models = await api.get('/v1/models');
      setModel(models.data[0] ?? null);
      setLoadError('');
      await refreshAdapters();
    } catch (err) {
      if (err.status !== 401) setLoadError(err.describe ? err.describe() : err.message);
    }
  }, [refreshAdapters]);
  useEffect(() => {
    start();
  }, [start]);

  const context = { model, adapters, refreshAdapters, selection, setSelection, route };
  const Page = { chat: ChatPage, adapters: AdaptersPage, train: TrainPage, status: StatusPage }[route.page];
  return (
    <AppContext.Provider value={context}>
      <header class="topbar">
        <span class="brand">graft</span>
        <nav>
          {PAGES.map(([page, label]) => (
            <a href={`#/${page}`} class={route.page === page ? 'active' : ''} aria-current={route.page === page ? 'page' : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <span class="model" title="served model">
          {model ? model.id : ''}
        </span>
        {apiKey() && (
          <button
            class="link"
            onClick={() => {
              setApiKey('');
              setAuth({ needed: true, refused: false });
            }}
          >
            Change key
          </button>
        )}
      </header>
      {loadError && (
        <div class="banner error" role="alert">
          {loadError}
        </div>
      )}
      <main class={`page page-${route.page}`}>{model ? <Page /> : !loadError && <p class="muted pad">Connecting to graft…</p>}</main>
      {auth.needed && (
        <KeyDialog
          refused={auth.refused}
          onDone={() => {
            setAuth({ needed: false, refused: false });
            start();
          }}
        />
      )}
    </AppContext.Provider>
  );
}
