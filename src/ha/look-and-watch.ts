/**
 * A look at etcd followed by a watch from the next revision (lookAndWatch), and one key watched that
 * way (watchKey): what Published and Requests read etcd with.
 *
 * Shell: its retries run on the timers it is given; it reads no clock.
 */
import type { Etcd3, IKeyValue } from 'etcd3';
import { cancelWatcher } from './election.js';
import { etcdError } from './etcd.js';
import { CANCEL_TIMEOUT_MS } from './etcd-requests-io.js';
import type { LoopTimers } from './shell-time.js';

/** What lookAndWatch keeps open: a watch it can close. */
export interface OpenWatch {
  cancel(): Promise<void>;
}

/**
 * A look at etcd followed by a watch from the next revision, kept up for as long as it is open:
 * `look` reads what is there now (unless `closed()`) and returns a watch from the revision after
 * its read, calling `ended` if etcd ends it. A watch etcd ends (compacted past its revision) is
 * replaced by a fresh look a second on, so what was seen may repeat but is never missed for good;
 * an ended watch is not cancelled again. Resolves to a closer.
 */
export async function lookAndWatch(what: string, timers: LoopTimers, look: (closed: () => boolean, ended: () => void) => Promise<OpenWatch | null>): Promise<() => Promise<void>> {
  let closed = false;
  let watch: OpenWatch | null = null;
  let retry: unknown = null;
  const open = async (): Promise<void> => {
    const token: { w: OpenWatch | null } = { w: null };
    const w = await look(
      () => closed,
      () => {
        if (token.w === null || watch !== token.w) return;
        watch = null;
        again();
      },
    );
    if (!w) return;
    token.w = w;
    watch = w;
  };
  const again = (): void => {
    if (closed) return;
    retry = timers.setTimeout(() => {
      retry = null;
      open().catch(again);
    }, 1_000);
  };
  try {
    await open();
  } catch (e) {
    throw etcdError(e, what);
  }
  return async () => {
    closed = true;
    if (retry !== null) timers.clearTimeout(retry);
    const w = watch;
    watch = null;
    if (w) await w.cancel();
  };
}

/** Watches one key: the current value first, then every change (null: deleted). */
export function watchKey(client: Etcd3, key: string, timers: LoopTimers, onValue: (v: string | null) => void): Promise<() => Promise<void>> {
  return lookAndWatch(`reading ${key}`, timers, async (closed, ended) => {
    const res = await client.get(key).exec();
    if (closed()) return null;
    const kv = res.kvs[0];
    onValue(kv ? kv.value.toString('utf8') : null);
    const w = client.watch().key(key).startRevision(String(Number(res.header.revision) + 1)).watcher();
    w.on('put', (k: IKeyValue) => onValue(k.value.toString('utf8')));
    w.on('delete', () => onValue(null));
    // ended by etcd: etcd3 has dropped this watcher already; cancelling it again would make it throw on the stream
    let over = false;
    w.on('error', () => {
      over = true;
      ended();
    });
    return { cancel: () => (over ? Promise.resolve() : cancelWatcher(w, CANCEL_TIMEOUT_MS, timers)) };
  });
}

