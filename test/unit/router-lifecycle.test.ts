/** The router's lifecycle (src/router/lifecycle.ts): the shutdown flag and signal, and the drain's wait for idleness. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { RouterError } from '../../src/router/errors.js';
import { Lifecycle } from '../../src/router/lifecycle.js';

describe('router lifecycle', () => {
  test('serving until stop(); stop sets the flag and aborts the signal with its reason, once', () => {
    const life = new Lifecycle(() => 0);
    assert.equal(life.shuttingDown, false);
    assert.equal(life.signal.aborted, false);
    const why = new RouterError('ROUTER_SHUTTING_DOWN', 'The router is shutting down.');
    life.stop(why);
    assert.equal(life.shuttingDown, true);
    assert.equal(life.signal.reason, why);
    life.stop(new RouterError('ROUTER_SHUTTING_DOWN', 'again'));
    assert.equal(life.signal.reason, why);
  });

  test('whenIdle: at once when nothing is in progress', async () => {
    const life = new Lifecycle(() => 0);
    await life.whenIdle(3_600_000);
  });

  test('whenIdle: resolves when the last request leaves, not before', async () => {
    let busy = 2;
    const life = new Lifecycle(() => busy);
    let idle = false;
    const wait = life.whenIdle(3_600_000).then(() => (idle = true));
    busy = 1;
    life.left();
    await Promise.resolve();
    assert.equal(idle, false, 'one request still in progress');
    busy = 0;
    life.left();
    await wait;
    assert.equal(idle, true);
    // nobody waits any more: a later left() is a no-op
    life.left();
  });

  test('whenIdle: resolves after its bound with requests still in progress; a later wait still resolves on left()', async () => {
    let busy = 1;
    const life = new Lifecycle(() => busy);
    await life.whenIdle(1);
    const second = life.whenIdle(3_600_000);
    busy = 0;
    life.left();
    await second;
  });
});
