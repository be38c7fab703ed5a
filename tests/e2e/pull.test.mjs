// graft pull against a loopback server that answers as the Hugging Face hub
// does: the revision API, resolve/ with LFS redirects and etags, a CDN that
// honours Range. Full download, resume after a cut connection, a wrong
// sha256, 401 and 404; the cache layout is huggingface_hub's.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { GRAFT_BIN, WORK_DIR } from './graft.mjs';

const COMMIT = 'c0ffee0123456789abcdef0123456789abcdef01';
const sha256 = (data) => createHash('sha256').update(data).digest('hex');
const gitSha1 = (data) => createHash('sha1').update(`blob ${data.length}\0`).update(data).digest('hex');

// The repo: two LFS files (one whose advertised sha256 is wrong) and a small plain file.
const FILES = {
  'model-Q4_0.gguf': { data: randomBytes(300_000), lfs: true },
  'broken-Q8_0.gguf': { data: randomBytes(50_000), lfs: true, advertise: sha256(Buffer.from('something else')) },
  'README.md': { data: Buffer.from('# a test repo\n'), lfs: false },
};
const etagOf = (f) => (f.lfs ? (f.advertise ?? sha256(f.data)) : gitSha1(f.data));

class FakeHub {
  constructor() {
    this.token = null;      // required bearer token, if any
    this.cutAfter = 0;      // the next CDN answer breaks off after this many bytes
    this.requests = [];     // {method, url, range, auth}
    this.server = http.createServer((req, res) => this.answer(req, res));
  }
  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
  }
  stop() { return new Promise((resolve) => this.server.close(resolve)); }
  deny(req, res) {
    if (!this.token || req.headers.authorization === `Bearer ${this.token}`) return false;
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: 'Invalid credentials in Authorization header' }));
    return true;
  }
  answer(req, res) {
    this.requests.push({ method: req.method, url: req.url, range: req.headers.range, auth: req.headers.authorization });
    let m = req.url.match(/^\/api\/models\/([^/]+)\/([^/]+)\/revision\/([^/?]+)/);
    if (m) {
      if (this.deny(req, res)) return;
      if (`${m[1]}/${m[2]}` !== 'org/model') {
        res.writeHead(404, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ error: 'Repository not found' }));
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({
        id: 'org/model', sha: COMMIT, siblings: Object.keys(FILES).map((rfilename) => ({ rfilename })),
      }));
    }
    m = req.url.match(/^\/org\/model\/resolve\/([^/]+)\/(.+)$/);
    if (m) {
      if (this.deny(req, res)) return;
      const f = FILES[decodeURIComponent(m[2])];
      if (!f || m[1] !== COMMIT) { res.writeHead(404); return res.end('Entry not found'); }
      if (f.lfs) {
        res.writeHead(302, {
          location: `/cdn/${sha256(f.data)}`, 'x-linked-etag': `"${etagOf(f)}"`, 'x-linked-size': f.data.length,
          'x-repo-commit': COMMIT, etag: `"${gitSha1(Buffer.from('pointer'))}"`,
        });
        return res.end();
      }
      res.writeHead(200, { etag: `"${etagOf(f)}"`, 'content-length': f.data.length, 'x-repo-commit': COMMIT });
      return res.end(req.method === 'HEAD' ? undefined : f.data);
    }
    m = req.url.match(/^\/cdn\/([0-9a-f]{64})$/);
    if (m) {
      const f = Object.values(FILES).find((x) => sha256(x.data) === m[1]);
      if (!f) { res.writeHead(404); return res.end(); }
      let start = 0;
      const range = req.headers.range?.match(/^bytes=(\d+)-$/);
      if (range) start = Number(range[1]);
      if (start >= f.data.length) { res.writeHead(416); return res.end(); }
      const body = f.data.subarray(start);
      res.writeHead(range ? 206 : 200, {
        'content-length': body.length,
        ...(range ? { 'content-range': `bytes ${start}-${f.data.length - 1}/${f.data.length}` } : {}),
      });
      if (this.cutAfter > 0) {
        const cut = this.cutAfter;
        this.cutAfter = 0;
        res.write(body.subarray(0, cut), () => res.socket.destroy());
        return;
      }
      return res.end(body);
    }
    res.writeHead(404);
    res.end();
  }
}

function pull(hub, home, args, env = {}) {
  return new Promise((resolve) => {
    const child = spawn(GRAFT_BIN, ['pull', ...args], {
      env: { ...process.env, HF_HOME: home, HF_ENDPOINT: hub.url, HF_TOKEN: '', HF_HUB_CACHE: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

const repoDir = (home) => path.join(home, 'hub', 'models--org--model');

describe('graft pull', () => {
  const hub = new FakeHub();
  let n = 0;
  const freshHome = () => {
    const home = path.join(WORK_DIR, `hf-home-${++n}`);
    rmSync(home, { recursive: true, force: true });
    mkdirSync(home, { recursive: true });
    return home;
  };
  before(async () => { await hub.start(); });
  after(async () => { await hub.stop(); });

  it('downloads into the cache layout Hugging Face tools expect', async () => {
    const home = freshHome();
    const ok = await pull(hub, home, ['org/model', '--include', '*Q4_0.gguf', '--include', '*.md']);
    assert.equal(ok.code, 0, ok.stderr);
    const repo = repoDir(home);
    assert.equal(readFileSync(path.join(repo, 'refs', 'main'), 'utf8'), COMMIT);
    assert.equal(ok.stdout.trim(), path.join(repo, 'snapshots', COMMIT));
    for (const name of ['model-Q4_0.gguf', 'README.md']) {
      const link = path.join(repo, 'snapshots', COMMIT, name);
      assert.ok(lstatSync(link).isSymbolicLink(), name);
      assert.equal(readlinkSync(link), path.join('..', '..', 'blobs', etagOf(FILES[name])));
      assert.deepEqual(readFileSync(link), FILES[name].data, name);
    }
    assert.deepEqual(readdirSync(path.join(repo, 'blobs')).filter((b) => b.endsWith('.incomplete')), []);
    assert.match(ok.stderr, /graft serve org\/model:model-Q4_0\.gguf/);
    // A second pull finds everything in place and downloads nothing.
    const before = hub.requests.filter((q) => q.url.startsWith('/cdn/')).length;
    const again = await pull(hub, home, ['org/model', '--include', '*Q4_0.gguf']);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /already here/);
    assert.equal(hub.requests.filter((q) => q.url.startsWith('/cdn/')).length, before);
  });

  it('resumes after a cut connection, within the run and in the next one', async () => {
    const home = freshHome();
    const file = FILES['model-Q4_0.gguf'];
    hub.cutAfter = 100_000;
    hub.requests = [];
    const retried = await pull(hub, home, ['org/model', '--include', '*Q4_0.gguf']);
    assert.equal(retried.code, 0, retried.stderr);
    assert.ok(hub.requests.some((q) => q.range === 'bytes=100000-'), JSON.stringify(hub.requests));
    assert.deepEqual(readFileSync(path.join(repoDir(home), 'snapshots', COMMIT, 'model-Q4_0.gguf')), file.data);

    // No retries: the run fails and keeps the part it has, which is not complete.
    const home2 = freshHome();
    hub.cutAfter = 120_000;
    const cut = await pull(hub, home2, ['org/model', '--include', '*Q4_0.gguf', '--retries', '0']);
    assert.equal(cut.code, 1);
    assert.match(cut.stderr, /run the same command again to resume/);
    const blobs = path.join(repoDir(home2), 'blobs');
    const etag = sha256(file.data);
    assert.equal(statSync(path.join(blobs, `${etag}.incomplete`)).size, 120_000);
    assert.equal(existsSync(path.join(blobs, etag)), false);
    assert.equal(existsSync(path.join(repoDir(home2), 'snapshots', COMMIT, 'model-Q4_0.gguf')), false);
    assert.equal(existsSync(path.join(repoDir(home2), 'refs', 'main')), false);
    hub.requests = [];
    const resumed = await pull(hub, home2, ['org/model', '--include', '*Q4_0.gguf']);
    assert.equal(resumed.code, 0, resumed.stderr);
    assert.ok(hub.requests.some((q) => q.range === 'bytes=120000-'));
    assert.deepEqual(readFileSync(path.join(blobs, etag)), file.data);
    assert.equal(existsSync(path.join(blobs, `${etag}.incomplete`)), false);
  });

  it('refuses a file whose sha256 is not the hub\'s, and leaves nothing of it', async () => {
    const home = freshHome();
    const r = await pull(hub, home, ['org/model', '--include', 'broken-*']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /sha256 of 'broken-Q8_0\.gguf' is [0-9a-f]{64}, the hub says/);
    const blobs = path.join(repoDir(home), 'blobs');
    assert.deepEqual(readdirSync(blobs), []);
    assert.equal(existsSync(path.join(repoDir(home), 'snapshots', COMMIT, 'broken-Q8_0.gguf')), false);
  });

  it('says what is wrong for 404, 401, a token, and nothing to match', async () => {
    const home = freshHome();
    const missing = await pull(hub, home, ['org/nothing']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /org\/nothing: revision 'main' not found on http:\/\/127\.0\.0\.1:\d+ \(HTTP 404\)/);
    hub.token = 'secret';
    try {
      const denied = await pull(hub, home, ['org/model', '--include', '*.md']);
      assert.equal(denied.code, 1);
      assert.match(denied.stderr, /HTTP 401.*set HF_TOKEN/);
      const wrong = await pull(hub, home, ['org/model', '--include', '*.md'], { HF_TOKEN: 'nope' });
      assert.match(wrong.stderr, /check that HF_TOKEN can read this repo/);
      const allowed = await pull(hub, home, ['org/model', '--include', '*.md'], { HF_TOKEN: 'secret' });
      assert.equal(allowed.code, 0, allowed.stderr);
    } finally {
      hub.token = null;
    }
    const none = await pull(hub, home, ['org/model', '--include', '*.safetensors']);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /no file matches '\*\.safetensors'; the repo has model-Q4_0\.gguf, broken-Q8_0\.gguf, README\.md/);
    const bad = await pull(hub, home, ['not a repo']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /is not a Hugging Face repo id/);
  });
});
