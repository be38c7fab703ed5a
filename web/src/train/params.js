// The training parameters the form offers: where each goes in the job
// request, the trainer's default (shown, and used when the field is left
// empty: the page then leaves the field out) and a short hint.
//
// `in`: 'hyperparameters' (OpenAI's), 'lora' (graft's own object) or 'job'
// (top level). `kind`: 'int' | 'float' | 'list' | 'text'.
export const PARAMS = [
  { name: 'rank', in: 'lora', kind: 'int', def: '8', hint: 'LoRA rank: more capacity, more memory' },
  { name: 'scale', in: 'lora', kind: 'float', def: '20', hint: 'the delta\'s factor (alpha / rank)' },
  { name: 'dropout', in: 'lora', kind: 'float', def: '0', hint: 'dropout on the LoRA input, 0 – 0.99' },
  { name: 'num_layers', in: 'lora', kind: 'int', def: '16', hint: 'train the last N layers; -1: all' },
  { name: 'targets', in: 'lora', kind: 'list', def: 'q,k,v,o,gate,up,down', hint: 'projections to adapt' },
  { name: 'learning_rate', in: 'lora', kind: 'float', def: '1e-5', hint: 'AdamW peak step size' },
  { name: 'lr_schedule', in: 'lora', kind: 'text', def: 'constant', hint: 'constant or cosine' },
  { name: 'warmup', in: 'lora', kind: 'int', def: '0', hint: 'warm-up steps' },
  { name: 'iters', in: 'lora', kind: 'int', def: '1000', hint: 'optimizer steps (or set n_epochs)' },
  { name: 'n_epochs', in: 'hyperparameters', kind: 'int', def: '', hint: 'passes over the data, instead of iters' },
  { name: 'batch_size', in: 'hyperparameters', kind: 'int', def: '4', hint: 'examples per batch' },
  { name: 'grad_accum', in: 'lora', kind: 'int', def: '1', hint: 'batches per optimizer step' },
  { name: 'max_seq_length', in: 'lora', kind: 'int', def: '2048', hint: 'longer examples are cut' },
  { name: 'val_every', in: 'lora', kind: 'int', def: '200', hint: 'validation loss every N steps' },
  { name: 'save_every', in: 'lora', kind: 'int', def: '100', hint: 'checkpoint every N steps' },
  { name: 'seed', in: 'job', kind: 'int', def: '0', hint: 'same seed, same run' },
];

// Turns the form's texts into the request's fields; throws naming a bad one.
export function paramsRequest(values) {
  const out = { hyperparameters: {}, lora: {} };
  for (const p of PARAMS) {
    const text = (values[p.name] ?? '').trim();
    if (text === '') continue;
    let value;
    if (p.kind === 'list') {
      value = text.split(/[\s,]+/).filter(Boolean);
    } else if (p.kind === 'text') {
      value = text;
    } else {
      value = Number(text);
      if (!Number.isFinite(value) || (p.kind === 'int' && !Number.isInteger(value))) {
        throw new Error(`${p.name} must be ${p.kind === 'int' ? 'a whole number' : 'a number'} (got '${text}')`);
      }
    }
    if (p.in === 'job') out[p.name] = value;
    else out[p.in][p.name] = value;
  }
  if (!Object.keys(out.hyperparameters).length) delete out.hyperparameters;
  if (!Object.keys(out.lora).length) delete out.lora;
  return out;
}
