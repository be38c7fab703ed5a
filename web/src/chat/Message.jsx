// One chat message. User text is shown as typed; assistant text is rendered
// markdown (sanitized), with its reasoning folded, its tool calls shown as
// calls, and a label naming the adapter selection that produced it.
import { useState } from 'preact/hooks';
import { renderMarkdown } from '../markdown.js';

function prettyArguments(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function ToolCall({ call }) {
  return (
    <div class="tool-call">
      <div class="tool-call-head">
        <span class="badge">tool call</span> <code>{call.name || '(unnamed)'}</code>
      </div>
      <pre class="tool-args">{prettyArguments(call.arguments || '')}</pre>
    </div>
  );
}

const FINISH_NOTES = { stopped: 'stopped', length: 'cut at max_tokens or the context' };

export function Message({ message, streaming, canRegenerate, onRegenerate, onEdit, editable }) {
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState(message.content);

  if (message.role === 'user') {
    if (editing) {
      const submit = () => {
        if (!draft.trim()) return;
        setEditing(false);
        onEdit(draft);
      };
      return (
        <div class="msg user editing">
          <textarea
            value={draft}
            aria-label="Edit message"
            onInput={(e) => setDraft(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
                e.preventDefault();
                submit();
              } else if (e.key === 'Escape') {
                setEditing(false);
              }
            }}
          />
          <div class="row end">
            <button onClick={() => setEditing(false)}>Cancel</button>
            <button class="primary" onClick={submit}>
              Save &amp; send
            </button>
          </div>
        </div>
      );
    }
    return (
      <div class="msg user">
        <div class="msg-text plain">{message.content}</div>
        {editable && (
          <div class="msg-actions">
            <button
              class="link"
              onClick={() => {
                setDraft(message.content);
                setEditing(true);
              }}
            >
              Edit
            </button>
          </div>
        )}
      </div>
    );
  }

  return (
    <div class={`msg assistant${streaming ? ' streaming' : ''}`} data-adapter-label={message.adapter}>
      <div class="msg-meta">
        <span class="badge adapter-label" title="the adapter selection this reply was generated with">
          adapter: {message.adapter || 'none'}
        </span>
        {message.finish && FINISH_NOTES[message.finish] && <span class="badge muted">{FINISH_NOTES[message.finish]}</span>}
        {message.timings && (
          <span class="muted small">
            {message.usage?.completion_tokens ?? ''} tokens · {message.timings.tokens_per_second?.toFixed(1)} tok/s
          </span>
        )}
      </div>
      {message.reasoning && (
        <details class="reasoning">
          <summary>Reasoning</summary>
          <div class="plain">{message.reasoning}</div>
        </details>
      )}
      {message.content && <div class="msg-text markdown" dangerouslySetInnerHTML={{ __html: renderMarkdown(message.content) }} />}
      {streaming && !message.content && !message.reasoning && <div class="muted typing">…</div>}
      {message.toolCalls?.map((call) => (
        <ToolCall call={call} />
      ))}
      {message.error && (
        <div class="error" role="alert">
          {message.error}
        </div>
      )}
      {canRegenerate && (
        <div class="msg-actions">
          <button class="link" onClick={onRegenerate}>
            Regenerate
          </button>
        </div>
      )}
    </div>
  );
}
