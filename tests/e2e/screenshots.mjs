// A scripted session on graft's web page that saves a screenshot of each
// page: Chat (with adapters selected), Adapters, Train (a job mid-run, with
// its loss curve) and Status. Run by scripts/screenshots.sh.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { GRAFT_BIN, WORK_DIR, startServer, testModel, postRaw } from './graft.mjs';
import { openBrowser, openPage, sendChat } from './browser.mjs';

const OUT = path.resolve(process.argv[2] ?? 'screenshots');
const XDG = path.join(WORK_DIR, 'screenshots-xdg');
const STORE = path.join(XDG, 'graft', 'adapters');

function setUp() {
  rmSync(XDG, { recursive: true, force: true });
  mkdirSync(STORE, { recursive: true });
  mkdirSync(OUT, { recursive: true });
  const make = (args) => execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--strength', '1', ...args], { stdio: 'pipe' });
  make(['--peft', path.join(STORE, 'poet'), '--rank', '8', '--seed', '1', '--stamp']);
  make(['--gguf', path.join(STORE, 'pirate.gguf'), '--rank', '4', '--seed', '2', '--targets', 'attn']);
  make(['--peft', path.join(STORE, 'lawyer'), '--rank', '16', '--seed', '3', '--stamp']);
  execFileSync(GRAFT_BIN, ['adapters', 'stamp', 'lawyer', '--base', testModel(), '--task', 'contracts', '--dataset', 'clauses.jsonl'],
    { stdio: 'pipe', env: { ...process.env, XDG_DATA_HOME: XDG } });
  // A small dataset: always answer "OK: <the prompt's last word>".
  const words = ['apple', 'river', 'stone', 'cloud', 'maple', 'ember', 'harbor', 'violet', 'copper', 'meadow', 'falcon', 'lantern'];
  const lines = words.map((w, i) => JSON.stringify({ prompt: `Item ${i}: ${w}`, completion: ` OK: ${w}` }));
  const data = path.join(WORK_DIR, 'screenshots-train.jsonl');
  writeFileSync(data, lines.join('\n') + '\n');
  return data;
}

async function shot(page, name) {
  const file = path.join(OUT, `${name}.png`);
  await page.screenshot({ path: file });
  console.log(`screenshots: ${file}`);
}

async function idle(page) {
  await page.waitForFunction(() => !document.querySelector('.msg.assistant.streaming'));
}

const dataset = setUp();
const server = await startServer([], { ctx: 4096, env: { XDG_DATA_HOME: XDG } });
const browser = await openBrowser({ width: 1400, height: 860 });
try {
  await postRaw(server, '/v1/adapters', JSON.stringify({ id: 'poet' }));
  const { page, problems } = await openPage(browser.context, server.baseURL);
  await page.locator('.topbar .model', { hasText: 'tiny' }).waitFor();

  // Chat: a plain question, then poet at half strength stacked with pirate.
  await page.getByLabel('System prompt').fill('You are a helpful assistant.');
  await page.getByLabel('max_tokens', { exact: true }).fill('40');
  await sendChat(page, 'Write a haiku about autumn.');
  await page.locator('.msg.assistant').first().waitFor();
  await idle(page);
  await page.locator('input[data-adapter="poet"]').check();
  await page.locator('input[data-adapter="pirate"]').check();
  await page.getByText(/Loaded pirate into the server/).waitFor();
  await page.locator('input[data-scale="poet"]').fill('0.5');
  await sendChat(page, 'Now as a pirate poet, please.');
  await page.locator('.msg.assistant').nth(1).waitFor();
  await idle(page);
  await shot(page, 'chat');

  await page.getByRole('link', { name: 'Adapters' }).click();
  await page.locator('tr[data-adapter-row="lawyer"]').waitFor();
  await shot(page, 'adapters');

  // Train: upload the dataset, start a short job, wait for a few points of the curve.
  await page.getByRole('link', { name: 'Train' }).click();
  await page.locator('input[type=file]').first().setInputFiles(dataset);
  await page.getByTestId('inspection').waitFor();
  await page.locator('input[name=suffix]').fill('ok-format');
  for (const [name, value] of [['rank', '8'], ['iters', '60'], ['batch_size', '2'], ['learning_rate', '1e-3'], ['val_every', '10'], ['save_every', '20']]) {
    await page.locator(`input[name=${name}]`).fill(value);
  }
  await page.getByRole('button', { name: 'Start training' }).click();
  await page.waitForFunction(() => Number(document.querySelector('[data-testid=loss-chart]')?.dataset.points) >= 12, null, { timeout: 300000 });
  // The job (status, facts, curve, events) at the top of the window, not the form's Start button.
  const job = page.locator('section[aria-label=Job]');
  await job.evaluate((el) => el.scrollIntoView({ block: 'start' }));
  await shot(page, 'train');
  await page.getByTestId('job-status').filter({ hasText: /succeeded|failed|cancelled/ }).waitFor({ timeout: 600000 });
  await job.evaluate((el) => el.scrollIntoView({ block: 'start' }));
  await shot(page, 'train-done');

  await page.getByRole('link', { name: 'Status' }).click();
  await page.getByTestId('live-stats').waitFor();
  await page.waitForTimeout(3000);  // a few samples for the charts
  await shot(page, 'status');

  // The same chat on a narrow window.
  await page.setViewportSize({ width: 420, height: 860 });
  await page.getByRole('link', { name: 'Chat' }).click();
  await page.locator('.msg.assistant').first().waitFor();
  await shot(page, 'chat-narrow');
  if (problems.length) throw new Error(`the page reported problems:\n${problems.join('\n')}`);
} finally {
  await browser.close();
  await server.stop();
}
