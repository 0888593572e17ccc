/**
 * A request that waits (for activation, or in its model's queue) holds its body's bytes — which the
 * router counts against maxBufferedBytes — and never the parsed object, which can be many times
 * their size: a body of 60,000 empty objects is 180 KB of JSON and several MB parsed, so a key
 * granted one slow model could otherwise grow the heap by GiBs within the byte budget (#27).
 */
import { strict as assert } from 'node:assert';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { after, describe, test } from 'node:test';
import { request } from 'undici';
import { buildRouter } from '../../src/router/app.js';
import { FakeFleetView, fakeSpec } from '../harness/fake-fleet-view.js';
import { until } from '../harness/wait.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const onDemand = { mode: 'on_demand', idleTimeoutMs: 600_000, maxReplicas: 1 } as const;
const WAITING = 12;
const PAD = 60_000;

describe('what a waiting request holds', () => {
  const fleet = new FakeFleetView(fakeSpec({ models: { slow: { scaling: onDemand, routing: 'affinity' } }, settings: { activationWindowMs: 60_000 } }));
  fleet.onDemand = () => ({ kind: 'starting' });
  const app = buildRouter({ fleet, auth: { required: false } });
  const gone = new AbortController();
  after(async () => {
    gone.abort();
    await app.close();
  });

  test(`${WAITING} requests waiting for activation hold about their bytes, not their parsed bodies`, async () => {
    await app.listen({ port: 0, host: '127.0.0.1' });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/v1/chat/completions`;
    const body = JSON.stringify({ model: 'slow', messages: [{ role: 'user', content: 'hi' }], pad: Array.from({ length: PAD }, () => ({})) });
    // what one parsed body costs on this heap, measured the same way
    gc();
    const base0 = process.memoryUsage().heapUsed;
    const kept = Array.from({ length: WAITING }, () => JSON.parse(body) as unknown);
    gc();
    const parsedCost = (process.memoryUsage().heapUsed - base0) / WAITING;
    kept.length = 0;
    gc();
    assert.ok(parsedCost > 8 * body.length, `a parsed body costs ${parsedCost} bytes for ${body.length} of JSON: the test proves nothing`);

    const base = process.memoryUsage().heapUsed;
    const pending = Array.from({ length: WAITING }, () => request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: gone.signal }).catch(() => undefined));
    await until('every request waiting for activation', 5_000, () => fleet.waiting('slow') === WAITING);
    gc();
    const held = (process.memoryUsage().heapUsed - base) / WAITING;
    assert.ok(held < parsedCost / 2, `each waiting request holds ${Math.round(held)} bytes on the heap; a parsed body is ${Math.round(parsedCost)} (its JSON ${body.length})`);
    gone.abort();
    await Promise.all(pending);
  });
});
