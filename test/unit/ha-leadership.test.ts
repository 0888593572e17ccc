/** Table tests of the leadership state machine (src/ha/leadership.ts): (state, event, now) → state, effects. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Kv } from '../../src/ha/etcd-leader-io.js';
import { dueAt, initialLeadership, KEY_PROBLEM_SHOWN_MS, leads, shownProblem, step, type Effect, type LeaderInfo, type LeadershipEvent, type LeadershipState, type Term } from '../../src/ha/leadership.js';

const C = { id: 'a', label: 'a.test', renewDeadlineMs: 2_000, retryPeriodMs: 500 };
const WALL = 1_700_000_000_000;
const KEY = '/f/leader';

const rec = (id: string, epoch: number, o: Partial<Kv> = {}): Kv => ({ key: KEY, value: JSON.stringify({ id, label: `${id}.test`, since: 5 }), createRevision: epoch, modRevision: epoch, lease: `L${id}`, ...o });
const info = (id: string, epoch: number): LeaderInfo => ({ id, label: `${id}.test`, since: 5, epoch });

const standby = (o: Partial<LeadershipState> = {}, holdUntil = 0): LeadershipState => ({ ...initialLeadership, started: true, phase: { kind: 'standby', holdUntil, ended: null }, ...o });
const term = (o: Partial<Term> = {}): Term => ({ epoch: 10, lease: 'La', since: 5, electedAt: 1_000, lastGoodSend: 1_000, renewing: null, nextRenewal: 1_500, ...o });
const leading = (t: Partial<Term> = {}, o: Partial<LeadershipState> = {}): LeadershipState => ({ ...initialLeadership, started: true, phase: { kind: 'leading', term: term(t) }, info: info('a', t.epoch ?? 10), infoAt: 1_000, lastRenewalSent: 1_000, ...o });
const campaigning = (lease: string | null = null): LeadershipState => ({ ...initialLeadership, started: true, phase: { kind: 'campaigning', sent: 900, since: WALL, lease } });
const stopped: LeadershipState = { ...initialLeadership, started: true };

/** The effects without the trailing wake, as kind[:detail] strings. */
function kinds(fx: readonly Effect[]): string[] {
  return fx
    .filter((e) => e.kind !== 'wake')
    .map((e) => {
      switch (e.kind) {
        case 'deposed':
          return `deposed:${e.reason.code}`;
        case 'note':
          return typeof e.fields.code === 'string' ? `note:${e.fields.code}` : 'note';
        case 'leader':
          return `leader:${e.info ? `${e.info.id}@${e.info.epoch}` : 'none'}`;
        case 'deleteKey':
          return `deleteKey:${e.epoch ?? '-'}/${e.mod ?? '-'}`;
        case 'revoke':
        case 'keepalive':
          return `${e.kind}:${e.lease}`;
        case 'elected':
          return `elected:${e.epoch}`;
        default:
          return e.kind;
      }
    });
}

interface Row {
  readonly what: string;
  readonly from: LeadershipState;
  readonly ev: LeadershipEvent;
  readonly now: number;
  readonly fx: readonly string[];
  readonly check?: (s: LeadershipState) => void;
}

const phase = (k: LeadershipState['phase']['kind']) => (s: LeadershipState) => assert.equal(s.phase.kind, k);
const ended = (why: string, code: string) => (s: LeadershipState) => {
  assert.equal(s.phase.kind, 'standby');
  assert.equal(s.phase.kind === 'standby' && s.phase.ended?.why, why);
  assert.equal(s.phase.kind === 'standby' && s.phase.ended?.reason.code, code);
};

const rows: Row[] = [
  { what: 'start: a look at the key', from: initialLeadership, ev: { kind: 'start' }, now: 0, fx: ['look'], check: phase('standby') },
  { what: 'the key absent: campaign (grant a lease)', from: standby({ looking: 100 }), ev: { kind: 'looked', sent: 100, kv: null, revision: 7 }, now: 120, fx: ['grant'], check: phase('campaigning') },
  { what: 'another leader: followed, looked at again a retry period on', from: standby({ looking: 100 }), ev: { kind: 'looked', sent: 100, kv: rec('b', 5), revision: 7 }, now: 120, fx: ['leader:b@5'], check: (s) => (phase('standby')(s), assert.equal(s.nextLook, 620)) },
  { what: 'the key absent while holding back after a resign: no campaign before the hold ends', from: standby({ looking: 100 }, 400), ev: { kind: 'looked', sent: 100, kv: null, revision: 7 }, now: 120, fx: [], check: (s) => assert.equal(s.nextLook, 400) },
  { what: 'lease granted: create the key if absent, with our record', from: campaigning(), ev: { kind: 'granted', lease: 'La' }, now: 950, fx: ['create'] },
  { what: 'a lease granted after stop(): revoked', from: stopped, ev: { kind: 'granted', lease: 'La' }, now: 950, fx: ['revoke:La'] },
  { what: 'created: leading, the epoch is the create revision, the grant counts as the first renewal', from: campaigning('La'), ev: { kind: 'createAnswered', lease: 'La', created: true, revision: 10, current: null }, now: 1_000, fx: ['leader:a@10', 'note', 'elected:10'], check: (s) => (assert.equal(s.phase.kind === 'leading' && s.phase.term.lastGoodSend, 900), assert.equal(s.phase.kind === 'leading' && s.phase.term.epoch, 10)) },
  { what: 'created, but answered after the renew deadline: not led on', from: campaigning('La'), ev: { kind: 'createAnswered', lease: 'La', created: true, revision: 10, current: null }, now: 2_900, fx: ['revoke:La', 'note:LEADER_RENEWAL_OVERDUE', 'deposed:LEADER_RENEWAL_OVERDUE'], check: ended('overdue', 'LEADER_RENEWAL_OVERDUE') },
  { what: 'lost the race: lease revoked, the winner followed', from: campaigning('La'), ev: { kind: 'createAnswered', lease: 'La', created: false, revision: 11, current: rec('b', 11) }, now: 1_000, fx: ['revoke:La', 'leader:b@11'], check: phase('standby') },
  { what: 'created after stop(): the key deleted and the lease revoked', from: stopped, ev: { kind: 'createAnswered', lease: 'La', created: true, revision: 10, current: null }, now: 1_000, fx: ['revoke:La', 'deleteKey:10/-'], check: phase('stopped') },
  { what: 'renewal due: keepalive', from: leading(), ev: { kind: 'tick' }, now: 1_500, fx: ['keepalive:La'], check: (s) => assert.equal(s.phase.kind === 'leading' && s.phase.term.renewing, 1_500) },
  { what: 'renew deadline passed: deposed before the lease can expire, and a look at once', from: leading({ renewing: 1_500 }), ev: { kind: 'tick' }, now: 3_000, fx: ['revoke:La', 'leader:none', 'note:LEADER_RENEWAL_OVERDUE', 'deposed:LEADER_RENEWAL_OVERDUE', 'look'], check: ended('overdue', 'LEADER_RENEWAL_OVERDUE') },
  { what: 'renewed in time: the send time counts', from: leading({ renewing: 1_500 }), ev: { kind: 'renewed', lease: 'La', sent: 1_500, ttl: 3 }, now: 1_600, fx: [], check: (s) => (assert.equal(s.phase.kind === 'leading' && s.phase.term.lastGoodSend, 1_500), assert.equal(s.lastRenewalSent, 1_500)) },
  { what: 'renewal confirmed after the deadline lapsed: stays deposed', from: leading({ renewing: 1_500 }), ev: { kind: 'renewed', lease: 'La', sent: 1_500, ttl: 3 }, now: 3_100, fx: ['revoke:La', 'leader:none', 'note:LEADER_RENEWAL_OVERDUE', 'deposed:LEADER_RENEWAL_OVERDUE'] },
  { what: 'renewal answered TTL 0: the lease is gone', from: leading({ renewing: 1_500 }), ev: { kind: 'renewed', lease: 'La', sent: 1_500, ttl: 0 }, now: 1_600, fx: ['revoke:La', 'leader:none', 'note:LEADER_DEPOSED', 'deposed:LEADER_DEPOSED'] },
  { what: 'renewal failed: tried again in 250 ms', from: leading({ renewing: 1_500 }), ev: { kind: 'renewalFailed', lease: 'La', sent: 1_500, error: { code: 'ETCD_UNAVAILABLE', message: 'down' } }, now: 1_600, fx: [], check: (s) => assert.equal(s.phase.kind === 'leading' && s.phase.term.nextRenewal, 1_850) },
  { what: 'an answer for an older lease: ignored', from: leading(), ev: { kind: 'renewed', lease: 'Lold', sent: 1_500, ttl: 0 }, now: 1_600, fx: [], check: phase('leading') },
  { what: 'the watch: a newer epoch holds the key', from: leading(), ev: { kind: 'watchPut', kv: rec('b', 12) }, now: 1_200, fx: ['revoke:La', 'leader:none', 'note:LEADER_DEPOSED', 'deposed:LEADER_DEPOSED', 'leader:b@12'] },
  { what: 'the watch: an event older than our term', from: leading(), ev: { kind: 'watchPut', kv: rec('b', 8) }, now: 1_200, fx: [], check: phase('leading') },
  { what: 'the watch: our own key', from: leading(), ev: { kind: 'watchPut', kv: rec('a', 10, { lease: 'La' }) }, now: 1_200, fx: [], check: phase('leading') },
  { what: 'our key overwritten in place (same create revision, names b): forged, stepped down, removed', from: leading(), ev: { kind: 'watchPut', kv: rec('b', 10, { modRevision: 13 }) }, now: 1_200, fx: ['revoke:La', 'leader:none', 'note:LEADER_KEY_FORGED', 'deposed:LEADER_KEY_FORGED', 'deleteKey:10/13', 'note:LEADER_KEY_FORGED'], check: (s) => assert.equal(s.info, null) },
  { what: 'a create revision above its own mod revision: forged, removed, not followed', from: standby({ info: info('b', 5) }), ev: { kind: 'watchPut', kv: rec('c', 999_999, { modRevision: 20 }) }, now: 1_200, fx: ['leader:none', 'deleteKey:-/20', 'note:LEADER_KEY_FORGED'], check: (s) => (assert.equal(s.reportedKey, 20), assert.equal(s.problem?.reason.code, 'LEADER_KEY_FORGED'), assert.equal(s.problem?.at, 1_200)) },
  { what: 'a create revision above etcd\'s revision in a look: forged', from: standby({ looking: 1_000 }), ev: { kind: 'looked', sent: 1_000, kv: rec('c', 999_999, { modRevision: 999_999 }), revision: 30 }, now: 1_100, fx: ['deleteKey:-/999999', 'note:LEADER_KEY_FORGED'] },
  { what: 'a leader record with no lease (it would never expire): forged', from: standby(), ev: { kind: 'watchPut', kv: rec('b', 15, { lease: '0' }) }, now: 1_200, fx: ['deleteKey:-/15', 'note:LEADER_KEY_FORGED'] },
  { what: 'not a leader record: forged; seen again, removed again (a delete that failed) but not reported twice', from: standby({ reportedKey: 16 }), ev: { kind: 'watchPut', kv: rec('b', 16, { value: 'hello' }) }, now: 1_200, fx: ['deleteKey:-/16'] },
  { what: 'a key naming this instance, which does not hold it: removed', from: standby({ looking: 1_000 }), ev: { kind: 'looked', sent: 1_000, kv: rec('a', 8), revision: 30 }, now: 1_100, fx: ['deleteKey:-/8', 'note'] },
  { what: 'the key deleted after our create: deposed', from: leading(), ev: { kind: 'watchDeleted', modRevision: 14 }, now: 1_200, fx: ['leader:none', 'revoke:La', 'note:LEADER_DEPOSED', 'deposed:LEADER_DEPOSED'] },
  { what: 'a guarded write refused for our epoch: deposed', from: leading(), ev: { kind: 'guardRefused', epoch: 10, what: 'writing x' }, now: 1_200, fx: ['revoke:La', 'leader:none', 'note:LEADER_DEPOSED', 'deposed:LEADER_DEPOSED'] },
  { what: 'a guarded write refused for an older term: this term goes on', from: leading(), ev: { kind: 'guardRefused', epoch: 7, what: 'writing x' }, now: 1_200, fx: [], check: phase('leading') },
  { what: 'etcd answers below our epoch a call sent during the term: restored from a backup, deposed', from: leading(), ev: { kind: 'revisionSeen', sent: 1_100, revision: 6 }, now: 1_200, fx: ['revoke:La', 'leader:none', 'note:ETCD_REVISION_WENT_BACK', 'deposed:ETCD_REVISION_WENT_BACK'] },
  { what: 'a revision below the epoch for a call sent before the term began: no proof of anything', from: leading(), ev: { kind: 'revisionSeen', sent: 950, revision: 6 }, now: 1_200, fx: [], check: phase('leading') },
  { what: 'the revision went back (a later call, a lower revision): reported', from: standby({ highWater: { revision: 50, at: 900 } }), ev: { kind: 'revisionSeen', sent: 1_000, revision: 20 }, now: 1_100, fx: ['note:ETCD_REVISION_WENT_BACK'], check: (s) => (assert.deepEqual(s.highWater, { revision: 20, at: 1_100 }), assert.equal(s.problem?.reason.code, 'ETCD_REVISION_WENT_BACK')) },
  { what: 'resign: deposed with the reconciler\'s reason, the lease revoked, no campaign for a retry period', from: leading(), ev: { kind: 'resign', reason: { code: 'STATUS_EPOCH_STALE', message: 'newer' } }, now: 1_200, fx: ['revoke:La', 'leader:none', 'note:STATUS_EPOCH_STALE', 'deposed:STATUS_EPOCH_STALE'], check: (s) => (ended('resigned', 'STATUS_EPOCH_STALE')(s), assert.equal(s.phase.kind === 'standby' && s.phase.holdUntil, 1_700)) },
  { what: 'resign while not leading: nothing', from: standby(), ev: { kind: 'resign', reason: { code: 'NODE_FENCED', message: 'x' } }, now: 1_200, fx: [] },
  { what: 'stop while leading: resigned (guarded delete, lease revoked), no deposed', from: leading(), ev: { kind: 'stop' }, now: 1_200, fx: ['deleteKey:10/-', 'revoke:La', 'note', 'leader:none'], check: phase('stopped') },
  { what: 'a look sent after what we knew: it replaces the info, even with a lower epoch (etcd restored)', from: standby({ info: info('b', 50), infoAt: 900, looking: 1_000 }), ev: { kind: 'looked', sent: 1_000, kv: rec('c', 20), revision: 25 }, now: 1_100, fx: ['leader:c@20'] },
  { what: 'a watch event with a lower epoch than what we know: older, ignored', from: standby({ info: info('b', 50), infoAt: 900 }), ev: { kind: 'watchPut', kv: rec('c', 20) }, now: 1_100, fx: [] },
  { what: 'after stop(): a look answered is ignored', from: { ...stopped, looking: 1_000 }, ev: { kind: 'looked', sent: 1_000, kv: rec('a', 8), revision: 30 }, now: 1_100, fx: [], check: (s) => assert.equal(s.looking, null) },
];

describe('leadership transitions', () => {
  for (const r of rows) {
    it(r.what, () => {
      const { state, effects } = step(r.from, r.ev, r.now, WALL, C);
      assert.deepEqual(kinds(effects), r.fx);
      assert.equal(effects.at(-1)?.kind, 'wake', 'every transition ends with the next due time');
      r.check?.(state);
    });
  }

  it('the create carries our record, with the wall-clock time the campaign began', () => {
    const { effects } = step(campaigning(), { kind: 'granted', lease: 'La' }, 950, WALL + 1, C);
    const create = effects.find((e) => e.kind === 'create');
    assert.deepEqual(create && create.kind === 'create' && JSON.parse(create.value), { id: 'a', label: 'a.test', since: WALL });
  });

  it('leads only while the last good renewal was sent less than the renew deadline ago', () => {
    const s = leading({ lastGoodSend: 1_000 });
    assert.equal(leads(s, 2_999, C), true);
    assert.equal(leads(s, 3_000, C), false);
    assert.equal(leads(standby(), 0, C), false);
  });

  it('a key problem is shown for an hour after it was last seen, then no more (a forgery seen again shows again)', () => {
    const { state } = step(standby({ info: info('b', 5) }), { kind: 'watchPut', kv: rec('c', 999_999, { modRevision: 20 }) }, 1_200, WALL, C);
    assert.equal(shownProblem(state, 1_200)?.reason.code, 'LEADER_KEY_FORGED');
    assert.equal(shownProblem(state, 1_200 + KEY_PROBLEM_SHOWN_MS - 1)?.at, 1_200);
    assert.equal(shownProblem(state, 1_200 + KEY_PROBLEM_SHOWN_MS), null);
    assert.equal(shownProblem(initialLeadership, 0), null);
  });

  it('the next due time: a renewal, or the deadline while one is in flight, or the next look', () => {
    assert.equal(dueAt(leading(), C), 1_500);
    assert.equal(dueAt(leading({ renewing: 1_500 }), C), 3_000);
    assert.equal(dueAt(standby({ nextLook: 700 }), C), 700);
    assert.equal(dueAt(standby({ nextLook: 700, looking: 600 }), C), null);
  });
});
