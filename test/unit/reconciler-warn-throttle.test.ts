import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { shouldWarn } from '../../src/reconciler/warn-throttle.js';

describe('unplaceable warning throttle', () => {
  const ten = 10 * 60_000;
  const table: [string, Parameters<typeof shouldWarn>[0], string, number, boolean][] = [
    ['first time', undefined, 'r1', 0, true],
    ['same reason a pass later', { reason: 'r1', at: 0 }, 'r1', 30_000, false],
    ['same reason 9m59s later', { reason: 'r1', at: 0 }, 'r1', ten - 1, false],
    ['same reason 10 minutes later', { reason: 'r1', at: 0 }, 'r1', ten, true],
    ['reason changed', { reason: 'needs 2 GiB; no node with known free memory', at: 0 }, 'needs 2 GiB; largest free 1 GiB on a', 1, true],
    ['only a figure moved', { reason: 'needs 2 GiB; largest free 1.5 GiB on a; 2 nodes checked', at: 0 }, 'needs 2 GiB; largest free 1.2 GiB on a; 2 nodes checked', 1, false],
  ];
  for (const [name, last, reason, now, want] of table) it(name, () => assert.equal(shouldWarn(last, reason, now, ten), want));
});
