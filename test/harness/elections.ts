/** Shared by the etcd-*.test.ts files: short lease settings and Elections on a real etcd. */
import { once } from 'node:events';
import { after, before } from 'node:test';
import { performance } from 'node:perf_hooks';
import type { Etcd3 } from 'etcd3';
import pino from 'pino';
import { Election, type ElectionOptions } from '../../src/ha/election.js';
import { openEtcd, type EtcdSettings } from '../../src/ha/etcd.js';
import type { EtcdInstance } from '../harness/etcd.js';

/** Short timings so the tests are fast: lease 3 s, renew deadline 2 s, renew every 500 ms. */
export const FAST = Object.freeze({ leaseTtlSeconds: 3, renewDeadlineMs: 2_000, retryPeriodMs: 500 });

export const mono = (): number => performance.now();

let fleets = 0;
/** A fresh key prefix per test, so tests sharing one etcd do not see each other. */
export function freshPrefix(): string {
  return `/llmgw-test/${process.pid}-${++fleets}`;
}

export function settings(endpoint: string, prefix: string): EtcdSettings {
  return { hosts: [endpoint], prefix, tls: null, auth: null, ...FAST };
}

export interface Instance {
  readonly client: Etcd3;
  readonly election: Election;
  close(): Promise<void>;
}

export function instance(endpoint: string, prefix: string, id: string, extra: Partial<ElectionOptions> = {}): Instance {
  return instanceWith(settings(endpoint, prefix), id, extra);
}

/** An Election on a client opened with these settings (TLS, auth), started by the caller. */
export function instanceWith(s: EtcdSettings, id: string, extra: Partial<ElectionOptions> = {}): Instance {
  const prefix = s.prefix;
  const client = openEtcd(s, Date.now);
  const election = new Election(client, { prefix, id, label: `${id}.test`, ...FAST, logger: pino({ level: 'silent' }), ...extra });
  return {
    client,
    election,
    async close() {
      await election.stop();
      client.close();
    },
  };
}

/** Resolves with the next 'elected' epoch of `e`, or at once if it leads already. */
export async function elected(e: Election): Promise<number> {
  if (e.isLeader()) return e.epoch!;
  const [epoch] = (await once(e, 'elected')) as [number];
  return epoch;
}

/** etcd's current revision as `i` sees it (every put and successful txn moves it). */
export async function etcdRevision(i: Instance): Promise<number> {
  return Number((await i.client.get('/nothing').exec()).header.revision);
}

/**
 * One real etcd for a describe block (started before, stopped after) and the instances made on it
 * (closed after); `viaPort`: through a forwarder listening there.
 */
export function sharedEtcd(start: () => Promise<EtcdInstance>): { readonly etcd: () => EtcdInstance; make(prefix: string, id: string, viaPort?: number): Instance } {
  let etcd: EtcdInstance | null = null;
  const open: Instance[] = [];
  before(async () => {
    etcd = await start();
  });
  after(async () => {
    await Promise.all(open.map((i) => i.close()));
    await etcd?.stop();
  });
  return {
    etcd: () => etcd!,
    make(prefix, id, viaPort) {
      const i = instance(viaPort === undefined ? etcd!.endpoint : `http://127.0.0.1:${viaPort}`, prefix, id);
      open.push(i);
      return i;
    },
  };
}
