import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { decodeUtf8 } from '../../src/fleet-spec/yaml.js';

describe('trust: the smaller doors', () => {
  it('the UTF-8 check is not quadratic: a bad byte near the end of a 256 KiB file is found at once', () => {
    const size = 256 * 1024;
    const bytes = new Uint8Array(size).fill(0x61);
    for (let i = 100; i < size; i += 100) bytes[i] = 0x0a;
    bytes[size - 10] = 0xff;
    const t0 = performance.now();
    const r = decodeUtf8('models/a.yaml', bytes);
    const ms = performance.now() - t0;
    assert.ok('problem' in r);
    assert.equal(r.problem.code, 'SPEC_NOT_UTF8');
    assert.match(r.problem.message, new RegExp(`offset ${size - 10}\\b`));
    assert.equal(r.problem.line, Math.floor((size - 10) / 100) + 1);
    assert.ok(ms < 500, `took ${ms.toFixed(0)} ms`);
  });

  it('the UTF-8 check reports the same offset as a byte-by-byte scan (random small inputs)', () => {
    const scan = (b: Uint8Array): number => {
      let offset = 0;
      for (let i = 1; i <= b.length; i++) {
        try {
          new TextDecoder('utf-8', { fatal: true }).decode(b.subarray(0, i), { stream: true });
          offset = i;
        } catch {
          break;
        }
      }
      return offset;
    };
    const pool = [0x61, 0x0a, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80, 0xff, 0x28];
    let seed = 7;
    const rnd = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % pool.length;
    for (let n = 0; n < 300; n++) {
      const b = new Uint8Array(1 + (n % 40)).map(() => pool[rnd()]!);
      const r = decodeUtf8('models/a.yaml', b);
      if ('text' in r) continue;
      assert.match(r.problem.message, new RegExp(`offset ${scan(b)}\\)`), `bytes ${[...b].join(',')}`);
    }
  });
});
