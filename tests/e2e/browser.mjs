// Helpers for the browser tests of the web page: Debian's chromium, headless,
// driven by playwright-core, with a fresh profile per run and the flags that
// keep it from reaching for the network (without them it hangs on a closed
// network). Every page records uncaught errors, Content-Security-Policy
// violations and dialogs (alert(), …), which the tests check are none.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.GRAFT_CHROMIUM ?? '/usr/bin/chromium';
// Generous: the tests run on a loaded 2-core machine next to other tests.
export const TIMEOUT = 60000;

const FLAGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

export async function openBrowser({ width = 1400, height = 900 } = {}) {
  const profile = mkdtempSync(path.join(os.tmpdir(), 'graft-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width, height },
    timeout: TIMEOUT,
  });
  context.setDefaultTimeout(TIMEOUT);
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// A new tab on `url`, with `problems` collecting what must not happen.
export async function openPage(context, url) {
  const page = await context.newPage();
  const problems = [];
  const dialogs = [];
  page.on('pageerror', (err) => problems.push(`uncaught: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && /Content Security Policy|Refused to/i.test(msg.text())) problems.push(`CSP: ${msg.text()}`);
  });
  page.on('dialog', (dialog) => {
    dialogs.push(`${dialog.type()}: ${dialog.message()}`);
    dialog.dismiss().catch(() => {});
  });
  await page.goto(url);
  return { page, problems, dialogs };
}

// The chat request bodies a page sends (in order).
export function recordChatRequests(page) {
  const bodies = [];
  page.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname === '/v1/chat/completions') {
      bodies.push(request.postDataJSON());
    }
  });
  return bodies;
}

// Resolves once the chat is idle again (the Send button is back).
export async function waitChatIdle(page) {
  await page.locator('.composer button[type=submit]').waitFor();
}

export async function sendChat(page, text) {
  const box = page.getByLabel('Message', { exact: true });
  await box.fill(text);
  await box.press('Enter');
}

// Polls a Node-side condition until it holds (or fails after the timeout).
export async function until(condition, what = 'condition', timeout = TIMEOUT) {
  const end = Date.now() + timeout;
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
