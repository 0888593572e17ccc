#!/usr/bin/env node
// Runs the compiled test suite (dist/test/**/*.test.js) with node's test runner.
// Usage: node scripts/run-tests.js [--concurrency=N] [--file-bound=S] [substring …]   (only test files whose path contains one)
//   --concurrency=N  test files run at once (node's default: available cores − 1, so one at a time on 2 cores);
//                    the unit tier (`npm run test:unit`) runs 2, its files start no servers.
//   --file-bound=S   seconds one test file may run (default 3600, LLMGW_TEST_FILE_BOUND_S overrides it).
//
// No test file can hang the run. Node's runner runs each file in a process of its own, and
// `--test-timeout` does not bound those: on Node 24 and 26 it bounds each test, not the file, so a
// file whose tests all passed but whose process a child kept alive (a llama-server never stopped)
// hung a whole CI run, and so does a test with its own longer timeout (the integration suites give
// theirs 50 min for a first build of llama-server); only Node 20 applies it to the file's process
// (seen on 20.20, 24.22 and 26.12 with a deliberately hanging file). So, on every Node:
// - `--test-force-exit`: a file's process ends once its tests have (a child process left running is
//   reported on stderr; the harness's exit hooks kill the llama-servers they started);
// - scripts/test-file-bound.js, loaded into each file's process (`--import`, which the runner passes
//   on): past the file bound the process ends, saying which file and what was still open, and the
//   file counts as failed. Passing runs print and exit as before.
import { existsSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(fileURLToPath(import.meta.url), '..', '..');
const testRoot = join(root, 'dist', 'test');
const args = process.argv.slice(2);
const valuesOf = (flag) => args.filter((a) => a.startsWith(`${flag}=`)).map((a) => a.slice(flag.length + 1));
const concurrency = valuesOf('--concurrency');
const fileBound = valuesOf('--file-bound');
const filters = args.filter((a) => !a.startsWith('--concurrency=') && !a.startsWith('--file-bound='));
for (const [flag, values] of [['--concurrency', concurrency], ['--file-bound', fileBound]]) {
  if (values.some((c) => !/^[1-9][0-9]*$/.test(c))) {
    console.error(`run-tests: ${flag} takes a positive whole number, not ${values.join(', ')}`);
    process.exit(2);
  }
}
const envBound = process.env.LLMGW_TEST_FILE_BOUND_S;
if (envBound !== undefined && !/^[1-9][0-9]*$/.test(envBound)) {
  console.error(`run-tests: LLMGW_TEST_FILE_BOUND_S takes a positive whole number of seconds, not ${envBound}`);
  process.exit(2);
}
const boundSeconds = Number(fileBound.at(-1) ?? envBound ?? 3600);

function walk(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...walk(p));
    else if (name.endsWith('.test.js')) out.push(p);
  }
  return out;
}

// A compiled test whose source was renamed or deleted stays in dist/ (tsc never removes output): skip it.
const hasSource = (f) => existsSync(join(root, f.replace(/^dist[\\/]/, '').replace(/\.js$/, '.ts')));
const files = walk(testRoot)
  .map((f) => relative(root, f))
  .filter(hasSource)
  .filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)))
  .sort();
if (files.length === 0) {
  console.error('run-tests: no test files matched');
  process.exit(1);
}
// Fault tests (test/faults/) append what they injected and what held here; printed at the end.
const faultReport = join(tmpdir(), `llmgw-faults-${process.pid}-${Date.now()}.jsonl`);
const fileBoundScript = pathToFileURL(join(root, 'scripts', 'test-file-bound.js')).href;
const runnerFlags = [`--import=${fileBoundScript}`, '--test', '--test-force-exit', '--test-reporter=spec', ...concurrency.slice(-1).map((c) => `--test-concurrency=${c}`)];
const res = spawnSync(process.execPath, [...runnerFlags, ...files], {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, LLMGW_REPO_ROOT: root, LLMGW_FAULT_REPORT: faultReport, LLMGW_TEST_FILE_BOUND_MS: String(boundSeconds * 1000) },
});
if (existsSync(faultReport)) {
  const lines = readFileSync(faultReport, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  lines.sort((a, b) => String(a.fault).localeCompare(String(b.fault), 'en', { numeric: true }));
  console.log(`\nfaults injected (${lines.length}):`);
  for (const l of lines) console.log(`  fault ${l.fault}: injected ${l.injected}; held: ${l.held}`);
  rmSync(faultReport, { force: true });
}
process.exit(res.status ?? 1);
