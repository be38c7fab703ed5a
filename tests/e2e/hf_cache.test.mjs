// Models and adapters in the Hugging Face cache: graft models lists them,
// graft serve org/name serves one, and adapter repos there (and an
// adapters/ folder beside the model) are available.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { GRAFT_BIN, WORK_DIR, testModel } from './graft.mjs';

const HOME = path.join(WORK_DIR, 'hf-cache-home');
const HUB = path.join(HOME, 'hub');
const COMMIT = '1111111111222222222233333333334444444444';
const env = { ...process.env, HF_HOME: HOME, HF_HUB_CACHE: '', XDG_CACHE_HOME: path.join(WORK_DIR, 'hf-xdg-cache'),
  XDG_DATA_HOME: path.join(WORK_DIR, 'hf-xdg-data'), OMP_WAIT_POLICY: 'passive' };

// Puts a folder's files into a cached repo as huggingface_hub would: blobs by sha256, linked from the snapshot.
function cacheRepo(repo, sourceDir) {
  const root = path.join(HUB, `models--${repo.replace('/', '--')}`);
  mkdirSync(path.join(root, 'blobs'), { recursive: true });
  mkdirSync(path.join(root, 'snapshots', COMMIT), { recursive: true });
  for (const name of readdirSync(sourceDir)) {
    const data = readFileSync(path.join(sourceDir, name));
    const etag = createHash('sha256').update(data).digest('hex');
    renameSync(path.join(sourceDir, name), path.join(root, 'blobs', etag));
    symlinkSync(path.join('..', '..', 'blobs', etag), path.join(root, 'snapshots', COMMIT, name));
  }
  mkdirSync(path.join(root, 'refs'), { recursive: true });
  writeFileSync(path.join(root, 'refs', 'main'), COMMIT);
  return path.join(root, 'snapshots', COMMIT);
}

function graft(args) {
  return spawnSync(GRAFT_BIN, args, { env, encoding: 'utf8' });
}

describe('the Hugging Face cache', () => {
  let snapshot;
  before(() => {
    rmSync(HOME, { recursive: true, force: true });
    rmSync(env.XDG_DATA_HOME, { recursive: true, force: true });
    const staging = path.join(WORK_DIR, 'hf-staging');
    rmSync(staging, { recursive: true, force: true });
    mkdirSync(staging, { recursive: true });
    execFileSync('cp', [testModel(), path.join(staging, 'tiny-F16.gguf')]);
    writeFileSync(path.join(staging, 'README.md'), '# tiny\n');
    snapshot = cacheRepo('org/tiny-GGUF', staging);
    // An adapter repo (PEFT files) for the same model.
    execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--peft', path.join(staging, 'peft'), '--rank', '4']);
    const peft = path.join(staging, 'peft');
    cacheRepo('org/tiny-lora', peft);
    // An adapters/ folder beside the model file.
    mkdirSync(path.join(snapshot, 'adapters'));
    execFileSync(GRAFT_BIN, ['make-test-adapter', '--base', testModel(), '--gguf',
      path.join(snapshot, 'adapters', 'beside.gguf'), '--rank', '4']);
  });

  it('graft models lists the cached model with its architecture, type, size and fit', () => {
    const r = graft(['models', '--json']);
    assert.equal(r.status, 0, r.stderr);
    const { models } = JSON.parse(r.stdout);
    const tiny = models.find((m) => m.name === 'org/tiny-GGUF:tiny-F16.gguf');
    assert.ok(tiny, r.stdout);
    assert.equal(tiny.source, 'huggingface');
    assert.equal(tiny.arch, 'qwen3');
    assert.equal(tiny.quantization, 'F16');
    assert.equal(tiny.size_bytes, statSync(testModel()).size);
    assert.equal(tiny.fits, true);
    // Adapters are not models.
    assert.equal(models.some((m) => m.name.includes('beside') || m.name.includes('lora')), false);
    const text = graft(['models', '--model-dir', path.dirname(testModel())]);
    assert.equal(text.status, 0, text.stderr);
    assert.match(text.stdout, /org\/tiny-GGUF:tiny-F16\.gguf\s+qwen3\s+F16/);
    assert.match(text.stdout, /qwen3-tiny\.gguf/);
  });

  it('graft serve org/name serves it, with adapters from the cache and beside the model', async () => {
    const child = spawn(GRAFT_BIN, ['serve', 'org/tiny-GGUF', '--port', '0', '--ctx', '256', '--threads', '2'],
      { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    const port = await new Promise((resolve, reject) => {
      child.stderr.on('data', (d) => {
        log += d;
        const m = log.match(/serving '.*' on http:\/\/127\.0\.0\.1:(\d+)/);
        if (m) resolve(Number(m[1]));
      });
      child.on('exit', (code) => reject(new Error(`graft serve exited with ${code}:\n${log}`)));
    });
    try {
      const models = await (await fetch(`http://127.0.0.1:${port}/v1/models`)).json();
      assert.equal(models.data[0].id, 'tiny-F16');
      const available = await (await fetch(`http://127.0.0.1:${port}/v1/adapters/available`)).json();
      const byId = Object.fromEntries(available.data.map((a) => [a.id, a]));
      assert.equal(byId['org--tiny-lora']?.compatible, true, JSON.stringify(available));
      assert.equal(byId.beside?.compatible, true, JSON.stringify(available));
      const load = await fetch(`http://127.0.0.1:${port}/v1/adapters`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 'org--tiny-lora' }),
      });
      assert.equal(load.status, 200, await load.text());
    } finally {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.on('exit', resolve));
    }
  });

  it('says what to do when the repo or file is not there', () => {
    const missing = graft(['serve', 'org/missing', '--port', '0']);
    assert.equal(missing.status, 1);
    assert.match(missing.stderr, /org\/missing is not in the Hugging Face cache .*graft pull org\/missing/);
    const file = graft(['fit', 'org/tiny-GGUF:other.gguf']);
    assert.equal(file.status, 1);
    assert.match(file.stderr, /has no file 'other\.gguf' in the cache \(it has tiny-F16\.gguf\)/);
    const fit = graft(['fit', 'org/tiny-GGUF', '--json', '--no-machines', '--probe', '--quick']);
    assert.equal(fit.status, 0, fit.stderr);
    assert.equal(JSON.parse(fit.stdout).model.path, path.join(snapshot, 'tiny-F16.gguf'));
  });
});
