/**
 * What `llmgw serve` loads before it reads its config: not etcd3 (only with --etcd, via
 * src/serve/serve-ha.ts), not ssh2 (at an ssh node's first connect), not pino-pretty (pretty logs
 * only) — ~17 MB of RSS a lone controller with local nodes does not need — and not undici's index
 * (only the dispatchers: src/util/undici-lean.ts). Checked in a fresh node process: the CommonJS
 * modules its import of the serve command loaded.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, it } from 'node:test';
import { repoRoot } from '../harness/paths.js';

/** The CommonJS files (under node_modules, from its folder on) that importing `module` loads, in a fresh process. */
function filesLoadedBy(module: string): string[] {
  const script = `
    import { createRequire } from 'node:module';
    await import(${JSON.stringify(pathToFileURL(module).href)});
    const files = Object.keys(createRequire(import.meta.url).cache)
      .map((p) => /node_modules\\/(.*)$/.exec(p)?.[1])
      .filter(Boolean);
    console.log(JSON.stringify(files));
  `;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as string[];
}

/** The packages (under node_modules) that importing `module` loads, in a fresh process. */
function packagesLoadedBy(module: string): Set<string> {
  return new Set(filesLoadedBy(module).map((f) => /^((?:@[^/]+\/)?[^/]+)\//.exec(f)![1]!));
}

describe('serve imports', () => {
  it('loads neither etcd3 nor ssh2 nor pino-pretty until a config needs them', () => {
    const loaded = packagesLoadedBy(join(repoRoot, 'dist', 'src', 'cli', 'serve.js'));
    // the check sees CommonJS packages loaded through ESM imports: fastify is one serve always needs
    assert.ok(loaded.has('fastify'), `fastify not seen among ${[...loaded].join(', ')}`);
    for (const name of ['etcd3', 'ssh2', 'pino-pretty']) assert.ok(!loaded.has(name), `${name} loaded`);
  });

  it("loads undici's dispatchers, not its index (fetch, WebSocket, caches, mocks): src/util/undici-lean.ts", () => {
    const undici = filesLoadedBy(join(repoRoot, 'dist', 'src', 'cli', 'serve.js')).filter((f) => f.startsWith('undici/'));
    for (const file of ['undici/lib/dispatcher/pool.js', 'undici/lib/dispatcher/agent.js', 'undici/lib/api/index.js']) assert.ok(undici.includes(file), `${file} not loaded: ${undici.join(', ')}`);
    for (const file of ['undici/index.js', 'undici/lib/web/fetch/index.js', 'undici/lib/web/websocket/websocket.js', 'undici/lib/mock/mock-agent.js']) assert.ok(!undici.includes(file), `${file} loaded`);
  });

  it('the HA wiring loads etcd3', () => {
    assert.ok(packagesLoadedBy(join(repoRoot, 'dist', 'src', 'serve', 'serve-ha.js')).has('etcd3'));
  });
});
