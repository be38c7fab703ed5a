// Train: upload a dataset (or pick an uploaded one), see its inspection,
// set the parameters, start a job; the job list; the selected job's view.
import { useCallback, useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { navigate, useApp } from '../app.jsx';
import { JobView } from './JobView.jsx';
import { PARAMS, paramsRequest } from './params.js';

function describe(err) {
  return err.describe ? err.describe() : err.message;
}

// The inspection as the server gives it, as a definition list.
function Inspection({ result }) {
  const rows = [];
  const walk = (prefix, value) => {
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) walk(prefix ? `${prefix}.${k}` : k, v);
    } else {
      rows.push([prefix, Array.isArray(value) ? value.join(', ') : typeof value === 'number' ? String(Number(value.toFixed(2))) : String(value)]);
    }
  };
  walk('', result);
  return (
    <div class="inspection" data-testid="inspection">
      <dl>
        {rows
          .filter(([k]) => k !== 'object')
          .map(([k, v]) => (
            <>
              <dt>{k}</dt>
              <dd>{v}</dd>
            </>
          ))}
      </dl>
    </div>
  );
}

function FilePicker({ label, files, value, onChange, onUploaded, optional }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const upload = async (e) => {
    const input = e.currentTarget;  // React clears currentTarget once the handler awaits
    const file = input.files?.[0];
    if (!file) return;
    const form = new FormData();
    form.append('purpose', 'fine-tune');
    form.append('file', file);
    setBusy(true);
    setError('');
    try {
      const stored = await api.post('/v1/files', form);
      onUploaded(stored);
    } catch (err) {
      setError(`Cannot upload ${file.name}: ${describe(err)}`);
    } finally {
      setBusy(false);
      input.value = '';
    }
  };
  return (
    <div>
      <label>
        {label}
        <select value={value} onChange={(e) => onChange(e.currentTarget.value)}>
          <option value="">{optional ? '(none)' : '(pick or upload a file)'}</option>
          {files.map((f) => (
            <option value={f.id}>
              {f.filename} ({f.id})
            </option>
          ))}
        </select>
      </label>
      <label class="small">
        or upload JSONL
        <input type="file" accept=".jsonl,application/jsonl,application/x-ndjson" onChange={upload} disabled={busy} />
      </label>
      {error && (
        <p class="error small" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}

function NewJob({ onStarted }) {
  const { model } = useApp();
  const [files, setFiles] = useState([]);
  const [training, setTraining] = useState('');
  const [validation, setValidation] = useState('');
  const [inspection, setInspection] = useState(null);  // {file, result} | {file, error}
  const [suffix, setSuffix] = useState('');
  const [values, setValues] = useState({});
  const [autoLoad, setAutoLoad] = useState(false);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);

  const refreshFiles = useCallback(async () => {
    try {
      const list = await api.get('/v1/files');
      setFiles(list.data.filter((f) => f.purpose === 'fine-tune'));
    } catch (err) {
      setError(`Cannot list files: ${describe(err)}`);
    }
  }, []);
  useEffect(() => {
    refreshFiles();
  }, [refreshFiles]);

  useEffect(() => {
    if (!training) {
      setInspection(null);
      return;
    }
    let stale = false;
    setInspection({ file: training, pending: true });
    api
      .post('/v1/files/inspect', { file_id: training })
      .then((result) => !stale && setInspection({ file: training, result }))
      .catch((err) => !stale && setInspection({ file: training, error: describe(err) }));
    return () => {
      stale = true;
    };
  }, [training]);

  const start = async (e) => {
    e.preventDefault();
    setError('');
    let params;
    try {
      params = paramsRequest(values);
    } catch (err) {
      setError(err.message);
      return;
    }
    const body = { model: model.id, training_file: training, ...params };
    if (validation) body.validation_file = validation;
    if (suffix.trim()) body.suffix = suffix.trim();
    if (autoLoad) body.auto_load = true;
    setBusy(true);
    try {
      const job = await api.post('/v1/fine_tuning/jobs', body);
      onStarted(job);
    } catch (err) {
      setError(`Cannot start: ${describe(err)}`);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="train-form" onSubmit={start} aria-label="New training job">
      <h2>Train an adapter</h2>
      <fieldset>
        <legend>Data</legend>
        <FilePicker
          label="Training file"
          files={files}
          value={training}
          onChange={setTraining}
          onUploaded={async (f) => {
            await refreshFiles();
            setTraining(f.id);
          }}
        />
        {inspection?.pending && <p class="muted small">Inspecting…</p>}
        {inspection?.error && (
          <p class="error small" role="alert">
            {inspection.error}
          </p>
        )}
        {inspection?.result && <Inspection result={inspection.result} />}
        <FilePicker
          label="Validation file"
          optional
          files={files}
          value={validation}
          onChange={setValidation}
          onUploaded={async (f) => {
            await refreshFiles();
            setValidation(f.id);
          }}
        />
      </fieldset>
      <fieldset>
        <legend>Parameters</legend>
        <label>
          adapter id (suffix)
          <input name="suffix" value={suffix} onInput={(e) => setSuffix(e.currentTarget.value)} placeholder="made from the job id" />
        </label>
        <div class="params">
          {PARAMS.map((p) => (
            <label>
              {p.name}
              <input
                name={p.name}
                value={values[p.name] ?? ''}
                placeholder={p.def === '' ? '–' : p.def}
                onInput={(e) => setValues({ ...values, [p.name]: e.currentTarget.value })}
              />
              <span class="hint">{p.hint}</span>
            </label>
          ))}
        </div>
        <label class="choice">
          <input type="checkbox" checked={autoLoad} onChange={(e) => setAutoLoad(e.currentTarget.checked)} />
          load the adapter into the server when the job succeeds
        </label>
      </fieldset>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <button type="submit" class="primary" disabled={busy || !training}>
        Start training
      </button>
    </form>
  );
}

function JobList({ jobs, selected }) {
  if (!jobs.length) return <p class="muted">No training jobs yet.</p>;
  return (
    <div class="table-wrap">
      <table class="jobs">
        <thead>
          <tr>
            <th>job</th>
            <th>status</th>
            <th>adapter</th>
            <th>created</th>
          </tr>
        </thead>
        <tbody>
          {jobs.map((j) => (
            <tr class={j.id === selected ? 'selected' : ''} data-job={j.id}>
              <td>
                <a href={`#/train/${encodeURIComponent(j.id)}`}>{j.id}</a>
              </td>
              <td>
                <span class={`badge state-${j.status}`}>{j.status}</span>
              </td>
              <td>{j.fine_tuned_model ?? j.suffix ?? '–'}</td>
              <td class="small">{j.created_at ? new Date(j.created_at * 1000).toLocaleString() : ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export function TrainPage() {
  const { route } = useApp();
  const [jobs, setJobs] = useState([]);
  const [error, setError] = useState('');
  const selected = route.rest[0] || jobs[0]?.id || null;

  const refreshJobs = useCallback(async () => {
    try {
      const list = await api.get('/v1/fine_tuning/jobs?limit=20');
      setJobs(list.data);
      setError('');
    } catch (err) {
      setError(`Cannot list jobs: ${describe(err)}`);
    }
  }, []);
  useEffect(() => {
    refreshJobs();
    const timer = setInterval(() => {
      if (!document.hidden) refreshJobs();
    }, 5000);
    return () => clearInterval(timer);
  }, [refreshJobs]);

  return (
    <div class="train-layout">
      <NewJob
        onStarted={(job) => {
          refreshJobs();
          navigate('train', job.id);
        }}
      />
      <div class="job-view">
        <h2>Jobs</h2>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <JobList jobs={jobs} selected={selected} />
        {selected && <JobView jobId={selected} onChanged={refreshJobs} />}
      </div>
    </div>
  );
}
