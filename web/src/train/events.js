// A training job's events: the whole history from the paginated events list,
// then the live stream (server-sent events), resumed with Last-Event-ID after
// the newest event already shown, so nothing is missed or shown twice.
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, stream } from '../api.js';

const PAGE = 100;
export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

// Every event so far, oldest first. The list answers newest first (as
// OpenAI's does); `after` pages toward older events.
async function history(jobId, signal) {
  const newestFirst = [];
  let after = null;
  for (;;) {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (after) query.set('after', after);
    const page = await api.get(`/v1/fine_tuning/jobs/${encodeURIComponent(jobId)}/events?${query}`, { signal });
    newestFirst.push(...page.data);
    if (!page.has_more || page.data.length === 0) break;
    after = page.data[page.data.length - 1].id;
  }
  return newestFirst.reverse();
}

// {events (oldest first), live, error} for a job; follows it until it ends.
// `status` is the job's status as last polled: a stream that closes while the
// job is not over (paused, or the connection dropped) is opened again.
export function useJobEvents(jobId, status) {
  const [state, setState] = useState({ events: [], live: false, error: '' });
  const statusRef = useRef(status);
  statusRef.current = status;

  useEffect(() => {
    if (!jobId) return undefined;
    const controller = new AbortController();
    const { signal } = controller;
    const seen = new Set();
    let events = [];
    let lastId = null;
    const add = (list) => {
      const fresh = list.filter((e) => e && e.id && !seen.has(e.id));
      if (!fresh.length) return;
      for (const e of fresh) seen.add(e.id);
      events = [...events, ...fresh];
      lastId = events[events.length - 1].id;
      setState((s) => ({ ...s, events, error: '' }));
    };
    const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
    const follow = async () => {
      add(await history(jobId, signal));
      let failures = 0;
      while (!signal.aborted) {
        try {
          setState((s) => ({ ...s, live: true }));
          await stream(`/v1/fine_tuning/jobs/${encodeURIComponent(jobId)}/events?stream=true`, {
            signal,
            headers: lastId ? { 'Last-Event-ID': lastId } : {},
            onEvent: ({ data, id }) => {
              if (data === '[DONE]') return;
              const event = JSON.parse(data);
              if (!event.id && id) event.id = id;
              add([event]);
            },
          });
          failures = 0;
          setState((s) => ({ ...s, live: false }));
          if (TERMINAL.has(statusRef.current)) return;
          await sleep(1000);
        } catch (err) {
          if (signal.aborted) return;
          failures++;
          setState((s) => ({ ...s, live: false, error: `live updates interrupted: ${err.describe ? err.describe() : err.message}; retrying` }));
          await sleep(Math.min(10000, 1000 * 2 ** failures));
        }
      }
    };
    setState({ events: [], live: false, error: '' });
    follow().catch((err) => {
      if (!signal.aborted) setState((s) => ({ ...s, live: false, error: err.describe ? err.describe() : err.message }));
    });
    return () => controller.abort();
  }, [jobId]);

  return state;
}

// The loss curve: one point per reported step, [steps, train, valid].
export function lossSeries(events) {
  const byStep = new Map();
  for (const e of events) {
    if (e.type !== 'metrics' || !e.data || typeof e.data.step !== 'number') continue;
    const point = byStep.get(e.data.step) ?? { train: null, valid: null };
    if (typeof e.data.train_loss === 'number') point.train = e.data.train_loss;
    if (typeof e.data.valid_loss === 'number') point.valid = e.data.valid_loss;
    byStep.set(e.data.step, point);
  }
  const steps = [...byStep.keys()].sort((a, b) => a - b);
  return [steps, steps.map((s) => byStep.get(s).train), steps.map((s) => byStep.get(s).valid)];
}

// The newest metrics (tokens/s, ETA, step).
export function latestMetrics(events) {
  for (let i = events.length - 1; i >= 0; i--) {
    if (events[i].type === 'metrics' && events[i].data) return events[i].data;
  }
  return null;
}
