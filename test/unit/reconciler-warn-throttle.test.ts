import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { shouldWarn } from '../../src/reconciler/warn-throttle.js';
import { specOf } from '../harness/reconciler-core.js';

describe('unplaceable warning throttle (keyed on the reason code)', () => {
  const ten = 10 * 60_000;
  const table: [string, Parameters<typeof shouldWarn>[0], string, number, boolean][] = [
    ['first time', undefined, 'PLACEMENT_NO_ROOM', 0, true],
    ['same code a pass later', { code: 'PLACEMENT_NO_ROOM', at: 0 }, 'PLACEMENT_NO_ROOM', 30_000, false],
    ['same code 2 minutes later, whatever the figures in the text (3 warnings in 2 minutes before)', { code: 'PLACEMENT_NO_ROOM', at: 0 }, 'PLACEMENT_NO_ROOM', 120_000, false],
    ['same code 9m59s later', { code: 'PLACEMENT_NO_ROOM', at: 0 }, 'PLACEMENT_NO_ROOM', ten - 1, false],
    ['same code 10 minutes later', { code: 'PLACEMENT_NO_ROOM', at: 0 }, 'PLACEMENT_NO_ROOM', ten, true],
    ['the code changed', { code: 'PLACEMENT_MEMORY_UNKNOWN', at: 0 }, 'PLACEMENT_NO_ROOM', 1, true],
  ];
  for (const [name, last, code, now, want] of table) it(name, () => assert.equal(shouldWarn(last, code, now, ten), want));

  it('unplaceable_log_interval defaults to 10 minutes', async () => {
    assert.equal((await specOf()).settings.unplaceableLogIntervalMs, ten);
  });
});
