// graft's public HTTP API, as the page uses it: JSON requests, server-sent
// event streams, the API key (kept in sessionStorage, asked for once), and
// errors in OpenAI's shape turned into readable messages.

const KEY_STORAGE = 'graft.apiKey';

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || '';
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

// An error answer of the server (or a network failure: status 0).
export class ApiError extends Error {
  constructor(status, message, { code = null, param = null, type = null } = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.param = param;
    this.type = type;
  }
  // "message (409 in_use)": what the page shows.
  describe() {
    const tag = [this.status || null, this.code].filter(Boolean).join(' ');
    return tag ? `${this.message} (${tag})` : this.message;
  }
}

// Listeners told when the server refuses the key (the app then asks for it).
const authListeners = new Set();
export function onAuthRequired(fn) {
  authListeners.add(fn);
  return () => authListeners.delete(fn);
}

function headers(extra = {}, json = false) {
  const h = { ...extra };
  if (json) h['Content-Type'] = 'application/json';
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function errorFrom(response) {
  const text = await response.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: use the text itself
  }
  const e = body && body.error;
  if (e && typeof e.message === 'string') {
    return new ApiError(response.status, e.message, { code: e.code, param: e.param, type: e.type });
  }
  return new ApiError(response.status, text.trim() || response.statusText || 'request failed');
}

async function send(path, { method = 'GET', body, signal, headers: extra, raw = false } = {}) {
  let response;
  const isForm = typeof FormData !== 'undefined' && body instanceof FormData;
  try {
    response = await fetch(path, {
      method,
      headers: headers(extra, body !== undefined && !isForm),
      body: body === undefined ? undefined : isForm ? body : JSON.stringify(body),
      signal,
    });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(0, `cannot reach the server: ${err.message}`);
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (response.status === 401) for (const fn of authListeners) fn(error);
    throw error;
  }
  return raw ? response : response.json();
}

export const api = {
  get: (path, options) => send(path, { ...options, method: 'GET' }),
  post: (path, body, options) => send(path, { ...options, method: 'POST', body }),
  put: (path, body, options) => send(path, { ...options, method: 'PUT', body }),
  del: (path, options) => send(path, { ...options, method: 'DELETE' }),
  // Checks a key without storing it: resolves when the server accepts it.
  async tryKey(key) {
    const response = await fetch('/v1/models', { headers: key ? { Authorization: `Bearer ${key}` } : {} });
    if (!response.ok) throw await errorFrom(response);
  },
};

// Reads a server-sent event stream. Calls onEvent({data, id, event}) for each
// event (data lines joined); resolves when the stream ends. A non-2xx answer
// rejects with an ApiError before any event.
export async function stream(path, { method = 'GET', body, signal, headers: extra, onEvent }) {
  const response = await send(path, { method, body, signal, headers: extra, raw: true });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let event = { data: [], id: null, event: null };
  const dispatch = () => {
    if (event.data.length) onEvent({ data: event.data.join('\n'), id: event.id, event: event.event });
    event = { data: [], id: null, event: null };
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let nl;
    while ((nl = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + (buffer[nl] === '\r' ? 2 : 1));
      if (line === '') {
        dispatch();
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? '' : line.slice(colon + 1);
      if (val.startsWith(' ')) val = val.slice(1);
      if (field === 'data') event.data.push(val);
      else if (field === 'id') event.id = val;
      else if (field === 'event') event.event = val;
    }
  }
  dispatch();
}

export function formatBytes(n) {
  if (n == null) return '';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}
