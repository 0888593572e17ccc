/**
 * Leadership on etcd as a pure state machine: `step(state, event, now)` → the next state and the
 * effects to run. The shell (election.ts) owns the clock, the timers and the etcd calls; it runs the
 * effects and feeds their results back as events. Times are monotonic ms except `wall` (the
 * record's `since`).
 *
 *   stopped ─start→ standby ─key absent→ campaigning ─key created→ leading
 *   leading ─renewal overdue | key deleted/replaced | lease gone | guarded write refused |
 *            etcd restored below the epoch | resign→ standby (`ended` says why) ─…→ campaigning
 *   any ─stop→ stopped (a leader resigns first: guarded delete of its key, lease revoked)
 *
 * The rules (client-go's leaderelection, etcd's concurrency.Election):
 * - the epoch is the leader key's create revision; the key is created only if absent, attached
 *   to a fresh lease;
 * - a leader leads while its last good renewal was SENT less than renewDeadlineMs ago (etcd starts
 *   the TTL when it receives the renewal, after we sent it, and renewDeadlineMs < TTL: it stops
 *   before etcd can let anyone else win); a renewal confirmed after the deadline lapsed deposes;
 * - a key that no leader of this etcd can have written (a create revision above etcd's revision,
 *   not a leader record, no lease) is a forgery: removed (guarded on its mod revision), never
 *   shown as the leader; a key naming this instance that it does not hold (a term it abandoned, a
 *   record from before an etcd restore) is removed the same way, so nobody waits out its lease;
 * - etcd's revision below the epoch, in an answer to a call sent during the term, means etcd was
 *   restored from a backup: the term ends (later create revisions could repeat this epoch);
 * - a term the reconciler ended (resign) revokes the lease at once and holds back from
 *   campaigning for one retry period, so another instance can be elected at once.
 */
import type { ReasonRef } from '../errors/catalogue.js';
import type { Kv } from './etcd-leader-io.js';

/** How soon a failed renewal is tried again (the retry period when that is shorter). */
export const FAILED_RENEWAL_RETRY_MS = 250;

export interface LeaderInfo {
  readonly id: string;
  readonly label: string;
  /** Epoch ms the leader was elected (its own clock). */
  readonly since: number;
  readonly epoch: number;
}

export interface LeadershipConfig {
  readonly id: string;
  readonly label: string;
  readonly renewDeadlineMs: number;
  readonly retryPeriodMs: number;
}

export interface Term {
  readonly epoch: number;
  readonly lease: string;
  readonly since: number;
  /** When the create that made the key was answered: calls sent later see a revision ≥ epoch. */
  readonly electedAt: number;
  /** Send time of the last renewal (or the grant) etcd confirmed. */
  readonly lastGoodSend: number;
  /** Send time of the renewal in flight, or null. */
  readonly renewing: number | null;
  readonly nextRenewal: number;
}

export type Ended = { readonly why: 'overdue' | 'deposed' | 'resigned'; readonly reason: ReasonRef; readonly at: number };

export type Phase =
  | { readonly kind: 'stopped' }
  | { readonly kind: 'standby'; readonly holdUntil: number; readonly ended: Ended | null }
  | { readonly kind: 'campaigning'; readonly sent: number; readonly since: number; readonly lease: string | null }
  | { readonly kind: 'leading'; readonly term: Term };

export interface LeadershipState {
  readonly phase: Phase;
  /** The leader as last seen (the key's record), or null. */
  readonly info: LeaderInfo | null;
  /** When `info` was last set: a look sent later is newer than it. */
  readonly infoAt: number;
  /** A look at the key in flight (its send time), and when the next one is due (null: none). */
  readonly looking: number | null;
  readonly nextLook: number | null;
  /** Send time of the last renewal or grant etcd confirmed, kept after a deposition. */
  readonly lastRenewalSent: number | null;
  /** The highest etcd revision answered, and when: an answer to a later call below it means etcd went back. */
  readonly highWater: { readonly revision: number; readonly at: number } | null;
  /** Mod revision of the last key value reported as forged or abandoned (reported once, removed on every sight). */
  readonly reportedKey: number | null;
  readonly started: boolean;
  /** The last forged leader key or backwards revision seen, and when (status shows it for KEY_PROBLEM_SHOWN_MS: shownProblem). */
  readonly problem: { readonly reason: ReasonRef; readonly at: number } | null;
}

export const initialLeadership: LeadershipState = { phase: { kind: 'stopped' }, info: null, infoAt: Number.NEGATIVE_INFINITY, looking: null, nextLook: null, lastRenewalSent: null, highWater: null, reportedKey: null, started: false, problem: null };

export type LeadershipEvent =
  | { readonly kind: 'start' }
  /** A due time came (the shell's one timer). */
  | { readonly kind: 'tick' }
  | { readonly kind: 'looked'; readonly sent: number; readonly kv: Kv | null; readonly revision: number }
  | { readonly kind: 'lookFailed' }
  | { readonly kind: 'granted'; readonly lease: string }
  | { readonly kind: 'grantFailed' }
  | { readonly kind: 'createAnswered'; readonly lease: string; readonly created: boolean; readonly revision: number; readonly current: Kv | null }
  | { readonly kind: 'createFailed'; readonly lease: string }
  | { readonly kind: 'renewed'; readonly lease: string; readonly sent: number; readonly ttl: number }
  | { readonly kind: 'renewalFailed'; readonly lease: string; readonly sent: number; readonly error: ReasonRef }
  | { readonly kind: 'watchPut'; readonly kv: Kv }
  | { readonly kind: 'watchDeleted'; readonly modRevision: number }
  /** The watch (re)started: events may have been missed, look again. */
  | { readonly kind: 'watchStarted' }
  /** A guarded write of `epoch` failed its leader-key compare. */
  | { readonly kind: 'guardRefused'; readonly epoch: number; readonly what: string }
  /** etcd answered a call sent at `sent` with its `revision` (guarded writes, revision()). */
  | { readonly kind: 'revisionSeen'; readonly sent: number; readonly revision: number }
  /** The reconciler ended the term for a reason of its own. */
  | { readonly kind: 'resign'; readonly reason: ReasonRef }
  | { readonly kind: 'stop' };

export type Effect =
  | { readonly kind: 'look'; readonly sent: number }
  | { readonly kind: 'grant' }
  | { readonly kind: 'create'; readonly lease: string; readonly value: string }
  | { readonly kind: 'keepalive'; readonly lease: string; readonly sent: number }
  | { readonly kind: 'revoke'; readonly lease: string }
  /** Delete the leader key if its create revision is `epoch` (and, when given, its mod revision `mod`). */
  | { readonly kind: 'deleteKey'; readonly epoch: number | null; readonly mod: number | null }
  | { readonly kind: 'elected'; readonly epoch: number }
  | { readonly kind: 'deposed'; readonly reason: ReasonRef }
  | { readonly kind: 'leader'; readonly info: LeaderInfo | null }
  | { readonly kind: 'note'; readonly level: 'info' | 'warn' | 'error'; readonly msg: string; readonly fields: Readonly<Record<string, unknown>> }
  /** The next due time (null: none); the shell keeps one timer for it. */
  | { readonly kind: 'wake'; readonly at: number | null };

export interface Transition {
  readonly state: LeadershipState;
  readonly effects: readonly Effect[];
}

/** The leader record in a key's value, or null when it is not one. */
export function leaderRecord(value: string, createRevision: number): LeaderInfo | null {
  try {
    const v = JSON.parse(value) as { id?: unknown; label?: unknown; since?: unknown };
    if (typeof v.id !== 'string' || typeof v.label !== 'string' || typeof v.since !== 'number') return null;
    return { id: v.id, label: v.label, since: v.since, epoch: createRevision };
  } catch {
    return null;
  }
}

/** Whether this instance leads at `now`: elected, and the last good renewal sent less than the renew deadline ago. */
/** How long status shows a leader-key problem after it was last seen (as the forged epochs: the last hour). */
export const KEY_PROBLEM_SHOWN_MS = 60 * 60_000;

/** The problem status shows at `now` (monotonic): the last one, while it was seen less than KEY_PROBLEM_SHOWN_MS ago. */
export function shownProblem(s: Pick<LeadershipState, 'problem'>, now: number): LeadershipState['problem'] {
  return s.problem !== null && now - s.problem.at < KEY_PROBLEM_SHOWN_MS ? s.problem : null;
}

export function leads(s: LeadershipState, now: number, c: Pick<LeadershipConfig, 'renewDeadlineMs'>): boolean {
  return s.phase.kind === 'leading' && now - s.phase.term.lastGoodSend < c.renewDeadlineMs;
}

/** The epoch while leading at `now`, else null. */
export function epochAt(s: LeadershipState, now: number, c: Pick<LeadershipConfig, 'renewDeadlineMs'>): number | null {
  return s.phase.kind === 'leading' && leads(s, now, c) ? s.phase.term.epoch : null;
}

/** When the shell must tick next: a look, a renewal, the renew deadline. */
export function dueAt(s: LeadershipState, c: Pick<LeadershipConfig, 'renewDeadlineMs'>): number | null {
  const times: number[] = [];
  if (s.nextLook !== null && s.looking === null) times.push(s.nextLook);
  if (s.phase.kind === 'leading') {
    const t = s.phase.term;
    if (t.renewing === null) times.push(t.nextRenewal);
    times.push(t.lastGoodSend + c.renewDeadlineMs);
  }
  return times.length ? Math.min(...times) : null;
}

/** One transition. `wall` is the wall clock (epoch ms), used only for the record's `since`. */
export function step(s0: LeadershipState, ev: LeadershipEvent, now: number, wall: number, c: LeadershipConfig): Transition {
  const fx: Effect[] = [];
  let s = s0;
  const set = (patch: Partial<LeadershipState>): void => {
    s = { ...s, ...patch };
  };
  const setInfo = (info: LeaderInfo | null): void => {
    const before = s.info;
    set({ info, infoAt: now });
    if (before?.epoch !== info?.epoch || before?.id !== info?.id) fx.push({ kind: 'leader', info });
  };
  const lookSoon = (at: number): void => {
    if (s.nextLook === null || at < s.nextLook) set({ nextLook: at });
  };
  const toStandby = (holdUntil: number, ended: Ended | null): void => set({ phase: { kind: 'standby', holdUntil, ended } });

  /** Ends the term: the lease revoked (its key goes with it), 'deposed' emitted, a look right away. */
  const depose = (why: Ended['why'], reason: ReasonRef, holdMs = 0): void => {
    if (s.phase.kind !== 'leading') return;
    const { epoch, lease } = s.phase.term;
    toStandby(now + holdMs, { why, reason, at: now });
    set({ nextLook: now + holdMs });
    fx.push({ kind: 'revoke', lease });
    if (s.info?.epoch === epoch && s.info.id === c.id) setInfo(null);
    fx.push({ kind: 'note', level: 'warn', msg: 'deposed: stopped acting as leader', fields: { code: reason.code, epoch, reason: reason.message } });
    fx.push({ kind: 'deposed', reason });
  };
  const overdueReason = (t: Term): ReasonRef => ({
    code: 'LEADER_RENEWAL_OVERDUE',
    message: `the election lease was last renewed ${Math.round(now - t.lastGoodSend)} ms ago (renew deadline ${c.renewDeadlineMs} ms): stopped acting before the lease could expire`,
  });

  /** An etcd revision answered to a call sent at `sent`. */
  const revisionSeen = (sent: number, revision: number): void => {
    const hw = s.highWater;
    if (hw && sent > hw.at && revision < hw.revision) {
      fx.push({ kind: 'note', level: 'error', msg: 'etcd revision went back: etcd was restored from a backup (or another cluster answers)', fields: { code: 'ETCD_REVISION_WENT_BACK', from: hw.revision, to: revision } });
      set({ problem: { reason: { code: 'ETCD_REVISION_WENT_BACK', message: `etcd's revision went back from ${hw.revision} to ${revision}: etcd was restored from a backup (or another cluster answers)` }, at: now } });
    }
    if (!hw || revision >= hw.revision || sent > hw.at) set({ highWater: { revision, at: now } });
    if (s.phase.kind === 'leading' && sent >= s.phase.term.electedAt && revision < s.phase.term.epoch) {
      depose('deposed', { code: 'ETCD_REVISION_WENT_BACK', message: `etcd answered with revision ${revision}, below this leader's epoch ${s.phase.term.epoch}: etcd was restored from a backup; the term ends and a new election follows` });
    }
  };

  /**
   * A value of the leader key seen (a look, the watch, a lost campaign); `bound`: a revision it
   * cannot be above; `fresh`: read by a call sent after the info we hold was learned (a look), so
   * it replaces that info even when its epoch is lower (etcd restored).
   */
  const see = (kv: Kv, bound: number, fresh: boolean): void => {
    const record = leaderRecord(kv.value, kv.createRevision);
    let forged = record === null || kv.lease === '0' || kv.createRevision > bound || kv.createRevision > kv.modRevision;
    const p = s.phase;
    let guard: number | null = null;
    if (p.kind === 'leading') {
      const t = p.term;
      if (kv.createRevision < t.epoch) return; // an event older than the txn that elected us
      if (!forged && kv.createRevision === t.epoch && kv.lease === t.lease && record !== null && record.id === c.id) return; // our own key
      if (forged || kv.createRevision === t.epoch) {
        // Our key overwritten in place (same create revision, another value or lease): not a leader's doing.
        depose('deposed', { code: 'LEADER_KEY_FORGED', message: `the leader key of epoch ${t.epoch} was overwritten (create revision ${kv.createRevision}, lease ${kv.lease}, ${record ? `naming ${record.id}` : 'not a leader record'}): someone else writes the etcd prefix; stepped down, the key is removed and a new election follows` });
        forged = true;
        if (kv.createRevision === t.epoch) guard = t.epoch;
      } else depose('deposed', { code: 'LEADER_DEPOSED', message: `the leader key now has epoch ${kv.createRevision} (${record?.label ?? 'unreadable value'}), not this instance's ${t.epoch}` });
    }
    const abandoned = !forged && record !== null && record.id === c.id && s.phase.kind === 'standby';
    if (forged || abandoned || record === null) {
      if (s.info && (fresh || forged || s.info.epoch === kv.createRevision)) setInfo(null);
      // Removed on every sight (a delete that failed is tried again at the next look); reported once.
      fx.push({ kind: 'deleteKey', epoch: guard, mod: kv.modRevision });
      if (s.reportedKey === kv.modRevision) return;
      set({ reportedKey: kv.modRevision });
      if (forged) {
        const why = record === null ? 'not an llmgw leader record' : kv.lease === '0' ? 'attached to no lease (it would never expire)' : kv.createRevision === guard ? `overwritten in place (lease ${kv.lease}, naming ${record.id})` : `its create revision ${kv.createRevision} is above etcd's revision ${Math.min(bound, kv.modRevision)}`;
        fx.push({ kind: 'note', level: 'error', msg: 'the leader key was not written by a leader of this etcd: removed, not followed', fields: { code: 'LEADER_KEY_FORGED', revision: kv.modRevision, why } });
        set({ problem: { reason: { code: 'LEADER_KEY_FORGED', message: `the leader key at revision ${kv.modRevision} was not written by a leader of this etcd (${why}): removed, not followed` }, at: now } });
      } else {
        fx.push({ kind: 'note', level: 'info', msg: 'the leader key names this instance, which does not hold it (an abandoned term, or a record from before an etcd restore): removed', fields: { epoch: kv.createRevision } });
      }
      return;
    }
    if (!fresh && s.info && s.info.epoch > kv.createRevision) return; // an older event than what we know
    setInfo(record);
  };

  const afterStop = s.phase.kind === 'stopped' && s.started;
  if (afterStop && (ev.kind === 'looked' || ev.kind === 'watchPut' || ev.kind === 'watchDeleted' || ev.kind === 'watchStarted' || ev.kind === 'tick')) {
    return { state: ev.kind === 'looked' ? { ...s, looking: null } : s, effects: [{ kind: 'wake', at: null }] };
  }
  switch (ev.kind) {
    case 'start':
      if (s.started) break;
      set({ started: true, looking: now });
      toStandby(now, null);
      fx.push({ kind: 'look', sent: now });
      break;
    case 'tick':
      if (s.phase.kind === 'leading') {
        const t = s.phase.term;
        if (now - t.lastGoodSend >= c.renewDeadlineMs) depose('overdue', overdueReason(t));
        else if (t.renewing === null && now >= t.nextRenewal) {
          set({ phase: { kind: 'leading', term: { ...t, renewing: now } } });
          fx.push({ kind: 'keepalive', lease: t.lease, sent: now });
        }
      }
      if (s.phase.kind !== 'stopped' && s.looking === null && s.nextLook !== null && now >= s.nextLook) {
        set({ looking: now, nextLook: null });
        fx.push({ kind: 'look', sent: now });
      }
      break;
    case 'looked': {
      set({ looking: null });
      revisionSeen(ev.sent, ev.revision);
      const p = s.phase;
      const fresh = ev.sent > s.infoAt;
      if (ev.kv) see(ev.kv, ev.revision, fresh);
      else {
        if (fresh) setInfo(null);
        if (p.kind === 'leading' && ev.sent >= p.term.electedAt) depose('deposed', { code: 'LEADER_DEPOSED', message: `the leader key of epoch ${p.term.epoch} is gone (lease expired or removed by hand)` });
      }
      if (s.phase.kind !== 'standby') break;
      if (ev.kv || now < s.phase.holdUntil) lookSoon(ev.kv ? now + c.retryPeriodMs : s.phase.holdUntil);
      else {
        set({ phase: { kind: 'campaigning', sent: now, since: wall, lease: null }, nextLook: null });
        fx.push({ kind: 'grant' });
      }
      break;
    }
    case 'lookFailed':
      set({ looking: null });
      if (s.phase.kind === 'standby') lookSoon(now + c.retryPeriodMs);
      break;
    case 'granted': {
      const p = s.phase;
      if (p.kind !== 'campaigning' || p.lease !== null) {
        fx.push({ kind: 'revoke', lease: ev.lease });
        break;
      }
      set({ phase: { ...p, lease: ev.lease } });
      fx.push({ kind: 'create', lease: ev.lease, value: JSON.stringify({ id: c.id, label: c.label, since: p.since }) });
      break;
    }
    case 'grantFailed':
      if (s.phase.kind === 'campaigning') {
        toStandby(now, null);
        lookSoon(now + c.retryPeriodMs);
      }
      break;
    case 'createAnswered': {
      const p = s.phase;
      const mine = p.kind === 'campaigning' && p.lease === ev.lease;
      if (!ev.created || !mine) {
        // Lost, or stop() came while it was in flight: the lease goes, and a key it made with it.
        fx.push({ kind: 'revoke', lease: ev.lease });
        if (ev.created) fx.push({ kind: 'deleteKey', epoch: ev.revision, mod: null });
        if (mine) {
          toStandby(now, null);
          lookSoon(now + c.retryPeriodMs);
        }
        revisionSeen(p.kind === 'campaigning' ? p.sent : now, ev.revision);
        if (ev.current) see(ev.current, ev.revision, false);
        break;
      }
      const term: Term = { epoch: ev.revision, lease: ev.lease, since: p.since, electedAt: now, lastGoodSend: p.sent, renewing: null, nextRenewal: p.sent + c.retryPeriodMs };
      set({ phase: { kind: 'leading', term }, lastRenewalSent: p.sent, nextLook: null });
      revisionSeen(p.sent, ev.revision);
      if (now - p.sent >= c.renewDeadlineMs) {
        // Answered too late to lead on it: the lease may be near its end.
        depose('overdue', overdueReason(term));
        break;
      }
      setInfo({ id: c.id, label: c.label, since: p.since, epoch: ev.revision });
      fx.push({ kind: 'note', level: 'info', msg: 'elected leader', fields: { epoch: ev.revision, label: c.label } });
      fx.push({ kind: 'elected', epoch: ev.revision });
      break;
    }
    case 'createFailed':
      fx.push({ kind: 'revoke', lease: ev.lease });
      if (s.phase.kind === 'campaigning' && s.phase.lease === ev.lease) {
        toStandby(now, null);
        lookSoon(now + c.retryPeriodMs);
      }
      break;
    case 'renewed':
    case 'renewalFailed': {
      const p = s.phase;
      if (p.kind !== 'leading' || p.term.lease !== ev.lease) break;
      const t = { ...p.term, renewing: null };
      set({ phase: { kind: 'leading', term: t } });
      if (ev.kind === 'renewed' && ev.ttl <= 0) {
        depose('deposed', { code: 'LEADER_DEPOSED', message: `the election lease of epoch ${t.epoch} is gone in etcd (TTL 0 on renewal: expired, revoked, or etcd restored without it); another instance may lead` });
      } else if (now - t.lastGoodSend >= c.renewDeadlineMs) {
        // Confirmed too late (the deadline lapsed while it was in flight), or failed past it.
        depose('overdue', { ...overdueReason(t), ...(ev.kind === 'renewalFailed' ? { message: `${overdueReason(t).message} (${ev.error.code}: ${ev.error.message})` } : {}) });
      } else if (ev.kind === 'renewed') {
        const good = Math.max(t.lastGoodSend, ev.sent);
        set({ phase: { kind: 'leading', term: { ...t, lastGoodSend: good, nextRenewal: ev.sent + c.retryPeriodMs } }, lastRenewalSent: good });
      } else {
        // After a failure, try again soon: with several endpoints the next call may reach a live member.
        set({ phase: { kind: 'leading', term: { ...t, nextRenewal: now + Math.min(c.retryPeriodMs, FAILED_RENEWAL_RETRY_MS) } } });
      }
      break;
    }
    case 'watchPut':
      see(ev.kv, ev.kv.modRevision, false);
      break;
    case 'watchDeleted': {
      const p = s.phase;
      if (s.info && s.info.epoch < ev.modRevision) setInfo(null);
      if (p.kind === 'leading' && ev.modRevision > p.term.epoch) depose('deposed', { code: 'LEADER_DEPOSED', message: `the leader key of epoch ${p.term.epoch} was deleted (lease expired or removed by hand)` });
      if (s.phase.kind === 'standby') lookSoon(Math.max(now, s.phase.holdUntil));
      break;
    }
    case 'watchStarted':
      if (s.phase.kind === 'standby' || s.phase.kind === 'leading') lookSoon(now);
      break;
    case 'guardRefused':
      if (s.phase.kind === 'leading' && s.phase.term.epoch === ev.epoch) {
        depose('deposed', { code: 'LEADER_DEPOSED', message: `${ev.what}: refused by etcd, the leader key no longer has this instance's epoch ${ev.epoch} (a newer leader exists or the lease expired)` });
      }
      break;
    case 'revisionSeen':
      revisionSeen(ev.sent, ev.revision);
      break;
    case 'resign':
      depose('resigned', ev.reason, c.retryPeriodMs);
      break;
    case 'stop': {
      const p = s.phase;
      if (p.kind === 'leading') {
        fx.push({ kind: 'deleteKey', epoch: p.term.epoch, mod: null });
        fx.push({ kind: 'revoke', lease: p.term.lease });
        fx.push({ kind: 'note', level: 'info', msg: 'resigned leadership', fields: { epoch: p.term.epoch } });
        if (s.info?.id === c.id) setInfo(null);
      }
      // A campaign in flight: its grant or create answers in 'stopped', and is undone then.
      set({ phase: { kind: 'stopped' }, nextLook: null });
      break;
    }
  }
  fx.push({ kind: 'wake', at: s.phase.kind === 'stopped' ? null : dueAt(s, c) });
  return { state: s, effects: fx };
}
