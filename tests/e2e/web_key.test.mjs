// The web page with `graft serve --api-key`: the page loads without the key,
// asks for it once, says clearly when a key is wrong, keeps the right one for
// the tab (sessionStorage) and then works.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './graft.mjs';
import { openBrowser, openPage } from './browser.mjs';

describe('web page: API key', () => {
  let server;
  let browser;

  before(async () => {
    server = await startServer(['--api-key', 'sekrit']);
    browser = await openBrowser();
  });
  after(async () => {
    await browser?.close();
    assert.equal(await server.stop(), 0, server.log());
  });

  it('asks for the key, refuses a wrong one clearly, then works', async () => {
    const { page, problems } = await openPage(browser.context, server.baseURL);
    const dialog = page.getByRole('form', { name: 'API key' });
    await dialog.waitFor();
    await dialog.getByPlaceholder('API key').fill('wrong');
    await dialog.getByRole('button', { name: 'Use this key' }).click();
    const alert = dialog.getByRole('alert');
    await alert.waitFor();
    assert.match(await alert.textContent(), /The server refused this key: invalid or missing API key/);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('graft.apiKey')), null);

    await dialog.getByPlaceholder('API key').fill('sekrit');
    await dialog.getByRole('button', { name: 'Use this key' }).click();
    await dialog.waitFor({ state: 'detached' });
    await page.locator('.topbar .model', { hasText: 'tiny' }).waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('graft.apiKey')), 'sekrit');

    // The page's API calls carry it: a chat reply arrives.
    await page.getByLabel('max_tokens', { exact: true }).fill('8');
    const box = page.getByLabel('Message', { exact: true });
    await box.fill('Hello');
    await box.press('Enter');
    await page.locator('.msg.assistant').waitFor();
    await page.waitForFunction(() => !document.querySelector('.msg.assistant.streaming'));
    assert.equal(await page.locator('.msg.assistant [role=alert]').count(), 0);

    // A reload in the same tab keeps the key: no second question.
    await page.reload();
    await page.locator('.topbar .model', { hasText: 'tiny' }).waitFor();
    assert.equal(await dialog.count(), 0);
    assert.deepEqual(problems, []);
    await page.close();
  });
});
