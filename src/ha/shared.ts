/**
 * Values every instance of one HA controller must share, created once in etcd by whichever instance
 * comes first (a transaction that puts only when the key does not exist yet) and read by the others:
 * the engine API key replicas are started with (a standby must reach them, a new leader must not see
 * them as foreign and replace them), the cluster's id (the owner recorded on the nodes) and the key
 * its leaders sign status-branch fence summaries with (git/status-fence.ts: whoever can push the
 * branch but not read etcd cannot make one).
 */
import { randomBytes } from 'node:crypto';
import type { Etcd3 } from 'etcd3';
import { LlmgwError } from '../errors/catalogue.js';
import { tooShort } from '../util/secret-length.js';
import { etcdError } from './etcd.js';

/** The key's value: created as `initial()` when absent. Never logs the value (it may be a secret). */
export async function sharedValue(client: Etcd3, key: string, initial: () => string): Promise<string> {
  try {
    await client.if(key, 'Version', '==', 0).then(client.put(key).value(initial())).commit();
    const v = await client.get(key).string();
    if (!v) throw new LlmgwError('ETCD_UNAVAILABLE', `etcd key ${key} is empty after it was created`);
    return v;
  } catch (e) {
    if (e instanceof LlmgwError) throw e;
    throw etcdError(e, `reading ${key}`);
  }
}

export interface SharedValues {
  readonly engineApiKey: string;
  /** Identifies this HA cluster on the nodes (with the prefix): `etcd:<id><prefix>`. */
  readonly clusterId: string;
  /** 32 random bytes: the HMAC key of the status branch's Llmgw-Fence summaries. */
  readonly statusFenceKey: Buffer;
}

/** The fleet's engine key: the one a lone controller had (its state dir), when it is the first to move onto etcd. */
export async function sharedValues(client: Etcd3, prefix: string, localEngineKey: string): Promise<SharedValues> {
  const [engineApiKey, clusterId, fenceKey] = await Promise.all([
    sharedValue(client, `${prefix}/engine-api-key`, () => localEngineKey),
    sharedValue(client, `${prefix}/cluster-id`, () => randomBytes(6).toString('hex')),
    sharedValue(client, `${prefix}/status-fence-key`, () => randomBytes(32).toString('hex')),
  ]);
  // etcd may hold a key someone else wrote (a restore, a hand edit): as weak a key as any other source is refused
  const short = tooShort(engineApiKey, 'engine API key', `etcd key ${prefix}/engine-api-key`);
  if (short !== null) throw new LlmgwError('SECRET_TOO_SHORT', short, { key: `${prefix}/engine-api-key` });
  // a key someone else wrote that is not 32 bytes of hex (a hand edit) is refused like a short engine key
  if (!/^[0-9a-f]{64}$/.test(fenceKey)) throw new LlmgwError('SECRET_TOO_SHORT', `etcd key ${prefix}/status-fence-key is not 32 bytes of hex; delete it and llmgw makes a new one`, { key: `${prefix}/status-fence-key` });
  return { engineApiKey, clusterId, statusFenceKey: Buffer.from(fenceKey, 'hex') };
}

/** The owner an HA cluster records on its nodes (all its instances act as this one owner, told apart by epoch). */
export function clusterOwner(clusterId: string, prefix: string): string {
  return `etcd:${clusterId}${prefix}`;
}
