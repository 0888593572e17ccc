/** The pure parts of the etcd layer: settings and files, error translation, timing checks, canonical JSON. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { BrokenCircuitError } from 'cockatiel';
import {
  EtcdAuthenticationFailedError,
  EtcdLeaseInvalidError,
  EtcdPermissionDeniedError,
  GRPCDeadlineExceededError,
  GRPCUnavailableError,
  GRPCInternalError,
} from 'etcd3';
import { LlmgwError } from '../../src/errors/catalogue.js';
import { canonicalJson } from '../../src/ha/canonical-json.js';
import { electionTimingProblem, parseLeader } from '../../src/ha/election.js';
import { etcdOptions, etcdReason, type EtcdSettings } from '../../src/ha/etcd.js';
import { isCode } from '../harness/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-etcd-unit-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, text: string): string => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};
const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const base: EtcdSettings = { hosts: ['http://127.0.0.1:2379'], prefix: '/llmgw/f', tls: null, auth: null, leaseTtlSeconds: 15, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

describe('etcdOptions', () => {
  it('reads the password file (without its line break); the password is not in any error', () => {
    const o = etcdOptions({ ...base, auth: { username: 'llmgw', passwordFile: file('pw', 's3cr3t pass\n') } }, Date.now);
    assert.deepEqual(o.auth, { username: 'llmgw', password: 's3cr3t pass' });
  });

  const bad: [string, Partial<EtcdSettings>, RegExp][] = [
    ['a missing password file', { auth: { username: 'u', passwordFile: join(dir, 'nope') } }, /password file .*nope: ENOENT/],
    ['an empty password file', { auth: { username: 'u', passwordFile: file('empty', '\n') } }, /password file .*empty is empty/],
    ['a two-line password file', { auth: { username: 'u', passwordFile: file('two', 'a\nb\n') } }, /more than one line/],
    ['an empty CA file', { tls: { ca: file('ca-empty', ''), cert: null, key: null } }, /CA certificate file .*ca-empty is empty/],
    ['a client key that is not PEM', { tls: { ca: null, cert: file('c.pem', PEM), key: file('k.pem', 'junk') } }, /client key file .*k\.pem is not PEM/],
    ['a certificate without its key', { tls: { ca: null, cert: file('c2.pem', PEM), key: null } }, /give both files or neither/],
    ['no endpoint', { hosts: [] }, /no etcd endpoint/],
    ['an endpoint without a scheme', { hosts: ['127.0.0.1:2379'] }, /not http:\/\/host:port/],
  ];
  for (const [what, s, re] of bad) {
    it(`refuses ${what} with ETCD_CONFIG_INVALID naming it`, () => {
      assert.throws(() => etcdOptions({ ...base, ...s }, Date.now), isCode('ETCD_CONFIG_INVALID', re));
    });
  }

  it('takes a CA and a client certificate with its key', () => {
    const o = etcdOptions({ ...base, hosts: ['https://etcd-1:2379', 'https://etcd-2:2379/'], tls: { ca: file('ca.pem', PEM), cert: file('c3.pem', PEM), key: file('k3.pem', PEM.replaceAll('CERTIFICATE', 'PRIVATE KEY')) } }, Date.now);
    assert.deepEqual(o.hosts, ['https://etcd-1:2379', 'https://etcd-2:2379']);
    assert.ok(o.credentials?.rootCertificate.toString().includes('BEGIN CERTIFICATE'));
    assert.ok(o.credentials?.privateKey?.toString().includes('BEGIN PRIVATE KEY'));
  });
});

describe('etcdReason', () => {
  const table: [string, unknown, string][] = [
    ['unavailable', new GRPCUnavailableError('14 UNAVAILABLE: No connection established'), 'ETCD_UNAVAILABLE'],
    ['deadline', new GRPCDeadlineExceededError('4 DEADLINE_EXCEEDED'), 'ETCD_UNAVAILABLE'],
    ['a TLS handshake refused', new GRPCUnavailableError('14 UNAVAILABLE: No connection established. Last error: Error: unable to verify the first certificate.'), 'ETCD_TLS_FAILED'],
    ['open circuit breaker', new BrokenCircuitError(), 'ETCD_UNAVAILABLE'],
    ['connection refused', Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), 'ETCD_UNAVAILABLE'],
    ['bad password', new EtcdAuthenticationFailedError('etcdserver: authentication failed, invalid user ID or password'), 'ETCD_AUTH_FAILED'],
    ['no permission', new EtcdPermissionDeniedError('etcdserver: permission denied'), 'ETCD_AUTH_FAILED'],
    ['lease gone', new EtcdLeaseInvalidError('123'), 'ETCD_FAILED'],
    ['anything else', new GRPCInternalError('13 INTERNAL'), 'ETCD_FAILED'],
    ['an llmgw error passes through', new LlmgwError('LEADER_DEPOSED', 'x'), 'LEADER_DEPOSED'],
  ];
  for (const [what, e, code] of table) {
    it(`${what} → ${code}`, () => assert.equal(etcdReason(e).code, code));
  }
});

describe('electionTimingProblem', () => {
  it('accepts the defaults and the test timings', () => {
    assert.equal(electionTimingProblem({ leaseTtlSeconds: 15, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 }), null);
    assert.equal(electionTimingProblem({ leaseTtlSeconds: 3, renewDeadlineMs: 2_000, retryPeriodMs: 500 }), null);
  });
  it('refuses a renew deadline that is not shorter than the lease, and a retry period not shorter than the deadline', () => {
    assert.match(electionTimingProblem({ leaseTtlSeconds: 10, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 })!, /renew deadline/);
    assert.match(electionTimingProblem({ leaseTtlSeconds: 15, renewDeadlineMs: 2_000, retryPeriodMs: 2_000 })!, /retry period/);
    assert.match(electionTimingProblem({ leaseTtlSeconds: 1, renewDeadlineMs: 500, retryPeriodMs: 100 })!, /at least 2/);
  });
});

describe('parseLeader and canonicalJson', () => {
  it('reads a leader record with its epoch, and nothing else', () => {
    assert.deepEqual(parseLeader({ value: Buffer.from('{"id":"a","label":"h:1","since":5}'), create_revision: '42' }), { id: 'a', label: 'h:1', since: 5, epoch: 42 });
    assert.equal(parseLeader({ value: Buffer.from('{"id":"a"}'), create_revision: '42' }), null);
    assert.equal(parseLeader({ value: Buffer.from('nope'), create_revision: '42' }), null);
  });
  it('serializes equal content to equal text whatever the key order', () => {
    assert.equal(canonicalJson({ b: 1, a: { d: [1, { z: 1, y: 2 }], c: null } }), '{"a":{"c":null,"d":[1,{"y":2,"z":1}]},"b":1}');
    assert.equal(canonicalJson({ a: undefined, b: 1 }), JSON.stringify({ a: undefined, b: 1 }));
  });
});
