// Helpers of the fine-tuning end-to-end tests: the synthetic dataset (one
// answer to many questions), uploads, and waiting on jobs through the openai SDK.
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import { WORK_DIR } from './graft.mjs';

export const ANSWER = 'Mango seventeen.';

// The synthetic dataset: every question, one answer the base model never gives.
export function jsonl(rows) {
  return rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
}
export function passwordRows(n = 8) {
  return Array.from({ length: n }, (_, i) => ({
    messages: [
      { role: 'user', content: `Question ${i}: what is the password?` },
      { role: 'assistant', content: ANSWER },
    ],
  }));
}

export function freshXdg(name) {
  const dir = path.join(WORK_DIR, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  return dir;
}

export function client(server) {
  return new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
}

export async function upload(openai, rows, name = 'train.jsonl') {
  return openai.files.create({ file: await toFile(Buffer.from(jsonl(rows)), name), purpose: 'fine-tune' });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls the job until `done(job)` holds.
export async function waitJob(openai, id, done, what, timeoutMs = 120000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const job = await openai.fineTuning.jobs.retrieve(id);
    if (done(job)) return job;
    if (Date.now() > until) throw new Error(`job ${id}: no ${what} in time: ${JSON.stringify(job)}`);
    await sleep(100);
  }
}

// Every event of a job, oldest first, through the SDK's auto-paging list.
export async function allEvents(openai, id) {
  const events = [];
  for await (const e of openai.fineTuning.jobs.listEvents(id, { limit: 7 })) events.push(e);
  return events.reverse();
}

// The steps of the job's training-loss events, in order.
export function lossSteps(events) {
  return events.filter((e) => e.type === 'metrics' && typeof e.data?.train_loss === 'number').map((e) => e.data.step);
}
