import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import { minimalFleet, tempFleet, SHA_B, type FleetFilesMap } from '../harness/fleet.js';

async function digests(files: FleetFilesMap): Promise<Record<string, string>> {
  const f = tempFleet(files);
  try {
    const r = await loadFleetSpec(dirFiles(f.dir), null);
    assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
    return Object.fromEntries(Object.values(r.spec.models).map((m) => [m.name, m.digest]));
  } finally {
    f.cleanup();
  }
}

const base = await digests(minimalFleet());

function edited(edit: (f: FleetFilesMap) => void): Promise<Record<string, string>> {
  const files = minimalFleet();
  edit(files);
  return digests(files);
}

describe('definition digest', () => {
  const keeps: [string, (f: FleetFilesMap) => void][] = [
    ['whitespace and comments', (f) => (f['models/alpha.yaml'] = '\n# a new comment\n' + f['models/alpha.yaml']!.replace('profile: chat', 'profile:    chat   # tuned')),],
    ['key order', (f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.split('\n').filter((l) => !l.startsWith('#')).reverse().join('\n') + '\n')],
    ['flow vs block style', (f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('aliases: [gpt-alpha]', 'aliases:\n  - gpt-alpha'))],
    ['uppercase sha256', (f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace(/sha256: (\w+)/, (_, s: string) => `sha256: ${s.toUpperCase()}`))],
    ['source spelling (hf @main, https default port)', (f) => {
      f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('alpha-q4.gguf', 'alpha-q4.gguf@main');
      f['models/beta.yaml'] = f['models/beta.yaml']!.replace('https://models.example.invalid/', 'https://MODELS.example.invalid:443/');
    }],
    ['scheduling fields: replicas, aliases, memory, selector', (f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 3').replace('[gpt-alpha]', '[gpt-alpha, gpt-a]').replace('memory: 4GiB', 'memory: 5GiB') + 'node_selector: { zone: a }\n')],
    ['editing another model', (f) => (f['models/beta.yaml'] = f['models/beta.yaml']!.replace(/sha256: \w+/, `sha256: ${'c'.repeat(64)}`))],
    ['renaming its profile without changing it', (f) => {
      f['profiles/chat-v2.yaml'] = f['profiles/chat.yaml']!;
      f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('profile: chat', 'profile: chat-v2');
    }],
    ['the profile’s memory overhead and start timeout', (f) => (f['profiles/chat.yaml'] += 'memory_overhead: 2GiB\nstart_timeout: 10m\n')],
    ['routing and queue', (f) => (f['models/alpha.yaml'] += 'routing: least_busy\nqueue: { max: 3, timeout: 1s }\n')],
  ];
  for (const [name, edit] of keeps) {
    it(`keeps the digest across: ${name}`, async () => {
      const after = await edited(edit);
      assert.equal(after.alpha, base.alpha);
    });
  }
  it('editing another model changes only that model’s digest', async () => {
    const after = await edited((f) => (f['models/beta.yaml'] = f['models/beta.yaml']!.replace(/sha256: \w+/, `sha256: ${'c'.repeat(64)}`)));
    assert.equal(after.alpha, base.alpha);
    assert.equal(after.gamma, base.gamma);
    assert.notEqual(after.beta, base.beta);
  });

  const changes: [string, (f: FleetFilesMap) => void][] = [
    ['its source', (f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('alpha-q4.gguf', 'alpha-q5.gguf'))],
    ['its sha256', (f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace(/sha256: \w+/, `sha256: ${SHA_B}`))],
    ['its profile (to one with other settings)', (f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('profile: chat', 'profile: embed'))],
    ['its profile’s settings', (f) => (f['profiles/chat.yaml'] = f['profiles/chat.yaml']!.replace('ctx_size: 4096', 'ctx_size: 8192'))],
    ['its profile’s prompt cache size (cache_ram: an llama-server argument)', (f) => (f['profiles/chat.yaml'] += 'cache_ram: 2GiB\n')],
    ['its profile’s engine version', (f) => (f['profiles/chat.yaml'] = f['profiles/chat.yaml']!.replace('llama-cpp@b6500', 'llama-cpp@b6600'))],
    ['the install spec of its engine version', (f) => (f['engines/llama-cpp.yaml'] = f['engines/llama-cpp.yaml']!.replace('/opt/llama/b6500/llama-server', '/opt/llama/b6500-fixed/llama-server'))],
  ];
  for (const [name, edit] of changes) {
    it(`changes the digest when changing ${name}`, async () => {
      const after = await edited(edit);
      assert.notEqual(after.alpha, base.alpha);
    });
  }
});
