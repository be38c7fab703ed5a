// Conversations and chat settings, kept in the browser (localStorage).
//
// A conversation: {id, title, created, updated, messages}. A message:
// {role: 'user' | 'assistant', content, reasoning?, toolCalls?, adapter?,
//  finish?, error?, usage?, timings?}. `adapter` is the label of the
// selection that produced an assistant message.

const CONVERSATIONS = 'graft.conversations';
const SETTINGS = 'graft.chat.settings';

export const DEFAULT_SETTINGS = { system: '', temperature: 0.8, top_p: 0.95, max_tokens: 512 };

function read(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value ?? fallback;
  } catch {
    return fallback;
  }
}

function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return null;
  } catch (err) {
    return `cannot save in this browser: ${err.message}`;
  }
}

export function loadConversations() {
  const list = read(CONVERSATIONS, []);
  return Array.isArray(list) ? list.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages)) : [];
}

// Returns an error text when the browser refused to store them (e.g. full).
export function saveConversations(list) {
  return write(CONVERSATIONS, list);
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) };
}

export function saveSettings(settings) {
  return write(SETTINGS, settings);
}

export function newConversation() {
  const now = Date.now();
  return { id: `c${now.toString(36)}${Math.random().toString(36).slice(2, 6)}`, title: '', created: now, updated: now, messages: [] };
}

export function titleOf(conversation) {
  if (conversation.title) return conversation.title;
  const first = conversation.messages.find((m) => m.role === 'user');
  if (!first) return 'New chat';
  const text = first.content.replace(/\s+/g, ' ').trim();
  return text.length > 48 ? `${text.slice(0, 47)}…` : text || 'New chat';
}

// The request's messages: the system prompt, then each turn as the API takes it.
export function apiMessages(system, messages) {
  const out = [];
  if (system.trim()) out.push({ role: 'system', content: system });
  for (const m of messages) {
    if (m.error && !m.content && !m.toolCalls?.length) continue;  // a failed turn sends nothing
    const msg = { role: m.role, content: m.content };
    if (m.toolCalls?.length) {
      msg.tool_calls = m.toolCalls.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } }));
      if (!m.content) msg.content = null;
    }
    out.push(msg);
  }
  return out;
}
