/**
 * What `llmgw serve` loads before it reads its config: not etcd3 (only with --etcd, via
 * src/serve/serve-ha.ts), not ssh2 (at an ssh node's first connect), not pino-pretty (pretty logs
 * only) — ~17 MB of RSS a lone controller with local nodes does not need. Checked in a fresh node
 * process: the CommonJS modules its import of the serve command loaded.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, it } from 'node:test';
import { repoRoot } from '../harness/paths.js';

/** The packages (under node_modules) that importing `module` loads, in a fresh process. */
function packagesLoadedBy(module: string): Set<string> {
  const script = `
    import { createRequire } from 'node:module';
    await import(${JSON.stringify(pathToFileURL(module).href)});
    const names = Object.keys(createRequire(import.meta.url).cache)
      .map((p) => /node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(p)?.[1])
      .filter(Boolean);
    console.log(JSON.stringify([...new Set(names)]));
  `;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return new Set(JSON.parse(r.stdout) as string[]);
}

describe('serve imports', () => {
  it('loads neither etcd3 nor ssh2 nor pino-pretty until a config needs them', () => {
    const loaded = packagesLoadedBy(join(repoRoot, 'dist', 'src', 'cli', 'serve.js'));
    // the check sees CommonJS packages loaded through ESM imports: fastify is one serve always needs
    assert.ok(loaded.has('fastify'), `fastify not seen among ${[...loaded].join(', ')}`);
    for (const name of ['etcd3', 'ssh2', 'pino-pretty']) assert.ok(!loaded.has(name), `${name} loaded`);
  });

  it('the HA wiring loads etcd3', () => {
    assert.ok(packagesLoadedBy(join(repoRoot, 'dist', 'src', 'serve', 'serve-ha.js')).has('etcd3'));
  });
});
