// Training jobs over HTTP with the official openai SDK, against `graft serve`
// running the real trainer (`graft train --json` as a child) on the tiny test
// model: upload, create with OpenAI's hyperparameters and graft's `lora`,
// events/checkpoints/list pages, pause/resume/cancel, the finished adapter
// selected in a chat request, and bad input. Each server keeps its jobs under
// its own XDG_DATA_HOME in the work folder.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { toFile } from 'openai';
import { startServer, getJson, postRaw, testModel } from './graft.mjs';
import { allEvents, client, freshXdg, jsonl, lossSteps, passwordRows, sleep, upload, waitJob } from './training.mjs';

const range = (n) => Array.from({ length: n }, (_, i) => i + 1);

describe('fine-tuning jobs with the openai SDK', () => {
  let server;
  let openai;
  const XDG = freshXdg('fine-tuning-xdg');
  const STORE = path.join(XDG, 'graft', 'adapters');
  const ITERS = 20;

  before(async () => {
    server = await startServer(['--train-threads', '2', '--max-upload', '0.05'], { ctx: 512, env: { XDG_DATA_HOME: XDG } });
    openai = client(server);
  });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  let trainingFile;
  let finished;

  it('uploads a file, trains it to the end, and lists events and checkpoints', async () => {
    trainingFile = await upload(openai, passwordRows());
    assert.equal(trainingFile.object, 'file');
    assert.equal(trainingFile.purpose, 'fine-tune');
    assert.ok((await openai.files.list()).data.some((f) => f.id === trainingFile.id));

    const validationFile = await upload(openai, passwordRows(12).slice(8), 'valid.jsonl');
    const created = await openai.fineTuning.jobs.create({
      model: 'tiny',
      training_file: trainingFile.id,
      validation_file: validationFile.id,
      suffix: 'mango',
      seed: 7,
      hyperparameters: { batch_size: 4, learning_rate_multiplier: 2 },
      lora: { rank: 4, iters: ITERS, learning_rate: 5e-3, save_every: 10, val_every: 10, max_seq_length: 64, targets: ['q', 'v', 'o', 'down'] },
    });
    assert.equal(created.object, 'fine_tuning.job');
    assert.ok(['validating_files', 'queued', 'running'].includes(created.status), created.status);
    assert.equal(created.model, 'tiny');
    assert.equal(created.training_file, trainingFile.id);
    assert.equal(created.seed, 7);

    finished = await waitJob(openai, created.id, (j) => ['succeeded', 'failed', 'cancelled'].includes(j.status), 'end');
    assert.equal(finished.status, 'succeeded', JSON.stringify(finished.error));
    assert.equal(finished.fine_tuned_model, 'mango');
    assert.ok(finished.trained_tokens > 0);
    assert.equal(finished.hyperparameters.batch_size, 4);

    const events = await allEvents(openai, created.id);
    for (const e of events) {
      assert.equal(e.object, 'fine_tuning.job.event');
      assert.ok(['message', 'metrics'].includes(e.type), e.type);
    }
    assert.deepEqual(lossSteps(events), range(ITERS), 'one loss event per step, in order');
    const losses = events.filter((e) => e.type === 'metrics' && typeof e.data?.train_loss === 'number').map((e) => e.data.train_loss);
    const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
    assert.ok(mean(losses.slice(-5)) < mean(losses.slice(0, 5)), `the loss goes down: ${losses.map((x) => x.toFixed(2))}`);
    const last = events.filter((e) => e.type === 'metrics' && e.data.train_loss !== undefined).at(-1);
    for (const key of ['step', 'train_loss', 'tokens_per_s', 'eta_s']) assert.ok(key in last.data, key);
    assert.ok(events.some((e) => e.type === 'metrics' && typeof e.data.valid_loss === 'number'), 'validation losses');
    assert.ok(events.some((e) => /New adapter created: mango/.test(e.message)));

    const checkpoints = [];
    for await (const c of openai.fineTuning.jobs.checkpoints.list(created.id)) checkpoints.push(c);
    assert.deepEqual(checkpoints.map((c) => c.step_number).sort((a, b) => a - b), [10, 20]);
    assert.equal(checkpoints[0].object, 'fine_tuning.job.checkpoint');
    assert.equal(checkpoints[0].fine_tuning_job_id, created.id);

    const metrics = await (await fetch(`${server.baseURL}/metrics`)).text();
    assert.match(metrics, /^graft_training_jobs\{state="succeeded"\} 1$/m);
  });

  it('lands the adapter in the store, where it is available, loads, and a chat request selects it', async () => {
    assert.ok(existsSync(path.join(STORE, 'mango', 'adapter_model.safetensors')));
    assert.deepEqual(readdirSync(STORE).filter((n) => n.startsWith('.')), [], 'no half adapter left in the store');
    const available = await getJson(server, '/v1/adapters/available');
    assert.ok(available.body.data.some((a) => a.id === 'mango' && a.compatible), JSON.stringify(available.body));
    const loaded = await postRaw(server, '/v1/adapters', JSON.stringify({ id: 'mango' }));
    assert.equal(loaded.status, 200, loaded.text);

    const ask = (extra) => openai.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'Question 3: what is the password?' }],
      temperature: 0,
      max_tokens: 24,
      ...extra,
    });
    // The tiny model has random weights: 20 steps lower its loss on the
    // answer but do not make it say it. The adapter must change the answer,
    // and the selection must be reported back.
    const trained = await ask({ adapter: 'mango' });
    const base = await ask({});
    assert.notEqual(trained.choices[0].message.content, base.choices[0].message.content, 'the adapter changes the answer');
    assert.equal((await ask({ adapter: 'mango' })).choices[0].message.content, trained.choices[0].message.content,
      'greedy answers with the adapter are repeatable');
  });

  it('pages the job list, pauses, resumes and cancels; a cancelled job keeps its checkpoints and lands nothing', async () => {
    const long = { model: 'tiny', training_file: trainingFile.id, lora: { rank: 4, iters: 2000, save_every: 2, max_seq_length: 64 } };
    const a = await openai.fineTuning.jobs.create({ ...long, suffix: 'long-a' });
    const b = await openai.fineTuning.jobs.create({ ...long, suffix: 'long-b' });

    const ids = [];
    for await (const job of openai.fineTuning.jobs.list({ limit: 1 })) ids.push(job.id);
    assert.deepEqual(ids.slice(0, 2), [b.id, a.id], 'newest first');
    assert.ok(ids.includes(finished.id));
    assert.equal(new Set(ids).size, ids.length, 'no job twice across pages');

    // One job at a time: b waits for a.
    await waitJob(openai, a.id, (j) => j.status === 'running', 'start');
    await waitJob(openai, b.id, (j) => j.status !== 'validating_files', 'validation');
    assert.equal((await openai.fineTuning.jobs.retrieve(b.id)).status, 'queued');

    // Deleting a file a job uses is refused.
    await assert.rejects(openai.files.delete(trainingFile.id), (e) => e.status === 409);

    let checkpoint = 0;
    for (const until = Date.now() + 60000; checkpoint === 0 && Date.now() < until; await sleep(100)) {
      const page = await openai.fineTuning.jobs.checkpoints.list(a.id);
      checkpoint = Math.max(0, ...page.data.map((c) => c.step_number));
    }
    assert.ok(checkpoint > 0, 'a checkpoint of the long job');

    const paused = await openai.fineTuning.jobs.pause(a.id);
    assert.ok(['running', 'paused'].includes(paused.status), paused.status);
    await waitJob(openai, a.id, (j) => j.status === 'paused', 'pause');
    // The job reads 'paused' at once; its trainer finishes its step, saves a
    // checkpoint and stops, and then "Job paused at step N" comes. Steps
    // counted before that could be outrun by the paused trainer's last ones.
    let stepsAtPause = 0;
    for (const until = Date.now() + 120000; ; await sleep(100)) {
      const ev = await allEvents(openai, a.id);
      stepsAtPause = lossSteps(ev).length;
      if (ev.some((e) => e.type === 'message' && /^Job paused/.test(e.message))) break;
      if (Date.now() > until) throw new Error('the paused trainer did not stop');
    }
    // While a is paused, the queue moves on to b.
    await waitJob(openai, b.id, (j) => j.status === 'running', 'start of b');
    assert.equal((await openai.fineTuning.jobs.cancel(b.id)).id, b.id);
    await waitJob(openai, b.id, (j) => j.status === 'cancelled', 'cancel of b');

    await openai.fineTuning.jobs.resume(a.id);
    await waitJob(openai, a.id, (j) => j.status === 'running', 'resume');
    const events = await (async () => {
      for (const until = Date.now() + 60000; Date.now() < until; await sleep(100)) {
        const ev = await allEvents(openai, a.id);
        if (lossSteps(ev).length > stepsAtPause + 1) return ev;
      }
      throw new Error('no step after the resume');
    })();
    assert.ok(events.some((e) => /Resumed from step \d+/.test(e.message)), 'the resume says where from');
    const steps = lossSteps(events);
    assert.deepEqual(steps, range(steps.length), 'no step twice, no step missing');

    const cancelled = await openai.fineTuning.jobs.cancel(a.id);
    assert.equal(cancelled.id, a.id);
    await waitJob(openai, a.id, (j) => j.status === 'cancelled', 'cancel');
    const kept = await openai.fineTuning.jobs.checkpoints.list(a.id);
    assert.ok(kept.data.length > 0, 'checkpoints are kept');
    for (const id of ['long-a', 'long-b']) assert.ok(!existsSync(path.join(STORE, id)), `no adapter ${id}`);
    assert.deepEqual(readdirSync(STORE).filter((n) => n.startsWith('.')), [], 'no half adapter left in the store');
    await assert.rejects(openai.fineTuning.jobs.cancel(a.id), (e) => e.status === 409);

    // Nothing uses the file any more: it can go.
    assert.equal((await openai.files.delete(trainingFile.id)).deleted, true);
  });

  it('refuses bad input with the status and the field at fault', async () => {
    const file = await upload(openai, passwordRows(4));
    const bad = async (body, status, param) => {
      await assert.rejects(openai.fineTuning.jobs.create({ model: 'tiny', training_file: file.id, ...body }), (e) => {
        assert.equal(e.status, status, e.message);
        if (param) assert.equal(e.param, param, e.message);
        return true;
      });
    };
    await bad({ learning_rate: 0.1 }, 400, 'learning_rate');
    await bad({ hyperparameters: { n_epochs: -1 } }, 400, 'hyperparameters.n_epochs');
    await bad({ hyperparameters: { batch_size: 'big' } }, 400, 'hyperparameters.batch_size');
    await bad({ lora: { rank: 100000 } }, 400, 'lora.rank');
    await bad({ lora: { ranks: 4 } }, 400, 'lora.ranks');
    await bad({ lora: { targets: ['q', 'nose'] } }, 400, 'lora.targets');
    await bad({ model: 'gpt-4o-mini' }, 400, 'model');
    await bad({ training_file: 'file-nope' }, 404, 'training_file');

    // Uploads: not JSONL, and too large for --max-upload.
    await assert.rejects(openai.files.create({ file: await toFile(Buffer.from('just some text\n'), 'a.jsonl'), purpose: 'fine-tune' }),
      (e) => e.status === 400);
    await assert.rejects(openai.files.create({ file: await toFile(Buffer.from(jsonl(passwordRows(1000))), 'big.jsonl'), purpose: 'fine-tune' }),
      (e) => e.status === 413);
    await assert.rejects(openai.files.retrieve('file-nope'), (e) => e.status === 404);

    // Line 17 not JSON: the upload is refused naming it.
    const rows = jsonl(passwordRows(20)).split('\n');
    const notJson = [...rows];
    notJson[16] = '{"messages": [{"role": "user", "content": "no end"}';
    await assert.rejects(openai.files.create({ file: await toFile(Buffer.from(notJson.join('\n')), 'broken.jsonl'), purpose: 'fine-tune' }),
      (e) => e.status === 400 && /line 17/.test(e.message));
    // Line 17 JSON but no example (no assistant turn): the job fails naming it, before any training.
    const noAnswer = [...rows];
    noAnswer[16] = JSON.stringify({ messages: [{ role: 'user', content: 'and the answer?' }] });
    const broken = await openai.files.create({ file: await toFile(Buffer.from(noAnswer.join('\n')), 'no-answer.jsonl'), purpose: 'fine-tune' });
    const job = await openai.fineTuning.jobs.create({ model: 'tiny', training_file: broken.id });
    const failed = await waitJob(openai, job.id, (j) => j.status === 'failed' || j.status === 'succeeded', 'end');
    assert.equal(failed.status, 'failed');
    assert.match(failed.error.message, /line 17/);
    assert.equal(failed.error.param, 'training_file');
    assert.equal(lossSteps(await allEvents(openai, job.id)).length, 0, 'no training step');
  });
});

// The trainer's synthetic "memorize" dataset (tests/data/train/learn, made by
// tests/train/make_learn_data.py): prompts and made-up two-word answers, here
// as chat turns. Trained on four of them (120 steps, about 10 s on two
// cores), the adapter makes greedy chat answer each prompt with exactly its
// answer and stop there. The model is the tiny one with all output rows at
// one scale, so that the adapter can make it end its answer (<|im_end|>).
describe('a trained adapter gives the trained answers in chat', () => {
  const MEMORIZE = fileURLToPath(new URL('../data/train/learn/memorize/train.jsonl', import.meta.url));
  const examples = readFileSync(MEMORIZE, 'utf8').trim().split('\n').slice(0, 4).map((line) => JSON.parse(line))
    .map(({ prompt, completion }) => ({ question: prompt, answer: completion.trim() }));
  let server;
  let openai;

  before(async () => {
    const XDG = freshXdg('fine-tuning-memorize-xdg');
    server = await startServer(['--train-threads', '2'], { ctx: 512, env: { XDG_DATA_HOME: XDG }, model: testModel({ learnable: true }) });
    openai = client(server);
  });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  it('trains on the answers, loads the adapter, and chat with it answers each prompt exactly', async () => {
    const rows = examples.map(({ question, answer }) => ({
      messages: [{ role: 'user', content: question }, { role: 'assistant', content: answer }],
    }));
    const file = await upload(openai, rows, 'memorize.jsonl');
    const job = await openai.fineTuning.jobs.create({
      model: 'tiny',
      training_file: file.id,
      suffix: 'memorize',
      seed: 1,
      hyperparameters: { batch_size: examples.length },
      lora: { rank: 8, iters: 120, learning_rate: 5e-3, max_seq_length: 64, save_every: 0, val_every: 1000 },
    });
    const done = await waitJob(openai, job.id, (j) => ['succeeded', 'failed', 'cancelled'].includes(j.status), 'end', 300000);
    assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
    const loaded = await postRaw(server, '/v1/adapters', JSON.stringify({ id: 'memorize' }));
    assert.equal(loaded.status, 200, loaded.text);

    const ask = async (question, extra) => (await openai.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: question }],
      temperature: 0,
      max_tokens: 24,
      ...extra,
    })).choices[0];
    for (const { question, answer } of examples) {
      const trained = await ask(question, { adapter: 'memorize' });
      assert.deepEqual({ content: trained.message.content, finish: trained.finish_reason }, { content: answer, finish: 'stop' }, question);
      assert.notEqual((await ask(question, {})).message.content, answer, `the base model alone does not answer ${question}`);
    }
  });
});
