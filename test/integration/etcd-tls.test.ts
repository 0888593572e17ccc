/**
 * etcd serving TLS with client certificates required (a real etcd, certificates made by openssl):
 * llmgw connects with the CA and its client certificate and key files and leads; without a client
 * certificate, or trusting another CA, the reason is ETCD_TLS_FAILED.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Election } from '../../src/ha/election.js';
import type { EtcdSettings } from '../../src/ha/etcd.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { until } from '../harness/wait.js';
import { elected, instanceWith, settings } from '../harness/elections.js';

const PREFIX = '/llmgw-tls/fleet';

function openssl(...args: string[]): void {
  execFileSync('openssl', args, { stdio: 'ignore' });
}

/** A CA at dir/NAME.{pem,key}. */
function ca(dir: string, name: string): void {
  openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', `/CN=${name}`, '-keyout', join(dir, `${name}.key`), '-out', join(dir, `${name}.pem`));
}

/** A certificate at dir/NAME.{pem,key} signed by the CA `by`. */
function leaf(dir: string, name: string, by: string, ext: string): void {
  const csr = join(dir, `${name}.csr`);
  openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', `/CN=${name}`, '-keyout', join(dir, `${name}.key`), '-out', csr);
  const extFile = join(dir, `${name}.ext`);
  execFileSync('sh', ['-c', `printf '%s\\n' "$1" > "$2"`, 'sh', ext, extFile]);
  openssl('x509', '-req', '-in', csr, '-CA', join(dir, `${by}.pem`), '-CAkey', join(dir, `${by}.key`), '-CAcreateserial', '-days', '1', '-extfile', extFile, '-out', join(dir, `${name}.pem`));
}

describe('etcd over TLS with client certificates', { timeout: 60_000 }, () => {
  let etcd: EtcdInstance;
  let dir: string;
  const closers: (() => Promise<void>)[] = [];
  const f = (name: string): string => join(dir, name);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'llmgw-etcd-tls-'));
    ca(dir, 'ca');
    ca(dir, 'other-ca');
    leaf(dir, 'server', 'ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth');
    leaf(dir, 'client', 'ca', 'extendedKeyUsage=clientAuth');
    etcd = await startEtcd({ tls: { cert: f('server.pem'), key: f('server.key'), clientCa: f('ca.pem'), probe: { ca: f('ca.pem'), cert: f('client.pem'), key: f('client.key') } } });
  });
  after(async () => {
    await Promise.all(closers.map((c) => c()));
    await etcd?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const start = (id: string, tls: EtcdSettings['tls']): Election => {
    assert.match(etcd.endpoint, /^https:/);
    const i = instanceWith({ ...settings(etcd.endpoint, PREFIX), tls }, id);
    closers.push(() => i.close());
    i.election.start();
    return i.election;
  };

  it('the CA, client certificate and key files: leads and writes', async () => {
    const e = start('good', { ca: f('ca.pem'), cert: f('client.pem'), key: f('client.key') });
    await elected(e);
    await e.guardedPut(`${PREFIX}/probe`, 'over tls');
    assert.equal(e.lastError, null);
  });

  for (const [what, tls] of [
    ['no client certificate', () => ({ ca: f('ca.pem'), cert: null, key: null })],
    ['another CA trusted', () => ({ ca: f('other-ca.pem'), cert: f('client.pem'), key: f('client.key') })],
  ] as const) {
    it(`${what}: ETCD_TLS_FAILED, not reachable, never leads`, async () => {
      const e = start(`bad-${what.replaceAll(' ', '-')}`, tls());
      await until('a failed etcd call', 10_000, () => e.lastError !== null);
      assert.equal(e.lastError?.code, 'ETCD_TLS_FAILED', e.lastError?.message);
      assert.equal(e.reachable, false);
      assert.equal(e.isLeader(), false);
    });
  }
});
