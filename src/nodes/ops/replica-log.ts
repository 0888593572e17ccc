/** Read from a node: a replica's log tail, and a byte range of any file (a GGUF header where the file is). */
import { LlmgwError } from '../../errors/catalogue.js';
import { shq } from '../shell.js';
import { int, PRELUDE } from './prelude.js';

/** The last `lines` lines of a replica's log, as they are (stdout is the log). */
export function logTailScript(dataDir: string, id: string, lines: number): string {
  return `${PRELUDE}
r=${shq(`${dataDir}/replicas/${id}`)}
[ -f "$r/log" ] || llmgw_fail REPLICA_NOT_FOUND ${shq(`no replica ${id} on this node`)}
tail -n ${int(lines)} "$r/log"
`;
}

/**
 * Bytes [offset, offset+length) of a file on the node, base64 on one line after a `size=<bytes>` line
 * (for reading a GGUF header where the file is: file:// model sources on remote nodes).
 */
export function readRangeScript(path: string, offset: number, length: number): string {
  return `${PRELUDE}
f=${shq(path)}
[ -f "$f" ] || llmgw_fail MODEL_FILE_NOT_FOUND ${shq(`no such file on the node: ${path}`)}
[ -r "$f" ] || llmgw_fail MODEL_FILE_NOT_FOUND ${shq(`the file is not readable on the node: ${path}`)}
llmgw_need base64
printf 'size=%s\\n' "$(wc -c < "$f" | tr -d ' ')"
tail -c +${int(offset) + 1} "$f" | head -c ${int(length)} | base64 | tr -d '\\n'
echo
`;
}

/** What readRangeScript printed: the file's size and the bytes read. NODE_COMMAND_FAILED when it is not that. */
export function parseRange(stdout: string, node: string, path: string): { data: Buffer; size: number } {
  const m = /^size=(\d+)\n([A-Za-z0-9+/=]*)\n?$/.exec(stdout);
  if (!m) throw new LlmgwError('NODE_COMMAND_FAILED', `node ${node}: unexpected output reading ${path}`, { node, path });
  return { size: Number(m[1]), data: Buffer.from(m[2]!, 'base64') };
}
