// The saved conversations: new, open, rename, delete.
import { useState } from 'preact/hooks';
import { titleOf } from './conversations.js';

function Item({ conversation, active, onOpen, onRename, onDelete }) {
  const [renaming, setRenaming] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const [name, setName] = useState('');
  if (renaming) {
    const done = (save) => {
      if (save) onRename(name.trim());
      setRenaming(false);
    };
    return (
      <li class="conv active">
        <input
          aria-label="Conversation name"
          value={name}
          autoFocus
          onInput={(e) => setName(e.currentTarget.value)}
          onKeyDown={(e) => {
            if (e.key === 'Enter') done(true);
            else if (e.key === 'Escape') done(false);
          }}
          onBlur={() => done(true)}
        />
      </li>
    );
  }
  return (
    <li class={`conv${active ? ' active' : ''}`}>
      <button class="conv-open" onClick={onOpen} title={titleOf(conversation)}>
        {titleOf(conversation)}
      </button>
      {confirming ? (
        <span class="conv-actions">
          <button class="link danger" onClick={onDelete}>
            Delete
          </button>
          <button class="link" onClick={() => setConfirming(false)}>
            Keep
          </button>
        </span>
      ) : (
        <span class="conv-actions">
          <button
            class="link"
            aria-label="Rename"
            onClick={() => {
              setName(titleOf(conversation));
              setRenaming(true);
            }}
          >
            ✎
          </button>
          <button class="link" aria-label="Delete" onClick={() => setConfirming(true)}>
            ✕
          </button>
        </span>
      )}
    </li>
  );
}

export function ConversationList({ conversations, currentId, onNew, onOpen, onRename, onDelete }) {
  const sorted = [...conversations].sort((a, b) => b.updated - a.updated);
  return (
    <aside class="conversations" aria-label="Conversations">
      <button class="primary wide" onClick={onNew}>
        New chat
      </button>
      <ul>
        {sorted.map((c) => (
          <Item
            key={c.id}
            conversation={c}
            active={c.id === currentId}
            onOpen={() => onOpen(c.id)}
            onRename={(title) => onRename(c.id, title)}
            onDelete={() => onDelete(c.id)}
          />
        ))}
      </ul>
    </aside>
  );
}
