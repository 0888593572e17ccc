/** The address a node's replicas bind (RPC workers bind theirs by rpc-workers.ts's rpcBindHost, stricter). */
import { isIP } from 'node:net';
import type { NodeSpec } from '../fleet-spec/types.js';

/**
 * The address a node's replicas bind: its listen_address; else 127.0.0.1 for the local transport;
 * for ssh, its host when that is an IP address, else 0.0.0.0 (every interface: a DNS name may
 * resolve on the node to a loopback address, as Debian's /etc/hosts maps the machine's own name).
 */
export function replicaBindHost(spec: Pick<NodeSpec, 'transport' | 'host' | 'listenAddress'>): string {
  return spec.listenAddress ?? (spec.transport === 'local' ? '127.0.0.1' : isIP(spec.host) !== 0 ? spec.host : '0.0.0.0');
}
