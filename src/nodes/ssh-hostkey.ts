/**
 * The ssh transport's host-key pinning: a node's key is written in nodes/<node>.yaml (known_hosts
 * style) and the connection accepts that key only (never one on first use).
 */
import { createHash } from 'node:crypto';
import type { ServerHostKeyAlgorithm } from 'ssh2';

export interface PinnedKey {
  readonly type: string;
  readonly blob: Buffer;
}

/** Parse "<type> <base64> [comment]" (known_hosts style, without the host). Null when malformed. */
export function parseHostKey(text: string): PinnedKey | null {
  const m = /^\s*(\S+)\s+([A-Za-z0-9+/]+={0,2})(?:\s.*)?$/.exec(text);
  if (!m) return null;
  const type = m[1]!;
  const blob = Buffer.from(m[2]!, 'base64');
  // The blob starts with its own type name (uint32 length + string); it must agree.
  if (blob.length < 4) return null;
  const n = blob.readUInt32BE(0);
  if (blob.length < 4 + n || blob.subarray(4, 4 + n).toString('latin1') !== type) return null;
  return { type, blob };
}

/** OpenSSH-style fingerprint: "SHA256:" + unpadded base64 of sha256(key blob). */
export function fingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

export function keyTypeOf(blob: Buffer): string {
  if (blob.length < 4) return 'unknown';
  const n = blob.readUInt32BE(0);
  return blob.length >= 4 + n ? blob.subarray(4, 4 + n).toString('latin1') : 'unknown';
}

/** Host key algorithms to offer so the server presents the pinned key (not another of its keys). */
export function hostKeyAlgorithms(type: string): ServerHostKeyAlgorithm[] | undefined {
  switch (type) {
    case 'ssh-ed25519':
    case 'ecdsa-sha2-nistp256':
    case 'ecdsa-sha2-nistp384':
    case 'ecdsa-sha2-nistp521':
      return [type];
    case 'ssh-rsa':
      return ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'];
    default:
      return undefined;
  }
}

/** ssh2's handshake error when the server offers none of the host key algorithms asked for (the pinned key's type). */
export const NO_MATCHING_HOST_KEY = /no matching host key format/;
