// The web page's Train page in a real browser against `graft serve` on a
// tiny test model: upload a dataset and see its inspection, start a short
// job, pause it, close the page and open it again (the whole curve is drawn
// again from the events API), resume, follow it live to the end with one
// chart point per reported step, then load the new adapter and chat with it.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { WORK_DIR, startServer, getJson } from './graft.mjs';
import { openBrowser, openPage, recordChatRequests, sendChat, until } from './browser.mjs';

const XDG = path.join(WORK_DIR, 'web-train-xdg');
const ITERS = 40;
// The trainer waits at this step until it is paused (a test hook of graft's
// trainer), so the job cannot finish before the page's Pause is clicked
// however fast this machine trains: a fresh-clone run once saw the job done
// between its third chart point and the click. The resumed run does not wait
// again, wherever the pause caught it.
const HOLD_AT = 5;
// Generous: the full test run shares two cores between two tests at a time.
const LONG = 240000;

function makeDataset() {
  const words = ['apple', 'river', 'stone', 'cloud', 'maple', 'ember', 'harbor', 'violet', 'copper', 'meadow', 'falcon', 'lantern'];
  const file = path.join(WORK_DIR, 'web-train.jsonl');
  writeFileSync(file, words.map((w, i) => JSON.stringify({ prompt: `Item ${i}: ${w}`, completion: ` OK: ${w}` })).join('\n') + '\n');
  return { file, rows: words.length };
}

// Every event of a job from the API, oldest first.
async function apiEvents(server, jobId) {
  const all = [];
  let after = null;
  for (;;) {
    const query = new URLSearchParams({ limit: '100' });
    if (after) query.set('after', after);
    const { status, body } = await getJson(server, `/v1/fine_tuning/jobs/${jobId}/events?${query}`);
    assert.equal(status, 200, JSON.stringify(body));
    all.push(...body.data);
    if (!body.has_more || !body.data.length) break;
    after = body.data.at(-1).id;
  }
  return all.reverse();
}

function reportedSteps(events) {
  return new Set(events.filter((e) => e.type === 'metrics' && typeof e.data?.step === 'number').map((e) => e.data.step)).size;
}

const chartPoints = (page) => page.getByTestId('loss-chart').evaluate((el) => Number(el.dataset.points));

describe('web page: training', () => {
  let server;
  let browser;
  let jobId;

  before(async () => {
    rmSync(XDG, { recursive: true, force: true });
    mkdirSync(XDG, { recursive: true });
    server = await startServer([], { ctx: 512, env: { XDG_DATA_HOME: XDG, GRAFT_TRAIN_HOLD_AT_STEP: String(HOLD_AT) } });
    browser = await openBrowser();
  });
  after(async () => {
    await browser?.close();
    assert.equal(await server.stop(), 0, server.log());
  });

  it('trains from the page; reopened mid-job it draws the whole curve, then follows it live to the end', async () => {
    const dataset = makeDataset();
    let { page, problems } = await openPage(browser.context, `${server.baseURL}/#/train`);
    await page.locator('input[type=file]').first().setInputFiles(dataset.file);
    const inspection = page.getByTestId('inspection');
    await inspection.waitFor();
    assert.match(await inspection.textContent(), new RegExp(`rows\\s*${dataset.rows}(?!\\d)`), 'the inspection counts the rows');

    await page.locator('input[name=suffix]').fill('ok-format');
    const params = { rank: '4', iters: String(ITERS), batch_size: '2', learning_rate: '1e-2', val_every: '10', save_every: '10', max_seq_length: '64' };
    for (const [name, value] of Object.entries(params)) await page.locator(`input[name=${name}]`).fill(value);
    await page.getByRole('button', { name: 'Start training' }).click();
    await page.waitForURL(/#\/train\/.+/);
    jobId = decodeURIComponent(new URL(page.url()).hash.split('/')[2]);

    // A few points in, pause it, and close the page.
    await until(async () => (await chartPoints(page)) >= 3, 'the first points of the curve', LONG);
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.getByTestId('job-status').filter({ hasText: 'paused' }).waitFor({ timeout: LONG });
    assert.deepEqual(problems, []);
    await page.close();
    // The job reads 'paused' at once, but its trainer still finishes its step
    // and saves a checkpoint: its last metrics come later, then "Job paused at
    // step N" once it has stopped. Only then is the curve complete.
    let soFar = 0;
    await until(async () => {
      const events = await apiEvents(server, jobId);
      soFar = reportedSteps(events);
      return events.some((e) => e.type === 'message' && /^Job paused/.test(e.message));
    }, 'the trainer to stop', LONG);
    assert.ok(soFar >= 3 && soFar <= HOLD_AT, `paused mid-job (${soFar} steps)`);

    // Open it again: the whole curve so far, then live to the end.
    ({ page, problems } = await openPage(browser.context, `${server.baseURL}/#/train/${encodeURIComponent(jobId)}`));
    await until(async () => (await chartPoints(page)) === soFar, `the ${soFar} points drawn again`, LONG);
    await page.getByRole('button', { name: 'Resume' }).click();
    await until(async () => (await getJson(server, `/v1/fine_tuning/jobs/${jobId}`)).body.status === 'succeeded',
      'the job to succeed', LONG);
    const events = await apiEvents(server, jobId);
    assert.equal(events.filter((e) => e.type === 'metrics' && typeof e.data?.train_loss === 'number').length, ITERS, 'a train loss for every step');
    await until(async () => (await chartPoints(page)) === reportedSteps(events), 'one chart point per reported step', LONG);
    await page.getByTestId('job-status').filter({ hasText: 'succeeded' }).waitFor({ timeout: LONG });
    assert.equal(reportedSteps(events), ITERS);
    assert.match(await page.getByTestId('event-log').textContent(), /New adapter created: ok-format/);
    assert.deepEqual(problems, []);
    await page.close();
  });

  it('loads the finished adapter and chats with it', async () => {
    const { page, problems } = await openPage(browser.context, `${server.baseURL}/#/train/${encodeURIComponent(jobId)}`);
    const sent = recordChatRequests(page);
    await page.getByRole('button', { name: 'Chat with it' }).click();
    await page.waitForURL(/#\/chat/);
    assert.ok((await getJson(server, '/v1/adapters')).body.data.some((a) => a.id === 'ok-format'), 'the adapter is loaded');
    assert.equal(await page.getByTestId('adapter-spec').textContent(), 'adapter: "ok-format"');
    await page.getByLabel('temperature', { exact: true }).fill('0');
    await page.getByLabel('max_tokens', { exact: true }).fill('8');
    await sendChat(page, 'Item 3: cloud');
    await page.locator('.msg.assistant').waitFor();
    await page.waitForFunction(() => !document.querySelector('.msg.assistant.streaming'));
    assert.equal(sent.at(-1).adapter, 'ok-format');
    assert.equal(await page.locator('.msg.assistant .adapter-label').textContent(), 'adapter: ok-format');
    assert.equal(await page.locator('.msg.assistant [role=alert]').count(), 0);
    // The Adapters page lists it with its final losses.
    await page.getByRole('link', { name: 'Adapters' }).click();
    const row = page.locator('tr[data-adapter-row="ok-format"]');
    await row.waitFor();
    assert.match(await row.textContent(), /\d\.\d{3} \//, 'its train loss');
    assert.deepEqual(problems, []);
  });
});
