/**
 * The model fetch operations — from a URL (a file:// URL, curl's own, stands in for the network;
 * with and without a token on stdin) and from a file on the node — rendered, run under dash and bash
 * over a fixture data dir, and parsed: each prints the file's size; each known failure is its code.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { modelFromFileScript, modelFromUrlInput, modelFromUrlScript, modelPath, parseModelBytes } from '../../src/nodes/ops/model-fetch.js';
import { scriptError } from '../../src/nodes/script-errors.js';
import { makeDataDir, run, runOk, SHELLS, type DataDir } from '../harness/nodes-ops-fixture.js';

let fx: DataDir;
let file: string;
let body: Buffer;
let sha: string;

before(() => {
  fx = makeDataDir('model');
  body = Buffer.alloc(70_000, 7);
  file = join(fx.root, "my model's.gguf");
  writeFileSync(file, body);
  sha = createHash('sha256').update(body).digest('hex');
});

after(() => fx.remove());

for (const shell of SHELLS) {
  describe(`ops/model-fetch: ${shell}`, () => {
    let dataDir: string;
    before(() => {
      dataDir = join(fx.root, `data-${shell}`);
    });
    const models = () => (existsSync(join(dataDir, 'models')) ? readdirSync(join(dataDir, 'models')).sort() : []);

    it('from a URL: downloaded, verified, renamed into place; its size printed; again: found', () => {
      const res = runOk(shell, modelFromUrlScript(dataDir, sha), { stdin: modelFromUrlInput(pathToFileURL(file).href) });
      assert.equal(parseModelBytes(res.stdout), body.length);
      assert.deepEqual(models(), [`${sha}.gguf`]);
      assert.ok(existsSync(modelPath(dataDir, sha)));
      assert.equal(parseModelBytes(runOk(shell, modelFromUrlScript(dataDir, sha), { stdin: modelFromUrlInput('file:///nonexistent') }).stdout), body.length);
    });

    it('from a URL with a token: read from stdin; none there is SECRET_NOT_FOUND; the token is in no output', () => {
      const other = Buffer.alloc(10, 3);
      const p = join(fx.root, `tok-${shell}.gguf`);
      writeFileSync(p, other);
      const s = createHash('sha256').update(other).digest('hex');
      assert.equal(scriptError('n', 'fetch', run(shell, modelFromUrlScript(dataDir, s, 'hf-token'), { stdin: modelFromUrlInput(pathToFileURL(p).href) })).code, 'SECRET_NOT_FOUND');
      const res = runOk(shell, modelFromUrlScript(dataDir, s, 'hf-token'), { stdin: modelFromUrlInput(pathToFileURL(p).href, 'tok-secret-value') });
      assert.equal(parseModelBytes(res.stdout), 10);
      assert.ok(!res.stdout.includes('tok-secret-value') && !res.stderr.includes('tok-secret-value'));
    });

    it('from a URL: a wrong checksum and a failed download are their codes, and leave no part', () => {
      const bad = scriptError('n', 'fetch', run(shell, modelFromUrlScript(dataDir, 'c'.repeat(64)), { stdin: modelFromUrlInput(pathToFileURL(file).href) }));
      assert.equal(bad.code, 'MODEL_CHECKSUM_MISMATCH');
      assert.match(bad.message, new RegExp(`downloaded file has sha256 ${sha}`));
      assert.equal(scriptError('n', 'fetch', run(shell, modelFromUrlScript(dataDir, 'd'.repeat(64)), { stdin: modelFromUrlInput(pathToFileURL(join(fx.root, 'none.gguf')).href) })).code, 'MODEL_DOWNLOAD_FAILED');
      assert.deepEqual(models().filter((n) => !n.endsWith('.gguf')), []);
    });

    it('from a file on the node: verified, linked into the cache; missing and mismatched are their codes', () => {
      const d2 = join(fx.root, `data2-${shell}`);
      const res = runOk(shell, modelFromFileScript(d2, sha, file));
      assert.equal(parseModelBytes(res.stdout), body.length);
      assert.ok(existsSync(modelPath(d2, sha)));
      assert.equal(scriptError('n', 'fetch', run(shell, modelFromFileScript(d2, 'e'.repeat(64), join(fx.root, 'none')))).code, 'MODEL_FILE_NOT_FOUND');
      assert.equal(scriptError('n', 'fetch', run(shell, modelFromFileScript(d2, 'e'.repeat(64), file))).code, 'MODEL_CHECKSUM_MISMATCH');
    });
  });
}
