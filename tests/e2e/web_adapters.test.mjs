// The web page's Adapters and Status pages in a real browser against
// `graft serve`: the three states, load and unload changing /v1/adapters,
// the 409 of unloading an adapter in use, the server default; the status
// page's model facts and live counters.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { GRAFT_BIN, WORK_DIR, startServer, testModel, getJson, postRaw } from './graft.mjs';
import { openBrowser, openPage, until } from './browser.mjs';

const XDG = path.join(WORK_DIR, 'web-adapters-xdg');
const STORE = path.join(XDG, 'graft', 'adapters');

function makeAdapters() {
  rmSync(XDG, { recursive: true, force: true });
  mkdirSync(STORE, { recursive: true });
  const make = (args) => execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--strength', '1', ...args], { stdio: 'pipe' });
  make(['--peft', path.join(STORE, 'poet'), '--rank', '8', '--seed', '1', '--stamp']);
  make(['--gguf', path.join(STORE, 'pirate.gguf'), '--rank', '4', '--seed', '2', '--targets', 'attn']);
  make(['--peft', path.join(STORE, 'lawyer'), '--rank', '4', '--seed', '3', '--stamp']);
  execFileSync(GRAFT_BIN, ['adapters', 'stamp', 'lawyer', '--base', testModel(), '--task', 'contracts', '--dataset', 'clauses.jsonl'],
    { stdio: 'pipe', env: { ...process.env, XDG_DATA_HOME: XDG } });
  // The final losses graft train records.
  const meta = path.join(STORE, 'lawyer', 'graft_adapter.json');
  writeFileSync(meta, JSON.stringify({ ...JSON.parse(readFileSync(meta, 'utf8')), training: { train_loss: 0.1234, val_loss: 0.4567 } }));
}

async function loadedIds(server) {
  return (await getJson(server, '/v1/adapters')).body.data.map((a) => a.id).sort();
}

const row = (page, id) => page.locator(`tr[data-adapter-row="${id}"]`);

describe('web page: adapters and status', () => {
  let server;
  let browser;
  let page;
  let problems;

  before(async () => {
    makeAdapters();
    server = await startServer(['--force-adapter', 'poet'], { ctx: 4096, env: { XDG_DATA_HOME: XDG } });
    browser = await openBrowser();
    ({ page, problems } = await openPage(browser.context, `${server.baseURL}/#/adapters`));
    await row(page, 'lawyer').waitFor();
  });
  after(async () => {
    await browser?.close();
    assert.equal(await server.stop(), 0, server.log());
  });

  it('lists every adapter with its state and metadata, the default marked', async () => {
    assert.equal(await row(page, 'poet').locator('[data-state]').textContent(), 'loaded');
    assert.equal(await row(page, 'poet').locator('.state-default').textContent(), 'default');
    assert.equal(await row(page, 'pirate').locator('[data-state]').textContent(), 'available');
    const lawyer = await row(page, 'lawyer').textContent();
    assert.match(lawyer, /contracts/);
    assert.match(lawyer, /clauses\.jsonl/);
    assert.match(lawyer, /0\.123 \/ 0\.457/);
    assert.match(await row(page, 'poet').textContent(), /\d+ ms/, 'the load time of a loaded adapter');
  });

  it('loads and unloads with the buttons, and /v1/adapters follows', async () => {
    await row(page, 'pirate').getByRole('button', { name: 'Load' }).click();
    await page.getByTestId('adapters-message').filter({ hasText: 'Loaded pirate' }).waitFor();
    assert.deepEqual(await loadedIds(server), ['pirate', 'poet']);
    await row(page, 'pirate').locator('[data-state]', { hasText: 'loaded' }).waitFor();
    await row(page, 'pirate').getByRole('button', { name: 'Unload' }).click();
    await page.getByTestId('adapters-message').filter({ hasText: 'Unloaded pirate' }).waitFor();
    assert.deepEqual(await loadedIds(server), ['poet']);
    await row(page, 'pirate').locator('[data-state]', { hasText: 'available' }).waitFor();
  });

  it('shows the 409 of unloading an adapter in use, and of the default', async () => {
    assert.equal((await postRaw(server, '/v1/adapters', JSON.stringify({ id: 'lawyer' }))).status, 200);
    await row(page, 'lawyer').getByRole('button', { name: 'Unload' }).waitFor();
    // A long request keeps lawyer in use while the page tries to unload it.
    const controller = new AbortController();
    const res = await fetch(`${server.baseURL}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: controller.signal,
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 3800, stream: true, ignore_eos: true, adapter: 'lawyer' }),
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    await reader.read();
    try {
      await row(page, 'lawyer').getByRole('button', { name: 'Unload' }).click();
      const message = page.getByTestId('adapters-message');
      await message.filter({ hasText: 'Cannot unload lawyer' }).waitFor();
      const text = await message.textContent();
      assert.match(text, /409/);
      assert.match(text, /in use/);
      assert.deepEqual(await loadedIds(server), ['lawyer', 'poet']);
    } finally {
      controller.abort();
      await reader.read().catch(() => {});
    }
    // The forced default cannot go either.
    await row(page, 'poet').getByRole('button', { name: 'Unload' }).click();
    await page.getByTestId('adapters-message').filter({ hasText: 'Cannot unload poet' }).waitFor();
    assert.match(await page.getByTestId('adapters-message').textContent(), /409/);
    assert.deepEqual(problems, []);
  });

  it('shows the model, its context and KV budget, the version and live counters', async () => {
    await page.getByRole('link', { name: 'Status' }).click();
    const facts = page.locator('.status-page');
    await facts.getByText('4096 tokens', { exact: true }).waitFor();
    const health = (await getJson(server, '/health')).body;
    await facts.getByText(health.version, { exact: true }).waitFor();
    const stats = (await getJson(server, '/stats')).body;
    await facts.getByText(new RegExp(`^${stats.batch.kv_budget_tokens} tokens`)).waitFor();
    // A request served meanwhile shows in the live counters.
    const served = stats.requests.served;
    assert.equal((await postRaw(server, '/v1/completions', JSON.stringify({ prompt: 'Hi', max_tokens: 4, adapter: 'none' }))).status, 200);
    await until(async () => (await page.getByTestId('served').textContent()).startsWith(`${served + 1} /`), 'the served count to update');
    assert.ok((await page.locator('.status-page .uplot').count()) >= 4, 'the charts are drawn');
    assert.deepEqual(problems, []);
  });
});
