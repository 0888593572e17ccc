/** FleetRepo against git's own smart-HTTP server (git http-backend) with token auth. */
import assert from 'node:assert/strict';
import { existsSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { FleetRepo } from '../../src/git/repo.js';
import { startGitHttpServer, type GitHttpServer } from '../harness/git-http.js';
import { WorkRepo, cleanupTempDirs, makeTempDir } from '../harness/git.js';
import { rejectsWith } from '../harness/errors.js';

const ENV = `LLMGW_TEST_GIT_TOKEN_${process.pid}`;
const text = (b: Uint8Array): string => Buffer.from(b).toString('utf8');


describe('FleetRepo over smart HTTP', () => {
  let server: GitHttpServer;
  let work: WorkRepo;
  let c1: string;
  let c2: string;

  before(async () => {
    const root = await makeTempDir('llmgw-srv-');
    server = await startGitHttpServer({ root });
    work = await WorkRepo.init();
    await work.write({ 'fleet.yaml': '{}\n', 'models/a.yaml': 'v: 1\n' });
    c1 = await work.commit('first');
    await work.bareCopy(root, 'fleet.git');
    await work.write({ 'models/a.yaml': 'v: 2\n', 'models/b.yaml': 'b: true\n' });
    c2 = await work.commit('second');
    await work.push(server.authUrl('fleet.git'), 'main');
    process.env[ENV] = server.token;
  });

  after(async () => {
    delete process.env[ENV];
    await server.close();
    await cleanupTempDirs();
  });

  const remote = async (over: Partial<ConstructorParameters<typeof FleetRepo>[0]> = {}): Promise<FleetRepo> =>
    new FleetRepo({ url: server.url('fleet.git'), cacheDir: join(await makeTempDir('llmgw-cache-'), 'mirror'), token: { env: ENV }, ...over });

  it('syncs, resolves revisions and reads files at two revisions from a bare mirror', async () => {
    const repo = await remote();
    assert.deepEqual(await repo.sync(), { head: c2 });
    assert.equal(await repo.resolve('HEAD'), c2);
    assert.equal(await repo.resolve('main'), c2);
    assert.equal(await repo.resolve(c1), c1);
    assert.equal(await repo.resolve(c1.slice(0, 8)), c1);
    await rejectsWith(repo.resolve('no-such-branch'), 'GIT_REF_NOT_FOUND');
    await rejectsWith(repo.resolve('f'.repeat(40)), 'GIT_REF_NOT_FOUND');

    assert.equal(text(await repo.files(c1).read('models/a.yaml', 100)), 'v: 1\n');
    assert.equal(text(await repo.files(c2).read('models/a.yaml', 100)), 'v: 2\n');
    assert.deepEqual(await repo.files(c1).list(), [
      { path: 'fleet.yaml', kind: 'file', size: 3 },
      { path: 'models', kind: 'dir', size: 0 },
      { path: 'models/a.yaml', kind: 'file', size: 5 },
    ]);
    assert.deepEqual(
      (await repo.files(c2).list()).map((e) => e.path),
      ['fleet.yaml', 'models', 'models/a.yaml', 'models/b.yaml'],
    );
    await rejectsWith(repo.files(c1).read('models/b.yaml', 100), 'GIT_PATH_NOT_FOUND');
    // A bare mirror: objects only, no checked-out files.
    assert.ok(existsSync(join(repo.gitdir, 'HEAD')));
    assert.ok(!existsSync(join(repo.gitdir, 'fleet.yaml')));
  });

  it('picks up new pushes on the next sync and reads the token from a file', async () => {
    const dir = await makeTempDir('llmgw-tokfile-');
    writeFileSync(join(dir, 'token'), `${server.token}\n`);
    const repo = await remote({ token: { file: join(dir, 'token') } });
    assert.equal((await repo.sync()).head, c2);
    await work.write({ 'models/c.yaml': 'c: 1\n' });
    const c3 = await work.commit('third');
    await work.push(server.authUrl('fleet.git'), 'main');
    assert.equal((await repo.sync()).head, c3);
    assert.equal(text(await repo.files(c3).read('models/c.yaml', 100)), 'c: 1\n');
    assert.equal((await repo.sync()).head, c3);
  });

  it('a wrong or missing token is GIT_AUTH_FAILED and no token appears in the error', async () => {
    const wrong = 'wrong-token-4f1c2e9d7a';
    process.env[`${ENV}_WRONG`] = wrong;
    try {
      const repo = await remote({ token: { env: `${ENV}_WRONG` } });
      const e = await rejectsWith(repo.sync(), 'GIT_AUTH_FAILED');
      for (const s of [e.message, e.stack ?? '', inspect(e, { depth: 10 }), JSON.stringify(e), JSON.stringify(e.detail)]) {
        assert.ok(!s.includes(wrong), `wrong token leaked: ${s}`);
        assert.ok(!s.includes(server.token), `server token leaked: ${s}`);
      }
    } finally {
      delete process.env[`${ENV}_WRONG`];
    }
    const noToken = await remote({ token: undefined });
    await rejectsWith(noToken.sync(), 'GIT_AUTH_FAILED');
    const unset = await remote({ token: { env: `${ENV}_UNSET` } });
    await rejectsWith(unset.sync(), 'GIT_AUTH_FAILED');
  });

  it('credentials in the URL are used and scrubbed from errors', async () => {
    const repo = await remote({ url: server.authUrl('nope.git'), token: undefined });
    const e = await rejectsWith(repo.sync(), 'GIT_UNREACHABLE');
    assert.ok(!inspect(e).includes(server.token), inspect(e));
    assert.ok(!repo.label.includes(server.token));
    const ok = await remote({ url: server.authUrl('fleet.git'), token: undefined });
    assert.ok((await ok.sync()).head);
  });

  it('a missing branch is GIT_REF_NOT_FOUND', async () => {
    const repo = await remote({ branch: 'does-not-exist' });
    await rejectsWith(repo.sync(), 'GIT_REF_NOT_FOUND');
  });

  it('a server that accepts but never answers is GIT_UNREACHABLE after the timeout', async () => {
    const sockets: Socket[] = [];
    const silent = createServer((sock) => void sockets.push(sock));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    try {
      const port = (silent.address() as AddressInfo).port;
      const repo = await remote({ url: `http://127.0.0.1:${port}/fleet.git`, timeoutMs: 300 });
      const started = Date.now();
      await rejectsWith(repo.sync(), 'GIT_UNREACHABLE');
      assert.ok(Date.now() - started < 5000);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => silent.close(() => r()));
    }
  });

  it('a stopped server is GIT_UNREACHABLE', async () => {
    const other = await startGitHttpServer({ root: server.root, token: server.token });
    const repo = await remote({ url: other.url('fleet.git') });
    assert.ok((await repo.sync()).head);
    await other.close();
    const e = await rejectsWith(repo.sync(), 'GIT_UNREACHABLE');
    assert.ok(!inspect(e).includes(server.token));
    // What was fetched stays readable.
    assert.equal(text(await repo.files(c1).read('fleet.yaml', 100)), '{}\n');
  });
});
