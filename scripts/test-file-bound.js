// Loaded into each test file's process by scripts/run-tests.js (`node --import`, which node's test
// runner passes on to the file processes it spawns), for a file that would otherwise hang the run:
// - it ends the file's process once it has run for LLMGW_TEST_FILE_BOUND_MS, whatever its tests' own
//   timeouts say, saying on stderr which file, after how long and what was still open; process.exit
//   runs the 'exit' hooks (the harness kills the llama-servers it started), and the runner counts
//   the file as failed. The timer is unref'd: it never keeps a process alive itself;
// - a file whose tests all ended but whose process stays alive is ended by node (--test-force-exit);
//   when a child process is still running then (a server the file never stopped), it names it on stderr.
import { isMainThread } from 'node:worker_threads';
import { readdirSync, readFileSync } from 'node:fs';
import { relative } from 'node:path';

const ms = Number(process.env.LLMGW_TEST_FILE_BOUND_MS);
// NODE_TEST_CONTEXT is set in the runner's file processes only (not in the runner itself); workers
// inherit --import, and process.exit there would end only the worker
if (process.env.NODE_TEST_CONTEXT && isMainThread && Number.isFinite(ms) && ms > 0) {
  const file = relative(process.cwd(), process.argv[1] ?? '?');
  let bound = false;
  setTimeout(() => {
    bound = true;
    const open = [...new Set(process.getActiveResourcesInfo())].join(', ');
    process.stderr.write(`\nrun-tests: ${file} still running after ${Math.round(ms / 1000)} s (the bound of one test file): ended. Still open: ${open || 'nothing'}.\n`);
    process.exit(1);
  }, ms).unref();
  // first among the 'exit' listeners (loaded before the file): the harness's own hooks have not run yet
  process.on('exit', () => {
    const children = liveChildren();
    if (!bound && children.length > 0) process.stderr.write(`\nrun-tests: ${file} ended its tests with child processes still running: ${children.join(', ')} (the harness's exit hooks kill the servers they started).\n`);
  });
}

/**
 * This process's children still running, as "pid (name)", from /proc (Linux; elsewhere none): a
 * child whose exit node has seen is gone from there, where a handle of it may still be closing.
 */
function liveChildren() {
  let pids;
  try {
    pids = readdirSync('/proc').filter((d) => /^[0-9]+$/.test(d));
  } catch {
    return [];
  }
  const out = [];
  for (const pid of pids) {
    let stat;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    } catch {
      continue; // gone meanwhile
    }
    // "pid (name) state ppid …", the name may hold spaces and parentheses
    const close = stat.lastIndexOf(')');
    const [state, ppid] = stat.slice(close + 2).split(' ');
    if (Number(ppid) === process.pid && state !== 'Z') out.push(`${pid} (${stat.slice(stat.indexOf('(') + 1, close)})`);
  }
  return out;
}
