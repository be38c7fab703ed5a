// The web page's Chat, in a real browser (Debian's chromium, headless)
// against `graft serve` on a tiny test model: streamed replies, stop, the
// adapter selection and the spec it sends, loading an available adapter on
// pick, the server's error for an adapter that is not loaded, and model
// output that tries to inject HTML.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { GRAFT_BIN, WORK_DIR, startServer, testModel, getJson, postRaw } from './graft.mjs';
import { openBrowser, openPage, recordChatRequests, sendChat, until } from './browser.mjs';

const XDG = path.join(WORK_DIR, 'web-chat-xdg');
const STORE = path.join(XDG, 'graft', 'adapters');

function makeAdapters() {
  rmSync(XDG, { recursive: true, force: true });
  mkdirSync(STORE, { recursive: true });
  for (const [id, seed] of [['a', 1], ['b', 2]]) {
    execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--strength', '1', '--peft',
      path.join(STORE, id), '--rank', '4', '--seed', String(seed), '--stamp'], { stdio: 'pipe' });
  }
}

// Sends a message and resolves with the reply's element once it is complete.
async function sendAndWait(page, text) {
  const replies = page.locator('.msg.assistant');
  const n = await replies.count();
  await sendChat(page, text);
  await replies.nth(n).waitFor();
  await page.waitForFunction(() => !document.querySelector('.msg.assistant.streaming'));
  return replies.nth(n);
}

async function setSetting(page, label, value) {
  await page.getByLabel(label, { exact: true }).fill(String(value));
}

describe('web page: chat', () => {
  let server;
  let browser;
  let page;
  let problems;
  let dialogs;
  let sent;

  before(async () => {
    makeAdapters();
    server = await startServer([], { ctx: 4096, env: { XDG_DATA_HOME: XDG } });
    assert.equal((await postRaw(server, '/v1/adapters', JSON.stringify({ id: 'a' }))).status, 200);
    browser = await openBrowser();
    ({ page, problems, dialogs } = await openPage(browser.context, server.baseURL));
    sent = recordChatRequests(page);
    await page.locator('.topbar .model', { hasText: 'tiny' }).waitFor();
    await setSetting(page, 'temperature', 0);
    await setSetting(page, 'max_tokens', 16);
  });
  after(async () => {
    await browser?.close();
    assert.equal(await server.stop(), 0, server.log());
  });

  it('streams a reply into the page and keeps the conversation', async () => {
    const reply = await sendAndWait(page, 'Hello there');
    assert.ok((await reply.locator('.msg-text, .reasoning').allTextContents()).join('').trim().length > 0, 'the reply has text');
    assert.equal(await reply.locator('.adapter-label').textContent(), 'adapter: none');
    assert.equal(sent.at(-1).stream, true);
    assert.equal(sent.at(-1).max_tokens, 16);
    assert.equal(sent.at(-1).temperature, 0);
    assert.ok(!('adapter' in sent.at(-1)), 'no selection sends no adapter field');
    const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('graft.conversations')));
    assert.equal(stored.length, 1);
    assert.equal(stored[0].messages[0].content, 'Hello there');
    assert.equal(await page.locator('.conv-open').first().textContent(), 'Hello there');
  });

  it('stops a reply early with Esc', async () => {
    await setSetting(page, 'max_tokens', 3500);
    const before = (await getJson(server, '/stats')).body.requests.cancelled;
    const replies = page.locator('.msg.assistant');
    const n = await replies.count();
    await sendChat(page, 'Tell me a very long story');
    // Wait until text streams in, then stop.
    await page.waitForFunction((i) => {
      const m = document.querySelectorAll('.msg.assistant')[i];
      return m && m.classList.contains('streaming') && m.querySelector('.msg-text')?.textContent.length > 0;
    }, n);
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.querySelector('.msg.assistant.streaming'));
    assert.match(await replies.nth(n).locator('.msg-meta').textContent(), /stopped/);
    // The server saw the client go and cancelled the request.
    let cancelled = before;
    for (let i = 0; i < 100 && cancelled === before; i++) {
      cancelled = (await getJson(server, '/stats')).body.requests.cancelled;
      if (cancelled === before) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(cancelled, before + 1);
    await setSetting(page, 'max_tokens', 16);
  });

  it('sends the selected adapter spec, loading an available one first', async () => {
    await page.locator('input[data-adapter="a"]').check();
    assert.equal(await page.getByTestId('adapter-spec').textContent(), 'adapter: "a"');
    let reply = await sendAndWait(page, 'With a');
    assert.equal(sent.at(-1).adapter, 'a');
    assert.equal(await reply.locator('.adapter-label').textContent(), 'adapter: a');

    // b is only available: picking it loads it into the server.
    assert.equal((await getJson(server, '/v1/adapters')).body.data.some((x) => x.id === 'b'), false);
    await page.locator('input[data-adapter="b"]').check();
    await page.getByText(/Loaded b into the server/).waitFor();
    assert.ok((await getJson(server, '/v1/adapters')).body.data.some((x) => x.id === 'b'));
    await page.locator('input[data-scale="a"]').fill('0.5');
    assert.equal(await page.getByTestId('adapter-spec').textContent(), 'adapter: "a@0.5+b"');
    reply = await sendAndWait(page, 'With a at half and b');
    assert.equal(sent.at(-1).adapter, 'a@0.5+b');
    assert.equal(await reply.locator('.adapter-label').textContent(), 'adapter: a@0.5+b');
    assert.equal(await reply.locator('[role=alert]').count(), 0);
  });

  it('shares the selection with the terminal and Pi ("use everywhere"), and clears it', async () => {
    assert.equal(await page.getByTestId('shared-selection').textContent(), '(none set)');
    await page.getByTestId('use-everywhere').click();
    await page.getByText('Shared selection is now a@0.5+b.').waitFor();
    assert.equal(await page.getByTestId('shared-selection').textContent(), 'a@0.5+b');
    assert.equal((await getJson(server, '/v1/adapters/selection')).body.adapter, 'a@0.5+b');
    // Another page reads it back.
    const other = await openPage(browser.context, server.baseURL);
    await other.page.getByTestId('shared-selection').filter({ hasText: 'a@0.5+b' }).waitFor();
    await other.page.close();
  });

  it("shows the server's error for an adapter that is not loaded, never the base model's answer", async () => {
    const res = await fetch(`${server.baseURL}/v1/adapters/b`, { method: 'DELETE' });
    assert.equal(res.status, 200);
    const reply = await sendAndWait(page, 'Still with b?');
    assert.equal(sent.at(-1).adapter, 'a@0.5+b');
    const error = await reply.locator('[role=alert]').textContent();
    assert.match(error, /adapter 'b' is not loaded/);
    assert.match(error, /400/);
    assert.equal(await reply.locator('.msg-text').count(), 0, 'no text from another model');
    // Back to none.
    await page.getByLabel('none (base model)').check();
    assert.equal(await page.getByTestId('adapter-spec').textContent(), '(no adapter field)');
    // Sharing "no adapter field" clears the shared selection.
    await page.getByTestId('use-everywhere').click();
    await page.getByText('Cleared the shared selection.').waitFor();
    assert.equal(await page.getByTestId('shared-selection').textContent(), '(none set)');
    assert.equal((await getJson(server, '/v1/adapters/selection')).body.adapter, null);
  });

  it('regenerates the last reply and resends an edited message', async () => {
    const count = sent.length;
    await page.getByRole('button', { name: 'Regenerate' }).click();
    await until(() => sent.length === count + 1, 'the regenerated request');
    await page.waitForFunction(() => !document.querySelector('.msg.assistant.streaming'));
    assert.equal(sent.at(-1).messages.at(-1).content, 'Still with b?');
    await page.locator('.msg.user').last().getByRole('button', { name: 'Edit' }).click();
    const box = page.getByLabel('Edit message');
    await box.fill('Edited question');
    await box.press('Enter');
    await until(() => sent.length === count + 2, 'the edited request');
    await page.waitForFunction(() => !document.querySelector('.msg.assistant.streaming') && !document.querySelector('.msg.user.editing'));
    assert.equal(sent.at(-1).messages.at(-1).content, 'Edited question');
    assert.equal(await page.locator('.msg.user .msg-text').last().textContent(), 'Edited question');
  });

  it('renames, starts and deletes conversations, kept in localStorage', async () => {
    const stored = () => page.evaluate(() => JSON.parse(localStorage.getItem('graft.conversations')));
    await page.getByRole('button', { name: 'Rename' }).first().click();
    const name = page.getByLabel('Conversation name');
    await name.fill('Adapter trials');
    await name.press('Enter');
    await page.locator('.conv-open', { hasText: 'Adapter trials' }).waitFor();
    assert.equal((await stored())[0].title, 'Adapter trials');
    await page.getByRole('button', { name: 'New chat' }).click();
    await sendAndWait(page, 'A second conversation');
    // The page saves once the reply has ended (an effect after that render): wait for it.
    await until(async () => (await stored()).length === 2, 'the second conversation to be saved');
    await page.locator('.conv', { hasText: 'A second conversation' }).getByRole('button', { name: 'Delete' }).click();
    await page.locator('.conv', { hasText: 'A second conversation' }).getByRole('button', { name: 'Delete' }).click();
    await until(async () => (await stored()).length === 1, 'the deletion to be saved');
    assert.equal((await stored())[0].title, 'Adapter trials');
    await page.locator('.conv-open', { hasText: 'Adapter trials' }).click();
    await page.locator('.msg.user', { hasText: 'Edited question' }).waitFor();
  });

  it('renders model output that holds HTML as text, running no script', async () => {
    // The model's answer (fed to the page as graft streams it) tries to inject markup.
    const hostile = 'Look: <img src=x onerror=alert(1)> and <script>alert(2)</script> **bold** [x](javascript:alert(3))';
    const chunks = [
      { choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] },
      { choices: [{ index: 0, delta: { reasoning_content: 'thinking <b onmouseover=alert(4)>hard</b>' } }] },
      { choices: [{ index: 0, delta: { content: hostile } }] },
      { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "<svg onload=alert(5)>"}' } }] } }] },
      { choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] },
    ];
    const body = chunks.map((c) => `data: ${JSON.stringify({ object: 'chat.completion.chunk', ...c })}\n\n`).join('') + 'data: [DONE]\n\n';
    await page.route('**/v1/chat/completions', (route) => route.fulfill({ status: 200, contentType: 'text/event-stream', body }));
    const reply = await sendAndWait(page, 'Say something nasty');
    await page.unroute('**/v1/chat/completions');
    const text = reply.locator('.msg-text');
    assert.match(await text.textContent(), /<img src=x onerror=alert\(1\)>/);
    assert.match(await text.textContent(), /<script>alert\(2\)<\/script>/);
    assert.equal(await text.locator('img, script, svg').count(), 0);
    assert.equal(await text.locator('strong').textContent(), 'bold');
    assert.equal(await text.locator('a[href^="javascript"]').count(), 0);
    assert.match(await reply.locator('details.reasoning').textContent(), /<b onmouseover=alert\(4\)>hard<\/b>/);
    assert.equal(await reply.locator('details.reasoning b').count(), 0);
    assert.match(await reply.locator('.tool-call').textContent(), /get_weather[\s\S]*<svg onload=alert\(5\)>/);
    assert.equal(await reply.locator('.tool-call svg').count(), 0);
    await page.mouse.move(10, 10);
    assert.deepEqual(dialogs, [], 'no script ran');
    assert.deepEqual(problems, []);
  });
});
