/**
 * TLS: with a certificate and key configured, the admin API and the router serve HTTPS; replacing
 * the files is picked up without a restart, and /metrics shows the new expiry on the next scrape.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Agent, request } from 'undici';
import pino from 'pino';
import { parseExposition, sampleValue } from '../../src/metrics/index.js';
import { resolveConfig } from '../../src/serve/config.js';
import { serve, type Served } from '../../src/serve/serve.js';
import { cleanupTempDirs, WorkRepo } from '../harness/git.js';
import { until } from '../harness/wait.js';

let dir: string;
let served: Served;

function makeCert(name: string, days: number): void {
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', String(days),
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, `${name}.key`), '-out', join(dir, `${name}.pem`),
  ], { stdio: 'ignore' });
}

/** The certificate a fresh TLS connection is served. */
function servedCert(url: string): Promise<X509Certificate> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect({ host: u.hostname, port: Number(u.port), rejectUnauthorized: false }, () => {
      const raw = s.getPeerX509Certificate();
      s.end();
      if (raw) resolve(raw);
      else reject(new Error('no certificate'));
    });
    s.on('error', reject);
  });
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'llmgw-tls-'));
  makeCert('first', 10);
  makeCert('second', 100);
  writeFileSync(join(dir, 'tls.pem'), readFileSync(join(dir, 'first.pem')));
  writeFileSync(join(dir, 'tls.key'), readFileSync(join(dir, 'first.key')));
  writeFileSync(join(dir, 'admin-token'), 'admin-secret-for-tls-tests\n');
  const repo = await WorkRepo.init();
  await repo.write({ 'fleet.yaml': 'poll_interval: 1h\n' });
  await repo.commit('an empty fleet');
  const cfg = resolveConfig({
    flags: {
      fleet: repo.dir,
      stateDir: join(dir, 'state'),
      routerListen: '127.0.0.1:0',
      adminListen: '127.0.0.1:0',
      tlsCert: join(dir, 'tls.pem'),
      tlsKey: join(dir, 'tls.key'),
      adminTokenFile: join(dir, 'admin-token'),
    },
    env: {},
    file: {},
    cwd: dir,
  });
  served = await serve(cfg, pino({ level: 'silent' }));
});

after(async () => {
  await served?.close();
  rmSync(dir, { recursive: true, force: true });
  await cleanupTempDirs();
});

describe('TLS', () => {
  it('the admin API and the router serve HTTPS with the configured certificate', async () => {
    assert.match(served.adminUrl, /^https:\/\/127\.0\.0\.1:\d+$/);
    assert.match(served.routerUrl, /^https:\/\/127\.0\.0\.1:\d+$/);
    const ca = readFileSync(join(dir, 'first.pem'));
    const dispatcher = new Agent({ connect: { ca } });
    const admin = await request(`${served.adminUrl}/admin/v1/status`, { headers: { authorization: 'Bearer admin-secret-for-tls-tests' }, dispatcher });
    assert.equal(admin.statusCode, 200, await admin.body.text());
    const router = await request(`${served.routerUrl}/v1/models`, { dispatcher });
    await router.body.dump();
    assert.equal(router.statusCode, 401, 'router keys are required by default');
    await dispatcher.close();
  });

  it('replacing the certificate files is picked up without a restart, and /metrics shows the new expiry', async () => {
    const first = new X509Certificate(readFileSync(join(dir, 'first.pem')));
    const second = new X509Certificate(readFileSync(join(dir, 'second.pem')));
    assert.equal((await servedCert(served.adminUrl)).fingerprint256, first.fingerprint256);
    const scrape = async (): Promise<number | undefined> => {
      const r = await request(`${served.adminUrl}/metrics`, { headers: { authorization: 'Bearer admin-secret-for-tls-tests' }, dispatcher: new Agent({ connect: { rejectUnauthorized: false } }) });
      return sampleValue(parseExposition(await r.body.text()), 'llmgw_certificate_expiry_timestamp_seconds', { path: join(dir, 'tls.pem') });
    };
    assert.equal(await scrape(), Math.floor(new Date(first.validTo).getTime() / 1000));
    // renew the way certbot & co. do: write new files, rename over the old ones
    writeFileSync(join(dir, 'tls.key.new'), readFileSync(join(dir, 'second.key')));
    writeFileSync(join(dir, 'tls.pem.new'), readFileSync(join(dir, 'second.pem')));
    renameSync(join(dir, 'tls.key.new'), join(dir, 'tls.key'));
    renameSync(join(dir, 'tls.pem.new'), join(dir, 'tls.pem'));
    assert.equal(await scrape(), Math.floor(new Date(second.validTo).getTime() / 1000), 'the next scrape reads the new file');
    await until('the admin port to serve the new certificate', 10_000, async () => (await servedCert(served.adminUrl)).fingerprint256 === second.fingerprint256);
    assert.equal((await servedCert(served.routerUrl)).fingerprint256, second.fingerprint256, 'so does the router');
  });
});
