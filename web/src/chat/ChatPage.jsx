// Chat: streamed replies from /v1/chat/completions with the selected
// adapter(s), conversations kept in the browser, stop / regenerate /
// edit-and-resend, a system prompt and sampling settings.
import { useEffect, useRef, useState } from 'preact/hooks';
import { stream } from '../api.js';
import { useApp } from '../app.jsx';
import { AdapterPicker, selectionRequest, selectionValid } from './AdapterPicker.jsx';
import { ConversationList } from './ConversationList.jsx';
import { Message } from './Message.jsx';
import { apiMessages, loadConversations, loadSettings, newConversation, saveConversations, saveSettings } from './conversations.js';

// Folds one streamed chunk into the message being written.
function applyChunk(msg, chunk) {
  if (chunk.error) {
    msg.error = chunk.error.message || JSON.stringify(chunk.error);
    return;
  }
  const choice = chunk.choices?.[0];
  if (choice) {
    const delta = choice.delta ?? {};
    if (delta.content) msg.content += delta.content;
    if (delta.reasoning_content) msg.reasoning = (msg.reasoning ?? '') + delta.reasoning_content;
    for (const tc of delta.tool_calls ?? []) {
      msg.toolCalls ??= [];
      const i = tc.index ?? msg.toolCalls.length;
      const call = (msg.toolCalls[i] ??= { id: '', name: '', arguments: '' });
      if (tc.id) call.id = tc.id;
      if (tc.function?.name) call.name += tc.function.name;
      if (tc.function?.arguments) call.arguments += tc.function.arguments;
    }
    if (choice.finish_reason) msg.finish = choice.finish_reason;
  }
  if (chunk.usage) msg.usage = chunk.usage;
  if (chunk.timings) msg.timings = chunk.timings;
}

function numberOrNull(text) {
  return text === '' || text == null ? null : Number(text);
}

function Settings({ settings, onChange }) {
  const field = (name) => (e) => onChange({ ...settings, [name]: e.currentTarget.value });
  return (
    <section class="chat-settings" aria-label="Settings">
      <h3>Settings</h3>
      <label>
        System prompt
        <textarea rows="3" value={settings.system} onInput={field('system')} placeholder="(none)" />
      </label>
      <div class="row">
        <label>
          temperature
          <input type="number" step="0.05" min="0" max="2" value={settings.temperature} onInput={field('temperature')} />
        </label>
        <label>
          top_p
          <input type="number" step="0.05" min="0" max="1" value={settings.top_p} onInput={field('top_p')} />
        </label>
        <label>
          max_tokens
          <input type="number" step="1" min="1" value={settings.max_tokens} onInput={field('max_tokens')} placeholder="context" />
        </label>
      </div>
    </section>
  );
}

export function ChatPage() {
  const { model, adapters, selection } = useApp();
  const [conversations, setConversations] = useState(loadConversations);
  const [currentId, setCurrentId] = useState(() => [...conversations].sort((a, b) => b.updated - a.updated)[0]?.id ?? null);
  const [settings, setSettings] = useState(loadSettings);
  const [running, setRunning] = useState(null);  // {convId, controller}
  const [draft, setDraft] = useState('');
  const [storeError, setStoreError] = useState(null);
  const endRef = useRef(null);

  const current = conversations.find((c) => c.id === currentId) ?? null;

  useEffect(() => {
    if (!running) setStoreError(saveConversations(conversations));
  }, [conversations, running]);
  useEffect(() => {
    setStoreError(saveSettings(settings));
  }, [settings]);
  useEffect(() => {
    endRef.current?.scrollIntoView({ block: 'end' });
  }, [current?.messages]);
  useEffect(() => {
    if (!running) return undefined;
    const onKey = (e) => {
      if (e.key === 'Escape') running.controller.abort();
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, [running]);

  const replaceMessages = (id, messages) =>
    setConversations((list) => list.map((c) => (c.id === id ? { ...c, messages, updated: Date.now() } : c)));

  // Sends `history` (ending with a user message) and streams the reply into `conv`.
  const run = async (conv, history) => {
    const { field, label } = selectionRequest(selection, adapters.defaultSpec);
    const msg = { role: 'assistant', content: '', adapter: label };
    const body = {
      model: model.id,
      messages: apiMessages(settings.system, history),
      stream: true,
      stream_options: { include_usage: true },
    };
    for (const name of ['temperature', 'top_p', 'max_tokens']) {
      const value = numberOrNull(settings[name]);
      if (value !== null) body[name] = value;
    }
    if (field !== null) body.adapter = field;
    const controller = new AbortController();
    setConversations((list) => {
      const next = { ...conv, messages: [...history, { ...msg }], updated: Date.now() };
      return list.some((c) => c.id === conv.id) ? list.map((c) => (c.id === conv.id ? next : c)) : [next, ...list];
    });
    setCurrentId(conv.id);
    setRunning({ convId: conv.id, controller });
    let frame = 0;
    const flush = () => {
      frame = 0;
      replaceMessages(conv.id, [...history, { ...msg, toolCalls: msg.toolCalls?.map((t) => ({ ...t })) }]);
    };
    try {
      await stream('/v1/chat/completions', {
        method: 'POST',
        body,
        signal: controller.signal,
        onEvent: ({ data }) => {
          if (data === '[DONE]') return;
          applyChunk(msg, JSON.parse(data));
          frame ||= requestAnimationFrame(flush);
        },
      });
    } catch (err) {
      if (err.name === 'AbortError') msg.finish = 'stopped';
      else msg.error = err.describe ? err.describe() : err.message;
    }
    if (frame) cancelAnimationFrame(frame);
    flush();
    setRunning(null);
  };

  const send = () => {
    const text = draft;
    if (!text.trim() || running || !selectionValid(selection)) return;
    const conv = current ?? newConversation();
    setDraft('');
    run(conv, [...conv.messages, { role: 'user', content: text }]);
  };

  const messages = current?.messages ?? [];
  const busyHere = running && running.convId === current?.id;
  const lastIndex = messages.length - 1;
  return (
    <div class="chat-layout">
      <ConversationList
        conversations={conversations}
        currentId={currentId}
        onNew={() => setCurrentId(null)}
        onOpen={setCurrentId}
        onRename={(id, title) => setConversations((list) => list.map((c) => (c.id === id ? { ...c, title } : c)))}
        onDelete={(id) => {
          if (running?.convId === id) running.controller.abort();
          setConversations((list) => list.filter((c) => c.id !== id));
          if (id === currentId) setCurrentId(null);
        }}
      />
      <section class="chat-main" aria-label="Chat">
        <div class="messages" role="log" aria-live="polite">
          {messages.length === 0 && <p class="muted empty">Send a message to start. Enter sends, Shift+Enter starts a new line, Esc stops.</p>}
          {messages.map((m, i) => (
            <Message
              message={m}
              streaming={busyHere && i === lastIndex}
              editable={!running}
              canRegenerate={!running && m.role === 'assistant' && i === lastIndex}
              onRegenerate={() => run(current, messages.slice(0, i))}
              onEdit={(text) => run(current, [...messages.slice(0, i), { ...m, content: text }])}
            />
          ))}
          <div ref={endRef} />
        </div>
        {storeError && (
          <p class="error small" role="alert">
            {storeError}
          </p>
        )}
        <form
          class="composer"
          onSubmit={(e) => {
            e.preventDefault();
            send();
          }}
        >
          <textarea
            aria-label="Message"
            placeholder="Message"
            rows="3"
            value={draft}
            onInput={(e) => setDraft(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
                e.preventDefault();
                send();
              }
            }}
          />
          {running ? (
            <button type="button" class="danger" onClick={() => running.controller.abort()}>
              Stop
            </button>
          ) : (
            <button type="submit" class="primary" disabled={!draft.trim() || !selectionValid(selection)}>
              Send
            </button>
          )}
        </form>
      </section>
      <div class="chat-side">
        <AdapterPicker />
        <Settings settings={settings} onChange={setSettings} />
      </div>
    </div>
  );
}
