// What the page knows about adapters: the three states of docs/adapters.md
// (available on disk, loaded in the server, selected per request) and the
// spec a selection sends.
import { api } from '../api.js';

// One row per adapter id: what /v1/adapters/available says of it, merged
// with what /v1/adapters says when it is loaded (path-loaded adapters appear
// only in the latter).
export async function fetchAdapters() {
  const [loaded, available] = await Promise.all([api.get('/v1/adapters'), api.get('/v1/adapters/available')]);
  const rows = new Map();
  for (const a of available.data) rows.set(a.id, { id: a.id, available: a, loaded: null });
  for (const a of loaded.data) {
    const row = rows.get(a.id) ?? { id: a.id, available: null, loaded: null };
    row.loaded = a;
    rows.set(a.id, row);
  }
  // The server's default selection (--force-adapter): "" when there is none.
  const defaultSpec = loaded.default && loaded.default !== 'none' ? loaded.default : '';
  return { rows: [...rows.values()], defaultSpec, folders: available.folders ?? [] };
}

// "available" | "loaded" | "in use" | "incompatible" | "unreadable", plus
// whether it is the server's default (--force-adapter).
export function stateOf(row) {
  if (row.loaded) return row.loaded.in_use > 0 ? 'in use' : 'loaded';
  if (row.available && !row.available.compatible) return 'incompatible';
  return 'available';
}

// A selection is a stack of {id, scale}; scale '' means the adapter's own.
// The spec is what the request's `adapter` field carries: "a", "a@0.5+b",
// or "none" for an empty stack.
export function specOf(stack) {
  if (!stack.length) return 'none';
  return stack.map(({ id, scale }) => (scale === '' || scale == null ? id : `${id}@${Number(scale)}`)).join('+');
}

// A scale the server takes: a finite number (the server says if it is out
// of range), or '' for the adapter's own.
export function validScale(text) {
  return text === '' || (text.trim() !== '' && Number.isFinite(Number(text)));
}
