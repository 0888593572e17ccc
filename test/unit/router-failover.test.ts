import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { CLOSED, EJECT_AFTER, nextBreaker, type Breaker, type BreakerEvent } from '../../src/router/breaker.js';
import { RouterError, renderError } from '../../src/router/errors.js';
import { ejectable, failoverOf, isMove, streamApiOf, streamErrorEvent, type Failover, type FailureFacts, type UpstreamFailure } from '../../src/router/failover.js';

const facts = (failure: UpstreamFailure, o: Partial<FailureFacts> = {}): FailureFacts => ({ failure, clientGotByte: false, replicaResponded: false, retriedSame: false, moves: 0, ...o });

describe('failoverOf (where a request goes after a failed attempt)', () => {
  const table: [string, FailureFacts, Failover][] = [
    // the request never reached the replica: each ready replica once
    ['refused connection', facts('connect'), 'other'],
    ['refused again after a move', facts('connect', { moves: 1, retriedSame: true }), 'other'],
    ['connect timeout', facts('connect_timeout'), 'other'],
    // a reset before any response: a stale keep-alive connection first, then elsewhere
    ['reset before a response', facts('reset'), 'same'],
    ['reset again on the same replica', facts('reset', { retriedSame: true }), 'other'],
    ['reset after the response headers (the replica died working on it)', facts('reset', { replicaResponded: true }), 'other'],
    ['reset after one move already', facts('reset', { retriedSame: true, moves: 1 }), 'none'],
    // llama-server 503 while loading
    ['503 from the replica', facts('unavailable', { replicaResponded: true }), 'other'],
    ['503 after one move already', facts('unavailable', { replicaResponded: true, moves: 1 }), 'none'],
    // after the first byte reached the client: never again
    ['reset mid-stream', facts('reset', { clientGotByte: true, replicaResponded: true }), 'none'],
    ['refused… after the first byte (cannot happen, still none)', facts('connect', { clientGotByte: true }), 'none'],
    // not the replica being gone: not retried (a slow replica, a wrong key, anything else)
    ['first-byte timeout', facts('first_byte_timeout'), 'none'],
    ['stalled stream', facts('stall_timeout', { replicaResponded: true }), 'none'],
    ['engine key refused', facts('auth', { replicaResponded: true }), 'none'],
    ['other error', facts('error'), 'none'],
  ];
  for (const [name, f, want] of table) {
    it(`${name} → ${want}`, () => assert.equal(failoverOf(f), want));
  }

  it('moves are counted only where the request may have reached the replica', () => {
    assert.deepEqual(
      (['connect', 'connect_timeout', 'reset', 'unavailable', 'first_byte_timeout'] as const).map((f) => [f, isMove(f)]),
      [['connect', false], ['connect_timeout', false], ['reset', true], ['unavailable', true], ['first_byte_timeout', false]],
    );
  });

  it('the failures that say a replica is not serving count toward its ejection; slow or misconfigured ones do not', () => {
    const all: UpstreamFailure[] = ['connect', 'connect_timeout', 'reset', 'unavailable', 'first_byte_timeout', 'stall_timeout', 'auth', 'error'];
    assert.deepEqual(all.filter(ejectable), ['connect', 'connect_timeout', 'reset', 'unavailable']);
  });
});

describe('nextBreaker (a replica out of routing after repeated failures, back when seen healthy)', () => {
  const run = (events: BreakerEvent[]): Breaker => events.reduce((b, e) => nextBreaker(b, e), CLOSED);
  const table: [string, BreakerEvent[], Breaker][] = [
    ['no events', [], CLOSED],
    ['one failure', ['failure'], { failures: 1, open: false }],
    [`${EJECT_AFTER - 1} failures`, Array<BreakerEvent>(EJECT_AFTER - 1).fill('failure'), { failures: EJECT_AFTER - 1, open: false }],
    [`${EJECT_AFTER} failures in a row: ejected`, Array<BreakerEvent>(EJECT_AFTER).fill('failure'), { failures: EJECT_AFTER, open: true }],
    ['a response between failures resets the count', ['failure', 'failure', 'response', 'failure', 'failure'], { failures: 2, open: false }],
    ['ejected, a failed probe: still out', [...Array<BreakerEvent>(EJECT_AFTER).fill('failure'), 'unhealthy'], { failures: EJECT_AFTER, open: true }],
    ['ejected, more failures: still out', [...Array<BreakerEvent>(EJECT_AFTER + 2).fill('failure')], { failures: EJECT_AFTER + 2, open: true }],
    ['ejected, a probe answers 200: back', [...Array<BreakerEvent>(EJECT_AFTER).fill('failure'), 'unhealthy', 'healthy'], CLOSED],
    ['ejected, a response (the last replica left was tried): back', [...Array<BreakerEvent>(EJECT_AFTER).fill('failure'), 'response'], CLOSED],
    ['a probe while closed changes nothing', ['failure', 'unhealthy'], { failures: 1, open: false }],
  ];
  for (const [name, events, want] of table) {
    it(name, () => assert.deepEqual(run(events), want));
  }

  it('a closed breaker with no failures is returned as is on a response (no allocation per request)', () => {
    assert.equal(nextBreaker(CLOSED, 'response'), CLOSED);
  });
});

describe('a stream cut after its first byte ends in its API\'s own shape', () => {
  const r = renderError(new RouterError('UPSTREAM_FAILED', "The connection to the replica of model 'm' failed mid-response: other side closed"));

  it('picks the API by path', () => {
    assert.equal(streamApiOf('/v1/chat/completions'), 'openai');
    assert.equal(streamApiOf('/v1/completions'), 'openai');
    assert.equal(streamApiOf('/v1/messages'), 'anthropic');
    assert.equal(streamApiOf('/v1/messages?beta=true'), 'anthropic');
    assert.equal(streamApiOf('/v1/messages/count_tokens'), 'openai');
  });

  it('OpenAI: one `data: {"error":…}` event with the envelope', () => {
    const ev = streamErrorEvent('openai', r);
    assert.match(ev, /^data: \{.*\}\n\n$/);
    assert.deepEqual(JSON.parse(ev.slice('data: '.length)), { error: { message: "The connection to the replica of model 'm' failed mid-response: other side closed", type: 'server_error', code: 'upstream_error', param: null } });
  });

  it('Anthropic: `event: error` with {type:"error", error:{type, message}}', () => {
    const ev = streamErrorEvent('anthropic', r);
    const [event, data] = ev.trimEnd().split('\n');
    assert.equal(event, 'event: error');
    assert.deepEqual(JSON.parse(data!.slice('data: '.length)), { type: 'error', error: { type: 'api_error', message: "The connection to the replica of model 'm' failed mid-response: other side closed" } });
    assert.ok(ev.endsWith('\n\n'));
  });
});
