// One training job: its status, a live chart of train and validation loss
// against step, tokens/s and ETA, the event log; cancel, pause and resume;
// once it succeeded, load its adapter or chat with it.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api } from '../api.js';
import { navigate, useApp } from '../app.jsx';
import { Chart } from '../components/Chart.jsx';
import { TERMINAL, latestMetrics, lossSeries, useJobEvents } from './events.js';

const LOSS_SERIES = [
  { label: 'train loss', color: '#2563eb', points: true },
  { label: 'val loss', color: '#d97706', points: true },
];

function duration(seconds) {
  if (seconds == null || !Number.isFinite(seconds)) return '–';
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function eventLine(e) {
  const time = e.created_at ? new Date(e.created_at * 1000).toLocaleTimeString() : '';
  if (e.type === 'metrics' && e.data) {
    const d = e.data;
    const parts = [`step ${d.step}`];
    if (typeof d.train_loss === 'number') parts.push(`train loss ${d.train_loss.toFixed(4)}`);
    if (typeof d.valid_loss === 'number') parts.push(`val loss ${d.valid_loss.toFixed(4)}`);
    if (typeof d.tokens_per_s === 'number') parts.push(`${d.tokens_per_s.toFixed(0)} tok/s`);
    return `${time}  ${parts.join(' · ')}`;
  }
  return `${time}  ${e.level && e.level !== 'info' ? `[${e.level}] ` : ''}${e.message ?? ''}`;
}

export function JobView({ jobId, onChanged }) {
  const { refreshAdapters, setSelection } = useApp();
  const [job, setJob] = useState(null);
  const [error, setError] = useState('');
  const [notice, setNotice] = useState('');
  const [busy, setBusy] = useState(false);
  const { events, live, error: eventsError } = useJobEvents(jobId, job?.status);

  useEffect(() => {
    let stopped = false;
    let timer = 0;
    const poll = async () => {
      try {
        const next = await api.get(`/v1/fine_tuning/jobs/${encodeURIComponent(jobId)}`);
        if (stopped) return;
        setJob(next);
        setError('');
        if (TERMINAL.has(next.status)) return;
      } catch (err) {
        if (stopped) return;
        setError(err.describe ? err.describe() : err.message);
      }
      timer = setTimeout(poll, 3000);
    };
    setJob(null);
    poll();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [jobId]);

  const series = useMemo(() => lossSeries(events), [events]);
  const metrics = useMemo(() => latestMetrics(events), [events]);

  const act = async (verb) => {
    setBusy(true);
    setNotice('');
    try {
      setJob(await api.post(`/v1/fine_tuning/jobs/${encodeURIComponent(jobId)}/${verb}`, {}));
      onChanged();
    } catch (err) {
      setNotice(`Cannot ${verb} the job: ${err.describe ? err.describe() : err.message}`);
    } finally {
      setBusy(false);
    }
  };

  const loadAdapter = async (thenChat) => {
    const id = job.fine_tuned_model;
    setBusy(true);
    setNotice('');
    try {
      await api.post('/v1/adapters', { id });
      setNotice(`Loaded ${id}.`);
    } catch (err) {
      if (err.status !== 409) {
        setNotice(`Cannot load ${id}: ${err.describe ? err.describe() : err.message}`);
        setBusy(false);
        return;
      }
    }
    await refreshAdapters();
    setBusy(false);
    if (thenChat) {
      setSelection({ mode: 'spec', stack: [{ id, scale: '' }] });
      navigate('chat');
    }
  };

  if (!job) {
    return <section class="job-view">{error ? <p class="error" role="alert">{error}</p> : <p class="muted">Loading the job…</p>}</section>;
  }
  const status = job.status;
  const canPause = status === 'running' || status === 'queued';
  return (
    <section class="job-view" aria-label="Job">
      <div class="row between">
        <h3>
          {job.id} <span class={`badge state-${status}`} data-testid="job-status">{status}</span>
        </h3>
        <div class="row">
          {canPause && (
            <button onClick={() => act('pause')} disabled={busy}>
              Pause
            </button>
          )}
          {status === 'paused' && (
            <button onClick={() => act('resume')} disabled={busy}>
              Resume
            </button>
          )}
          {!TERMINAL.has(status) && (
            <button class="danger" onClick={() => act('cancel')} disabled={busy}>
              Cancel
            </button>
          )}
          {status === 'succeeded' && job.fine_tuned_model && (
            <>
              <button onClick={() => loadAdapter(false)} disabled={busy}>
                Load
              </button>
              <button class="primary" onClick={() => loadAdapter(true)} disabled={busy}>
                Chat with it
              </button>
            </>
          )}
        </div>
      </div>
      {(error || notice || eventsError) && (
        <p class={notice.startsWith('Loaded') && !error ? 'ok' : 'error'} role="alert">
          {[error, notice, eventsError].filter(Boolean).join(' · ')}
        </p>
      )}
      {job.error?.message && (
        <p class="error" role="alert">
          {job.error.message}
        </p>
      )}
      <div class="facts">
        <div class="fact">
          <div class="muted small">adapter</div>
          <div class="fact-value">{job.fine_tuned_model ?? (job.suffix ? `${job.suffix} (when done)` : '–')}</div>
        </div>
        <div class="fact">
          <div class="muted small">step</div>
          <div class="fact-value" data-testid="job-step">
            {metrics?.step ?? '–'}
            {metrics?.total_steps ? ` / ${metrics.total_steps}` : ''}
          </div>
        </div>
        <div class="fact">
          <div class="muted small">tokens/s</div>
          <div class="fact-value">{typeof metrics?.tokens_per_s === 'number' ? metrics.tokens_per_s.toFixed(0) : '–'}</div>
        </div>
        <div class="fact">
          <div class="muted small">ETA</div>
          <div class="fact-value">{TERMINAL.has(status) ? '–' : duration(metrics?.eta_s)}</div>
        </div>
        <div class="fact">
          <div class="muted small">trained tokens</div>
          <div class="fact-value">{job.trained_tokens ?? '–'}</div>
        </div>
      </div>
      <Chart title="Loss" xLabel="step" series={LOSS_SERIES} data={series} height={240} testId="loss-chart" />
      <div class="row between">
        <h3>Events</h3>
        <span class="muted small">{live ? 'live' : TERMINAL.has(status) ? 'finished' : ''}</span>
      </div>
      <div class="event-log" data-testid="event-log">
        {events.slice(-500).map((e) => (
          <div key={e.id}>{eventLine(e)}</div>
        ))}
      </div>
    </section>
  );
}
