import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { formatBytes, formatDuration, parseDuration, parseSize } from '../../src/fleet-spec/units.js';
import { normalizeSource } from '../../src/fleet-spec/source.js';

describe('units', () => {
  it('parses sizes', () => {
    const table: [string | number, number | null][] = [
      ['512MiB', 512 * 2 ** 20], ['14GiB', 14 * 2 ** 30], ['1.5GB', 1.5e9], ['1024', 1024], [2048, 2048], ['8 GiB', 8 * 2 ** 30],
      ['14 parsecs', null], ['-1GiB', null], ['GiB', null], [1.5, null],
    ];
    for (const [input, want] of table) assert.equal(parseSize(input), want, String(input));
  });
  it('parses durations', () => {
    const table: [string | number, number | null][] = [
      ['30s', 30_000], ['5m', 300_000], ['1h30m', 5_400_000], ['250ms', 250], ['1.5s', 1500], [10, 10_000], ['2d', 172_800_000],
      ['soon', null], ['5', null], ['m5', null],
    ];
    for (const [input, want] of table) assert.equal(parseDuration(input), want, String(input));
  });
  it('formats for messages', () => {
    assert.equal(formatBytes(14.2 * 2 ** 30), '14.2 GiB');
    assert.equal(formatBytes(512 * 2 ** 20), '512 MiB');
    assert.equal(formatBytes(900), '900 B');
    assert.equal(formatDuration(300_000), '5m');
    assert.equal(formatDuration(5_400_000), '1h30m');
  });
  it('normalizes sources', () => {
    assert.equal(normalizeSource('hf://org/repo/f.gguf@main'), 'hf://org/repo/f.gguf');
    assert.equal(normalizeSource('https://Example.COM:443/a/b.gguf'), 'https://example.com/a/b.gguf');
    assert.equal(normalizeSource('file:///srv//models/./x.gguf'), 'file:///srv/models/x.gguf');
  });
});
