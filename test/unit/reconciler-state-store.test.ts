/** The state record on disk: atomic writes, a corrupt file moved aside and named, leftover temp files removed, write failures typed. */
import { strict as assert } from 'node:assert';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { isLlmgwError } from '../../src/errors/catalogue.js';
import { initialHealth } from '../../src/reconciler/health.js';
import { emptyState } from '../../src/reconciler/state.js';
import { loadState, StateStore } from '../../src/reconciler/state-store.js';
import { fromV2 } from '../harness/record-v2.js';

const root = mkdtempSync(join(tmpdir(), 'llmgw-state-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const dir = (): string => {
  const d = join(root, `d${++n}`);
  mkdirSync(d);
  return d;
};

describe('state file', () => {
  it('a missing file is an empty record; what was saved loads back', async () => {
    const d = dir();
    assert.deepEqual(await loadState(join(d, 'state.json')), { state: emptyState, problem: null });
    const s = fromV2({ models: { kev: initialHealth('d1') }, demand: { kev: 5 }, restarts: { r1: 6 } });
    const store = new StateStore(join(d, 'state.json'));
    assert.equal(await store.save(s), true);
    assert.equal(await store.save(s), false, 'unchanged content is not written again');
    assert.deepEqual((await loadState(join(d, 'state.json'))).state, s);
  });

  for (const [name, text] of [
    ['truncated', '{"version":2,"models":{'],
    ['empty', ''],
    ['not a state record', '{"hello":"world"}'],
  ] as const) {
    it(`a ${name} file is moved aside, named in the problem, and the controller starts from an empty record`, async () => {
      const d = dir();
      const path = join(d, 'state.json');
      writeFileSync(path, text);
      const r = await loadState(path, () => 42);
      assert.deepEqual(r.state, emptyState);
      assert.equal(r.problem?.code, 'STATE_FILE_CORRUPT');
      assert.ok(r.problem!.message.includes(path), r.problem!.message);
      assert.ok(r.problem!.message.includes(`${path}.corrupt-42`));
      assert.equal(existsSync(path), false);
      assert.equal(readFileSync(`${path}.corrupt-42`, 'utf8'), text, 'the bad file is kept for a look, not deleted');
    });
  }

  it('a temp file left by a crash mid-write is removed and ignored', async () => {
    const d = dir();
    const path = join(d, 'state.json');
    await new StateStore(path).save({ ...emptyState, appliedRevision: 'r1' });
    writeFileSync(`${path}.tmp.12345`, '{"version":2,"models":{');
    const r = await loadState(path);
    assert.equal(r.state.appliedRevision, 'r1');
    assert.deepEqual(readdirSync(d), ['state.json']);
  });

  it('a write that fails is a typed STATE_WRITE_FAILED naming the file, and leaves no temp file', async (t) => {
    if (process.getuid?.() === 0) {
      // root writes through permissions: make the target a directory instead
      const d = dir();
      mkdirSync(join(d, 'state.json'));
      writeFileSync(join(d, 'state.json', 'x'), 'x');
      await assert.rejects(new StateStore(join(d, 'state.json')).save(emptyState), (e) => isLlmgwError(e, 'STATE_WRITE_FAILED') && e.message.includes(join(d, 'state.json')));
      assert.deepEqual(readdirSync(d).sort(), ['state.json']);
      return;
    }
    const d = dir();
    chmodSync(d, 0o500);
    t.after(() => chmodSync(d, 0o700));
    await assert.rejects(new StateStore(join(d, 'state.json')).save(emptyState), (e) => isLlmgwError(e, 'STATE_WRITE_FAILED'));
  });
});
