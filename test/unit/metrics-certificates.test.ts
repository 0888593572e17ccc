import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createMetrics, type LlmgwMetrics } from '../../src/metrics/registry.js';
import { certificateExpirySeconds } from '../../src/metrics/certificates.js';
import { parseExposition, sampleValue } from '../../src/metrics/parse.js';

const DAY = 86_400;

/** A self-signed EC certificate valid for `days`, as PEM (made by the real openssl CLI). */
function makeCert(dir: string, name: string, days: number): string {
  const cert = join(dir, `${name}.pem`);
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', String(days), '-subj', `/CN=${name}`,
      '-keyout', join(dir, `${name}.key`), '-out', cert],
    { stdio: 'pipe' },
  );
  return readFileSync(cert, 'utf8');
}

async function scrape(m: LlmgwMetrics) {
  return parseExposition(await m.registry.metrics());
}

describe('metrics: certificates, read at each scrape', () => {
  let dir: string;
  let pem10: string;
  let pem100: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'llmgw-certs-'));
    pem10 = makeCert(dir, 'ten', 10);
    pem100 = makeCert(dir, 'hundred', 100);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('shows a renewed file on the next scrape, without recreating anything', async () => {
    const path = join(dir, 'router.crt');
    writeFileSync(path, pem10);
    const m = createMetrics({ defaultMetrics: false, certificates: () => [path] });
    const now = Date.now() / 1000;

    let s = await scrape(m);
    const first = sampleValue(s, 'llmgw_certificate_expiry_timestamp_seconds', { path });
    assert.ok(first !== undefined);
    assert.ok(Math.abs(first - (now + 10 * DAY)) < 3600, `expiry ${first} ≈ now + 10 days`);
    assert.equal(first, Date.parse(new X509Certificate(pem10).validTo) / 1000);
    assert.equal(sampleValue(s, 'llmgw_certificate_read_errors', { path }), 0);

    // Renewed the way cert tools do it: a new file renamed over the old one.
    writeFileSync(`${path}.new`, pem100);
    renameSync(`${path}.new`, path);
    s = await scrape(m);
    const renewed = sampleValue(s, 'llmgw_certificate_expiry_timestamp_seconds', { path });
    assert.ok(renewed !== undefined);
    assert.ok(Math.abs(renewed - (now + 100 * DAY)) < 3600, `expiry ${renewed} ≈ now + 100 days`);
    assert.equal(sampleValue(s, 'llmgw_certificate_read_errors', { path }), 0);
  });

  it('makes an unreadable file its own series: read error 1, no expiry', async () => {
    const missing = join(dir, 'missing.crt');
    const garbage = join(dir, 'garbage.crt');
    const locked = join(dir, 'locked.crt');
    const good = join(dir, 'good.crt');
    writeFileSync(garbage, '-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n');
    writeFileSync(good, pem100);
    writeFileSync(locked, pem100);
    chmodSync(locked, 0o000);
    const m = createMetrics({ defaultMetrics: false, certificates: () => [missing, garbage, good, locked] });

    const s = await scrape(m);
    for (const path of [missing, garbage]) {
      assert.equal(sampleValue(s, 'llmgw_certificate_read_errors', { path }), 1, path);
      assert.equal(sampleValue(s, 'llmgw_certificate_expiry_timestamp_seconds', { path }), undefined, path);
    }
    // root reads a mode-000 file; anyone else cannot.
    const lockedReadable = process.getuid?.() === 0;
    assert.equal(sampleValue(s, 'llmgw_certificate_read_errors', { path: locked }), lockedReadable ? 0 : 1);
    assert.equal(sampleValue(s, 'llmgw_certificate_read_errors', { path: good }), 0);
    assert.ok(sampleValue(s, 'llmgw_certificate_expiry_timestamp_seconds', { path: good }));
  });

  it('recovers when a broken file is fixed, and follows the configured list', async () => {
    const path = join(dir, 'admin.crt');
    writeFileSync(path, 'not a certificate');
    let paths = [path];
    const m = createMetrics({ defaultMetrics: false, certificates: () => paths });
    assert.equal(sampleValue(await scrape(m), 'llmgw_certificate_read_errors', { path }), 1);

    writeFileSync(path, pem10);
    let s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_certificate_read_errors', { path }), 0);
    assert.ok(sampleValue(s, 'llmgw_certificate_expiry_timestamp_seconds', { path }));

    paths = [];
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_certificate_read_errors', { path }), undefined);
    assert.equal(sampleValue(s, 'llmgw_certificate_expiry_timestamp_seconds', { path }), undefined);
  });

  it('takes the earliest expiry in a chain, and reads DER', () => {
    const chain = Buffer.from(`${pem100}\n${pem10}`);
    assert.equal(certificateExpirySeconds(chain), Date.parse(new X509Certificate(pem10).validTo) / 1000);
    const der = new X509Certificate(pem100).raw;
    assert.equal(certificateExpirySeconds(der), Date.parse(new X509Certificate(pem100).validTo) / 1000);
    assert.throws(() => certificateExpirySeconds(Buffer.from('nope')));
  });
});
