#!/usr/bin/env node
// Runs the compiled test suite (dist/test/**/*.test.js) with node's test runner.
// Usage: node scripts/run-tests.js [--concurrency=N] [substring …]   (only test files whose path contains one)
//   --concurrency=N  test files run at once (node's default: available cores − 1, so one at a time on 2 cores);
//                    the unit tier (`npm run test:unit`) runs 2, its files start no servers.
import { existsSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = join(fileURLToPath(import.meta.url), '..', '..');
const testRoot = join(root, 'dist', 'test');
const args = process.argv.slice(2);
const concurrency = args.filter((a) => a.startsWith('--concurrency=')).map((a) => a.slice('--concurrency='.length));
const filters = args.filter((a) => !a.startsWith('--concurrency='));
if (concurrency.some((c) => !/^[1-9][0-9]*$/.test(c))) {
  console.error(`run-tests: --concurrency takes a positive whole number, not ${concurrency.join(', ')}`);
  process.exit(2);
}

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
const runnerFlags = ['--test', '--test-reporter=spec', ...concurrency.slice(-1).map((c) => `--test-concurrency=${c}`)];
const res = spawnSync(process.execPath, [...runnerFlags, ...files], {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, LLMGW_REPO_ROOT: root, LLMGW_FAULT_REPORT: faultReport },
});
if (existsSync(faultReport)) {
  const lines = readFileSync(faultReport, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  lines.sort((a, b) => String(a.fault).localeCompare(String(b.fault), 'en', { numeric: true }));
  console.log(`\nfaults injected (${lines.length}):`);
  for (const l of lines) console.log(`  fault ${l.fault}: injected ${l.injected}; held: ${l.held}`);
  rmSync(faultReport, { force: true });
}
process.exit(res.status ?? 1);
