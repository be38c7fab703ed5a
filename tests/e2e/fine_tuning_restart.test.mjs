// Training jobs survive crashes: `graft serve` and its trainer SIGKILLed
// mid-job, then the server started again on the same data folder, resumes the
// job from its last checkpoint and finishes it with every step reported once;
// a trainer killed alone is retried from its checkpoint. Real trainer, tiny model.
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { startServer } from './graft.mjs';
import { allEvents, client, freshXdg, lossSteps, passwordRows, sleep, upload, waitJob } from './training.mjs';

const XDG = freshXdg('fine-tuning-restart-xdg');
const STORE = path.join(XDG, 'graft', 'adapters');
const ITERS = 16;
const start = () => startServer(['--train-threads', '2'], { ctx: 512, env: { XDG_DATA_HOME: XDG } });
const range = (n) => Array.from({ length: n }, (_, i) => i + 1);

// The pid of the server's trainer child (each runs in its own process group).
function trainerOf(server) {
  try {
    const pids = execFileSync('pgrep', ['-P', String(server.pid)], { encoding: 'utf8' }).trim().split('\n');
    return pids.length === 1 && pids[0] ? Number(pids[0]) : 0;
  } catch {
    return 0;  // none
  }
}

// Waits for a checkpoint at or after `step`; returns its step.
async function checkpointAfter(openai, id, step) {
  for (const until = Date.now() + 90000; Date.now() < until; await sleep(50)) {
    const page = await openai.fineTuning.jobs.checkpoints.list(id);
    const best = Math.max(0, ...page.data.map((c) => c.step_number));
    if (best >= step) return best;
  }
  throw new Error(`no checkpoint at step ${step} or later`);
}

describe('fine-tuning jobs survive crashes', () => {
  let server;
  after(async () => { if (server?.alive()) assert.equal(await server.stop(), 0, server.log()); });

  it('resumes from the last checkpoint after kill -9 of the server and its trainer, with no step twice or missing', async () => {
    server = await start();
    let openai = client(server);
    const file = await upload(openai, passwordRows());
    const job = await openai.fineTuning.jobs.create({
      model: 'tiny', training_file: file.id, suffix: 'survivor',
      lora: { rank: 4, iters: ITERS, learning_rate: 5e-3, save_every: 4, max_seq_length: 64 },
    });
    const checkpoint = await checkpointAfter(openai, job.id, 4);
    const before = lossSteps(await allEvents(openai, job.id));
    assert.ok(before.length >= checkpoint && before.length < ITERS, `mid-job: ${before.length} steps`);
    const trainer = trainerOf(server);
    assert.ok(trainer > 0, 'the trainer runs as a child of the server');

    await server.kill9();
    process.kill(-trainer, 'SIGKILL');
    for (let i = 0; i < 100 && existsSync(`/proc/${trainer}`); ++i) await sleep(20);

    server = await start();
    openai = client(server);
    const done = await waitJob(openai, job.id, (j) => ['succeeded', 'failed', 'cancelled'].includes(j.status), 'end');
    assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
    const events = await allEvents(openai, job.id);
    const resumed = events.map((e) => e.message.match(/^Resumed from step (\d+)/)).filter(Boolean);
    assert.equal(resumed.length, 1, 'one resume');
    assert.ok(Number(resumed[0][1]) >= checkpoint, `resumed from step ${resumed[0][1]}, checkpoint ${checkpoint}`);
    assert.deepEqual(lossSteps(events), range(ITERS), 'every step once, in order');
    assert.ok(existsSync(path.join(STORE, 'survivor', 'adapter_model.safetensors')));
    assert.deepEqual(readdirSync(STORE).filter((n) => n.startsWith('.')), [], 'no half adapter in the store');
  });

  it('retries a trainer killed alone from its checkpoint', async () => {
    const openai = client(server);
    const file = await upload(openai, passwordRows());
    const job = await openai.fineTuning.jobs.create({
      model: 'tiny', training_file: file.id, suffix: 'retried',
      lora: { rank: 4, iters: ITERS, learning_rate: 5e-3, save_every: 4, max_seq_length: 64 },
    });
    const checkpoint = await checkpointAfter(openai, job.id, 4);
    const trainer = trainerOf(server);
    assert.ok(trainer > 0);
    process.kill(-trainer, 'SIGKILL');

    const done = await waitJob(openai, job.id, (j) => ['succeeded', 'failed', 'cancelled'].includes(j.status), 'end');
    assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
    const events = await allEvents(openai, job.id);
    const retry = events.find((e) => /killed by signal|signal/.test(e.message) && /retrying from step \d+/.test(e.message));
    assert.ok(retry, events.map((e) => e.message).join('\n'));
    assert.ok(Number(retry.message.match(/retrying from step (\d+)/)[1]) >= checkpoint);
    assert.deepEqual(lossSteps(events), range(ITERS), 'every step once, in order');
    assert.ok(server.alive(), 'the server lives on');
  });
});

// A full disk or a crash while the trainer writes the adapter: the job fails
// with the reason, and the store shows no adapter, not even a hidden half one.
// GRAFT_TRAIN_PUBLISH_FAULT (a test hook of the trainer) makes the write fail
// as a full disk does, or kills the trainer half way through it.
describe('a job whose adapter cannot be written leaves no half adapter', () => {
  for (const fault of ['enospc', 'kill']) {
    it(`fault '${fault}': the job fails clearly and the store stays clean`, async () => {
      const xdg = freshXdg(`fine-tuning-publish-${fault}-xdg`);
      const store = path.join(xdg, 'graft', 'adapters');
      const server = await startServer(['--train-threads', '2', '--train-retries', '1'],
        { ctx: 512, env: { XDG_DATA_HOME: xdg, GRAFT_TRAIN_PUBLISH_FAULT: fault } });
      try {
        const openai = client(server);
        const file = await upload(openai, passwordRows());
        const job = await openai.fineTuning.jobs.create({
          model: 'tiny', training_file: file.id, suffix: `half-${fault}`,
          lora: { rank: 4, iters: 4, save_every: 2, max_seq_length: 64 },
        });
        const failed = await waitJob(openai, job.id, (j) => ['succeeded', 'failed', 'cancelled'].includes(j.status), 'end', 240000);
        assert.equal(failed.status, 'failed');
        assert.equal(failed.fine_tuned_model, null);
        if (fault === 'enospc') {
          assert.match(failed.error.message, /No space left on device/);
        } else {
          assert.match(failed.error.message, /killed by SIGKILL|signal 9/i, failed.error.message);
          assert.ok((await allEvents(openai, job.id)).some((e) => /retrying from step 4/.test(e.message)), 'the crash was retried');
        }
        assert.deepEqual(existsSync(store) ? readdirSync(store) : [], [], 'nothing in the store, hidden or not');
        const available = await (await fetch(`${server.baseURL}/v1/adapters/available`)).json();
        assert.ok(!available.data.some((a) => a.id === `half-${fault}`), JSON.stringify(available));
      } finally {
        assert.equal(await server.stop(), 0, server.log());
      }
    });
  }
});
