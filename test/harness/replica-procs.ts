/** The llama-server processes running under a node's data dir, by the replica each belongs to. */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** Replica ids of the llama-server processes whose working dir is a replica dir under `dataDir` (sorted). */
export function replicaProcesses(dataDir: string): string[] {
  const dir = `${dataDir}/replicas/`;
  const ids: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cwd: string;
    try {
      cwd = readlinkSync(`/proc/${pid}/cwd`);
    } catch {
      continue;
    }
    if (!cwd.startsWith(dir)) continue;
    let comm = '';
    try {
      comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      continue;
    }
    if (comm.startsWith('llama-server')) ids.push(cwd.slice(dir.length));
  }
  return ids.sort();
}
