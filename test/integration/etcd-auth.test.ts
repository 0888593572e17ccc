/**
 * etcd with authentication on (a real etcd, users and roles made through etcd3): llmgw's user with
 * its password file leads and writes under its prefix; a wrong password and a user without
 * permission on the prefix give ETCD_AUTH_FAILED, and such an instance never leads.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { Election } from '../../src/ha/election.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { until } from '../harness/wait.js';
import { elected, instanceWith, settings } from '../harness/elections.js';

const PREFIX = '/llmgw-auth/fleet';

describe('etcd with authentication', { timeout: 60_000 }, () => {
  let etcd: EtcdInstance;
  let dir: string;
  const closers: (() => Promise<void>)[] = [];

  before(async () => {
    etcd = await startEtcd();
    dir = mkdtempSync(join(tmpdir(), 'llmgw-etcd-auth-'));
    const admin = new Etcd3({ hosts: etcd.endpoint });
    try {
      await admin.role('root').create();
      await admin.user('root').create('root-pw');
      await admin.user('root').addRole('root');
      await admin.role('llmgw').create();
      await admin.role('llmgw').grant({ permission: 'Readwrite', range: admin.range({ prefix: `${PREFIX}/` }) });
      await admin.user('llmgw').create('the llmgw password');
      await admin.user('llmgw').addRole('llmgw');
      await admin.user('other').create('other-pw');
      await admin.auth.authEnable();
    } finally {
      admin.close();
    }
  });
  after(async () => {
    await Promise.all(closers.map((c) => c()));
    await etcd.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const start = (id: string, username: string, password: string): Election => {
    const passwordFile = join(dir, `${id}.pw`);
    writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
    const i = instanceWith({ ...settings(etcd.endpoint, PREFIX), auth: { username, passwordFile } }, id);
    closers.push(() => i.close());
    i.election.start();
    return i.election;
  };

  it('the llmgw user with its password file leads and writes under its prefix', async () => {
    const e = start('good', 'llmgw', 'the llmgw password');
    await elected(e);
    await e.guardedPut(`${PREFIX}/probe`, 'ok');
    assert.equal(e.reachable, true);
    assert.equal(e.lastError, null);
  });

  for (const [what, user, pw] of [
    ['a wrong password', 'llmgw', 'not the password'],
    ['a user without permission on the prefix', 'other', 'other-pw'],
  ] as const) {
    it(`${what}: ETCD_AUTH_FAILED, not reachable, never leads`, async () => {
      const e = start(`bad-${user}`, user, pw);
      await until('a failed etcd call', 10_000, () => e.lastError !== null);
      assert.equal(e.lastError?.code, 'ETCD_AUTH_FAILED', e.lastError?.message);
      assert.equal(e.reachable, false);
      assert.equal(e.isLeader(), false);
      assert.ok(!e.lastError.message.includes(pw), 'the password is not in the reason');
    });
  }
});
