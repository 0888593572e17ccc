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

/** A rollout block (#34): how a revision rolls out, never part of what runs. */
const ROLLOUT = 'rollout:\n  checks:\n    - name: four\n      request: { messages: [{ role: user, content: "2+2?" }] }\n      expect: { matches: "4" }\n  canary: { steps: [10%, 50%], interval: 2m }\n';

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
    ['a rollout block added to the model', (f) => (f['models/alpha.yaml'] += ROLLOUT)],
    ['a rollout default added to fleet.yaml', (f) => (f['fleet.yaml'] += ROLLOUT)],
    ['a shared check used by the model', (f) => {
      f['checks/four.yaml'] = 'request: { messages: [{ role: user, content: "2+2?" }] }\nexpect: { contains: "4" }\n';
      f['models/alpha.yaml'] += 'rollout: { checks: [{ use: four }], canary: { on_inconclusive: rollback } }\n';
    }],
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
  it('changing the rollout block alone keeps the digest; a definition change beside a rollout block changes it as before', async () => {
    const withRollout = await edited((f) => (f['models/alpha.yaml'] += ROLLOUT));
    const otherRollout = await edited((f) => (f['models/alpha.yaml'] += ROLLOUT.replace('[10%, 50%]', '[5%, 25%, 100%]').replace('matches: "4"', 'contains: "four"')));
    assert.equal(withRollout.alpha, base.alpha);
    assert.equal(otherRollout.alpha, base.alpha);
    const profileChanged = await edited((f) => {
      f['models/alpha.yaml'] += ROLLOUT;
      f['profiles/chat.yaml'] = f['profiles/chat.yaml']!.replace('ctx_size: 4096', 'ctx_size: 8192');
    });
    const profileChangedOnly = await edited((f) => (f['profiles/chat.yaml'] = f['profiles/chat.yaml']!.replace('ctx_size: 4096', 'ctx_size: 8192')));
    assert.notEqual(profileChanged.alpha, base.alpha);
    // the same digest as the change without a rollout block: the block takes no part in it
    assert.equal(profileChanged.alpha, profileChangedOnly.alpha);
  });

  for (const [name, edit] of changes) {
    it(`changes the digest when changing ${name}`, async () => {
      const after = await edited(edit);
      assert.notEqual(after.alpha, base.alpha);
    });
  }
});
