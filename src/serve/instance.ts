/**
 * Who this llmgw instance is: a stable id (the same after a restart with the same state dir, even a
 * lost and re-created one) and a label an operator recognizes in another controller's refusal
 * ("owned by llmgw on host-a (state dir /var/lib/llmgw)").
 */
import { createHash } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { hostname } from 'node:os';

export interface Instance {
  readonly id: string;
  readonly label: string;
}

export function instanceOf(stateDir: string): Instance {
  let dir = stateDir;
  try {
    dir = realpathSync(stateDir);
  } catch {
    // not there yet: the path as given
  }
  const host = hostname();
  const id = `${host.replace(/[^A-Za-z0-9.-]/g, '-').slice(0, 40)}-${createHash('sha256').update(`${host}\0${dir}`).digest('hex').slice(0, 8)}`;
  return { id, label: `llmgw on ${host} (state dir ${dir})` };
}
