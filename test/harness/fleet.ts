/** Small fleet repos for tests, as path → content maps written into temp dirs or git repos. */
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export type FleetFilesMap = Record<string, string>;

export const SHA_A = 'a'.repeat(64);
export const SHA_B = 'b'.repeat(64);

/** A valid fleet: two local-ish ssh nodes, one engine with two versions, two profiles, three models, keys. */
export function minimalFleet(): FleetFilesMap {
  return {
    'fleet.yaml': 'park_after_failures: 5\nplacement_reserve: 1GiB\n',
    'nodes/cpu-01.yaml': [
      'host: 10.0.0.1',
      'host_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvVj2GfUu1xJ1u3u9QmTq2l1nq8mQnJ6zq3l9nG7Y0a',
      'identity: fleet-key',
      'labels: { zone: a }',
      'capacity: { memory: 16GiB }',
      '',
    ].join('\n'),
    'nodes/cpu-02.yaml': [
      'host: 10.0.0.2',
      'host_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc2d0f9h6hJ1x6VQ0m3r1Yl0u8kq7p9mQnJ6zq3l9nG',
      'identity: fleet-key',
      'labels: { zone: b }',
      'capacity: { memory: 12GiB }',
      '',
    ].join('\n'),
    'engines/llama-cpp.yaml': [
      'versions:',
      '  b6500:',
      '    path: /opt/llama/b6500/llama-server',
      '  b6600:',
      '    artifact:',
      '      url: https://example.invalid/llama-b6600.tar.gz',
      `      sha256: ${SHA_B}`,
      '',
    ].join('\n'),
    'profiles/chat.yaml': 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 2\n',
    'profiles/embed.yaml': 'engine: llama-cpp@b6500\nctx_size: 2048\nembeddings: true\n',
    'models/alpha.yaml': [
      '# the always-on chat model',
      'source: hf://org/alpha-GGUF/alpha-q4.gguf',
      `sha256: ${SHA_A}`,
      'profile: chat',
      'replicas: 1',
      'aliases: [gpt-alpha]',
      'memory: 4GiB',
      '',
    ].join('\n'),
    'models/beta.yaml': [
      'source: https://models.example.invalid/beta.gguf',
      `sha256: ${SHA_B}`,
      'profile: chat',
      'on_demand: { idle_timeout: 10m }',
      'memory: 6GiB',
      '',
    ].join('\n'),
    'models/gamma.yaml': ['source: file:///srv/models/gamma.gguf', `sha256: ${SHA_A}`, 'profile: embed', 'replicas: 1', 'memory: 1GiB', ''].join('\n'),
    'access/keys.yaml': ['keys:', '  - name: team', `    sha256: ${SHA_A}`, '    models: [alpha, gpt-alpha]', ''].join('\n'),
  };
}

export function writeFleet(dir: string, files: FleetFilesMap): void {
  for (const [path, content] of Object.entries(files)) {
    const full = join(dir, path);
    mkdirSync(dirname(full), { recursive: true });
    writeFileSync(full, content);
  }
}

/** A temp dir holding the fleet; remove it with the returned cleanup. */
export function tempFleet(files: FleetFilesMap): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-fleet-'));
  writeFleet(dir, files);
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}
