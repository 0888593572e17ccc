/**
 * Node transports against the real thing: OpenSSH sshd (two instances = two nodes) and the local
 * transport. The core semantics are one suite run over both.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { isLlmgwError, type LlmgwError } from '../../src/errors/catalogue.js';
import { LocalShell } from '../../src/nodes/local.js';
import { shq, type Shell } from '../../src/nodes/shell.js';
import { Client, type ConnectConfig } from 'ssh2';
import { fingerprint, isConnectionGone, NO_MATCHING_HOST_KEY, parseHostKey, SshShell, type SshOptions } from '../../src/nodes/ssh.js';
import { openShell } from '../../src/nodes/transport.js';
import type { NodeSpec } from '../../src/fleet-spec/types.js';
import { makeKeyPair, sshdNodeSpec, startSshd, type SshdInstance } from '../harness/sshd.js';
import { until } from '../harness/wait.js';

const execFileP = promisify(execFile);

let a: SshdInstance;
let b: SshdInstance;
let work: string;
const open: Shell[] = [];

before(async () => {
  [a, b] = await Promise.all([startSshd(), startSshd()]);
  work = await mkdtemp(join(tmpdir(), 'llmgw-nodes-ssh-'));
});
after(async () => {
  await Promise.all(open.map((s) => s.close()));
  await Promise.all([a?.stop(), b?.stop()]);
  await rm(work, { recursive: true, force: true });
});

function ssh(inst: SshdInstance, overrides: Partial<NodeSpec> = {}, opts: Partial<SshOptions> = {}): SshShell {
  const s = new SshShell(sshdNodeSpec(inst, overrides), { secretsDir: inst.secretsDir, ...opts });
  open.push(s);
  return s;
}

/** Command lines of every process on this machine (the nodes are loopback sshd, so this is "the node"). */
async function processArgs(): Promise<string> {
  return (await execFileP('ps', ['-eo', 'args'], { maxBuffer: 16 * 1024 * 1024 })).stdout;
}

/** Resolves once no process on the node has `token` in its command line (fails after `ms`). */
async function waitGone(token: string, ms = 3_000): Promise<true> {
  await until(`"${token}" gone from ps`, ms, async () => !(await processArgs()).includes(token));
  return true;
}

/** Resolves once `count` processes on the node run exactly `command` (e.g. `sleep 4123456.5`). */
async function waitRunning(command: string, count = 1, ms = 10_000): Promise<void> {
  await until(`${count} × "${command}" in ps`, ms, async () => (await processArgs()).split('\n').filter((l) => l.trim() === command).length >= count);
}

/** A unique sleep duration, findable in `ps`: about 49 days, or `seconds` and a unique fraction. */
function uniqueSleep(seconds?: number): string {
  const r = String(Math.floor(Math.random() * 1e6)).padStart(6, '0');
  return seconds === undefined ? `4${r}.5` : `${seconds}.${r}1`;
}

const codeIs = (code: LlmgwError['code']) => (e: unknown) => isLlmgwError(e, code);

// ---------------------------------------------------------------- core semantics, both transports

const targets: Array<{ name: string; shell: () => Shell; small: () => Shell }> = [
  { name: 'ssh', shell: () => ssh(a, { name: 'node-a' }), small: () => ssh(a, { name: 'node-a' }, { outputCapBytes: 1000 }) },
  { name: 'local', shell: () => new LocalShell('local'), small: () => new LocalShell('local', { outputCapBytes: 1000 }) },
];

for (const t of targets) {
  describe(`Shell semantics over ${t.name}`, () => {
    it('returns exit code, stdout and stderr; scripts are multi-line sh', async () => {
      const sh = t.shell();
      const r = await sh.run(`echo out\necho err >&2\nif [ "$(printf 'x\\ny' | wc -l)" -eq 1 ]; then exit 7; fi`);
      assert.deepEqual(r, { code: 7, signal: null, stdout: 'out\n', stderr: 'err\n' });
      assert.deepEqual(await sh.run('true'), { code: 0, signal: null, stdout: '', stderr: '' });
      const killed = await sh.run('kill -KILL $$');
      assert.equal(killed.code, null);
      assert.equal(killed.signal, 'SIGKILL');
    });

    it('delivers stdin bytes exactly and closes stdin (also when none is given)', async () => {
      const sh = t.shell();
      const bytes = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 256));
      const r = await sh.run('od -An -v -tx1 | tr -d " \\n"', { stdin: bytes });
      assert.equal(r.stdout, bytes.toString('hex'));
      assert.equal((await sh.run('cat', { stdin: "it's a\nsecret" })).stdout, "it's a\nsecret");
      assert.equal((await sh.run('cat; echo eof')).stdout, 'eof\n');
    });

    it('a secret passed on stdin never shows in the node\'s ps output', async () => {
      const sh = t.shell();
      const secret = `s3cret-${randomBytes(8).toString('hex')}`;
      const token = `2.${String(Math.floor(Math.random() * 1e6)).padStart(6, '0')}1`; // ~2 s, findable in ps
      const running = sh.run(`IFS= read -r s; sleep ${token}; printf %s "$s" | wc -c`, { stdin: `${secret}\n` });
      let seen = '';
      for (let i = 0; i < 100 && !seen.includes(`sleep ${token}`); i++) {
        seen = (await sh.run('ps -eo args')).stdout; // a second channel while the first sleeps
      }
      assert.ok(seen.includes(`sleep ${token}`), 'the first run is visible in ps');
      assert.ok(!seen.includes(secret), 'the secret is not');
      assert.equal((await running).stdout.trim(), String(secret.length));
    });

    it('passes hostile values through shq verbatim and runs none of them', async () => {
      const sh = t.shell();
      const d = join(work, `inject-${t.name}`);
      await mkdir(d);
      const values = [`a;touch ${d}/x`, `$(touch ${d}/y)`, `\`touch ${d}/z\``, '`id`', "'", `';touch ${d}/q;'`, '"', 'a\nb\n\n', '\\', '$HOME', '*', '-n', '', 'ü ✓'];
      for (const v of values) {
        const r = await sh.run(`printf %s ${shq(v)}`);
        assert.equal(r.stdout, v);
        assert.equal(r.code, 0);
      }
      assert.deepEqual(await readdir(d), []);
    });

    it('times out with NODE_TIMEOUT and leaves no process behind (children included)', async () => {
      const sh = t.shell();
      const token = uniqueSleep();
      const child = uniqueSleep();
      const t0 = Date.now();
      await assert.rejects(sh.run(`sleep ${child} & sleep ${token}`, { timeoutMs: 1_000 }), (e) =>
        isLlmgwError(e, 'NODE_TIMEOUT') && e.message.includes('1000 ms'));
      assert.ok(Date.now() - t0 < 8_000);
      assert.ok(await waitGone(`sleep ${token}`), 'the script is gone');
      assert.ok(await waitGone(`sleep ${child}`), 'its background child is gone');
      assert.equal((await sh.run('echo still usable')).stdout, 'still usable\n');
    });

    it('an AbortSignal cancels the run and kills it', async () => {
      const sh = t.shell();
      const token = uniqueSleep();
      const ctl = new AbortController();
      const p = sh.run(`sleep ${token}`, { signal: ctl.signal });
      await waitRunning(`sleep ${token}`);
      ctl.abort(new Error('caller gave up'));
      await assert.rejects(p, /caller gave up/);
      assert.ok(await waitGone(`sleep ${token}`));
    });

    it('caps stdout and stderr, keeping the tail', async () => {
      const r = await t.small().run('seq 1 100000; seq 1 50000 >&2');
      assert.equal(r.stdout.length, 1000);
      assert.ok(r.stdout.endsWith('\n99999\n100000\n'));
      assert.equal(r.stderr.length, 1000);
      assert.ok(r.stderr.endsWith('\n49999\n50000\n'));
    });

    it('uploads a file under a temp name, renames it into place, with its mode', async () => {
      const sh = t.shell();
      const d = join(work, `upload-${t.name}`);
      await mkdir(d);
      const src = join(work, `src-${t.name}.bin`);
      const content = randomBytes(3 * 1024 * 1024 + 17);
      await writeFile(src, content);
      await chmod(src, 0o640);
      await sh.upload(src, join(d, 'artifact.bin'));
      assert.deepEqual(await readFile(join(d, 'artifact.bin')), content);
      assert.equal((await stat(join(d, 'artifact.bin'))).mode & 0o777, 0o640);

      await writeFile(src, 'second version\n');
      await sh.upload(src, join(d, 'artifact.bin'), { mode: 0o755 }); // replaces the existing file
      assert.equal(await readFile(join(d, 'artifact.bin'), 'utf8'), 'second version\n');
      assert.equal((await stat(join(d, 'artifact.bin'))).mode & 0o777, 0o755);
      assert.deepEqual(await readdir(d), ['artifact.bin'], 'no temp files left');

      await assert.rejects(sh.upload(src, join(d, 'no-such-dir', 'f')), codeIs('NODE_COMMAND_FAILED'));
      assert.deepEqual(await readdir(d), ['artifact.bin']);
    });
  });
}

// ---------------------------------------------------------------- ssh only

describe('SshShell connection handling', () => {
  it('concurrent runs (more than the channel limit) share one TCP connection', async () => {
    const c = await startSshd(); // a node of its own, so every connection to it is this shell's
    try {
      const sh = ssh(c, { name: 'node-c' });
      const token = uniqueSleep(1);
      const runs = Array.from({ length: 12 }, (_, i) => sh.run(`sleep ${token}; echo ${i}`));
      await waitRunning(`sleep ${token}`, 8); // the first 8 (the channel limit) run at once
      const { stdout } = await execFileP('ss', ['-Htn', 'state', 'established', `( dport = :${c.port} )`]);
      const results = await Promise.all(runs).catch((e: Error) => {
        throw new Error(`${e.message}\n--- sshd log (tail) ---\n${c.log().slice(-4000)}`, { cause: e });
      });
      assert.deepEqual(results.map((r) => r.stdout), results.map((_, i) => `${i}\n`));
      assert.equal(stdout.trim().split('\n').length, 1, `one TCP connection to sshd:\n${stdout}`);
      assert.equal(sh.connection.connects, 1);
      assert.equal(c.log().split('Accepted publickey for').length - 1, 1, 'sshd authenticated one connection');
    } finally {
      await c.stop();
    }
  });

  it('short runs keep their exit status when the exec reply, output, exit status and close arrive in one read', async () => {
    // Before ssh.ts attached its 'exit' listener inside ssh2's callback, about 1 in 40 of these
    // failed with "connection lost while the command ran" on a loaded machine (15 of 600).
    const sh = ssh(a, { name: 'node-a' });
    const failures: string[] = [];
    await Promise.all(Array.from({ length: 4 }, async (_, w) => {
      for (let i = 0; i < 100; i++) {
        const r = await sh.run(`printf %s ${w}-${i}`).catch((e: Error) => ({ code: -1, stdout: e.message }));
        if (r.code !== 0 || r.stdout !== `${w}-${i}`) failures.push(`${w}-${i}: ${r.code} ${r.stdout}`);
      }
    }));
    assert.deepEqual(failures, []);
  });

  it('many runs timing out at once are all killed (kill channels beyond MaxSessions are retried)', async () => {
    const sh = ssh(a, { name: 'node-a' });
    const tokens = Array.from({ length: 10 }, () => uniqueSleep());
    const results = await Promise.allSettled(tokens.map((tok) => sh.run(`sleep ${tok}`, { timeoutMs: 1_500 })));
    assert.ok(results.every((r) => r.status === 'rejected' && isLlmgwError(r.reason, 'NODE_TIMEOUT')));
    for (const tok of tokens) assert.ok(await waitGone(`sleep ${tok}`), `sleep ${tok} is gone`);
    assert.equal((await sh.run('echo ok')).stdout, 'ok\n');
  });

  it('talks to two nodes at once, each over its own connection', async () => {
    const sa = ssh(a, { name: 'node-a' });
    const sb = ssh(b, { name: 'node-b' });
    const [ra, rb] = await Promise.all([sa.run('echo $SSH_CONNECTION'), sb.run('echo $SSH_CONNECTION')]);
    assert.equal(ra.stdout.trim().split(' ')[3], String(a.port));
    assert.equal(rb.stdout.trim().split(' ')[3], String(b.port));
  });

  it('openShell picks ssh for transport: ssh', async () => {
    const s = openShell(sshdNodeSpec(a, { name: 'node-a' }), { secretsDir: a.secretsDir });
    open.push(s);
    assert.ok(s instanceof SshShell);
    assert.equal((await s.run('echo hi')).stdout, 'hi\n');
  });

  it('refuses a host key other than the pinned one, naming both fingerprints, and runs nothing', async () => {
    const marker = join(work, 'hostkey-marker');
    const sh = ssh(a, { name: 'node-a', hostKey: b.hostKey });
    const expected = fingerprint(parseHostKey(b.hostKey)!.blob);
    const presented = fingerprint(parseHostKey(a.hostKey)!.blob);
    const { stdout } = await execFileP('ssh-keygen', ['-l', '-E', 'sha256', '-f', join(a.dir, 'ssh_host_ed25519_key.pub')]);
    assert.equal(presented, stdout.split(' ')[1]);
    await assert.rejects(sh.run(`touch ${shq(marker)}`), (e) =>
      isLlmgwError(e, 'NODE_HOST_KEY_MISMATCH') && e.message.includes('node-a') && e.message.includes(expected) && e.message.includes(presented));
    await assert.rejects(stat(marker), /ENOENT/);
    assert.equal(sh.connection.connects, 0);
  });

  it('a pinned key of a type the node does not offer is NODE_HOST_KEY_MISMATCH, not "unreachable"', async () => {
    await execFileP('ssh-keygen', ['-q', '-t', 'ecdsa', '-N', '', '-f', join(work, 'ecdsa_key')]);
    const pub = (await readFile(join(work, 'ecdsa_key.pub'), 'utf8')).split(' ').slice(0, 2).join(' ');
    const sh = ssh(a, { name: 'node-a', hostKey: pub });
    await assert.rejects(sh.run('true'), (e) =>
      isLlmgwError(e, 'NODE_HOST_KEY_MISMATCH') && e.message.includes('ecdsa-sha2-nistp256') && e.message.includes(fingerprint(parseHostKey(pub)!.blob)));
  });

  it('refuses any host key when none is pinned, and tells which key was presented', async () => {
    const sh = ssh(a, { name: 'node-a', hostKey: null });
    await assert.rejects(sh.run('true'), (e) =>
      isLlmgwError(e, 'NODE_HOST_KEY_MISMATCH') && e.message.includes(fingerprint(parseHostKey(a.hostKey)!.blob))
      && e.detail.presentedKey === a.hostKey);
  });

  it('a missing or path-like identity is SECRET_NOT_FOUND, without connecting', async () => {
    for (const identity of ['no-such-key', '../id_node', null]) {
      const sh = ssh(a, { name: 'node-a', identity });
      await assert.rejects(sh.run('true'), codeIs('SECRET_NOT_FOUND'));
      assert.equal(sh.connection.connects, 0);
    }
  });

  it('a key the node does not authorize is NODE_AUTH_FAILED', async () => {
    await makeKeyPair(a.secretsDir, 'id_other');
    const sh = ssh(a, { name: 'node-a', identity: 'id_other' });
    await assert.rejects(sh.run('true'), (e) => isLlmgwError(e, 'NODE_AUTH_FAILED') && !/PRIVATE KEY/.test(e.message));
  });

  it('a closed port is NODE_UNREACHABLE, then fails fast during backoff, then tries again', async () => {
    const free = await new Promise<number>((resolve) => {
      const srv = createServer().listen(0, '127.0.0.1', () => {
        const p = (srv.address() as { port: number }).port;
        srv.close(() => resolve(p));
      });
    });
    let now = Date.parse('2026-01-01T00:00:00Z'); // the backoff's clock, moved by hand
    // backoffs of seconds (on the clock moved by hand): an attempt that waited one out would take seconds of real time
    const sh = ssh(a, { name: 'node-x', port: free }, { backoff: { initialMs: 4_000, maxMs: 10_000 }, clock: () => now });
    const tried = (e: unknown) => isLlmgwError(e, 'NODE_UNREACHABLE') && /ECONNREFUSED/.test(e.message) && !/backing off/.test(e.message);
    const backingOff = (next: number) => (e: unknown) =>
      isLlmgwError(e, 'NODE_UNREACHABLE') && /backing off/.test(e.message) && e.detail.nextAttemptAt === new Date(next).toISOString();
    const t = now;
    await assert.rejects(sh.run('true'), tried);
    const t0 = Date.now();
    await assert.rejects(sh.run('true'), backingOff(t + 4_000));
    assert.ok(Date.now() - t0 < 2_000, 'fails fast (it did not wait out the 4 s backoff)');
    now = t + 3_999;
    await assert.rejects(sh.run('true'), backingOff(t + 4_000));
    now = t + 4_000;
    await assert.rejects(sh.run('true'), tried);
    // the delay doubles (8 s), up to maxMs (10 s)
    now = t + 4_000 + 7_999;
    await assert.rejects(sh.run('true'), backingOff(t + 4_000 + 8_000));
    now = t + 4_000 + 8_000;
    await assert.rejects(sh.run('true'), tried);
    now = t + 12_000 + 9_999;
    await assert.rejects(sh.run('true'), backingOff(t + 12_000 + 10_000));
    now = t + 12_000 + 10_000;
    await assert.rejects(sh.run('true'), tried);
  });

  it('a server that accepts but never speaks ssh is NODE_UNREACHABLE after the connect timeout', async () => {
    const sockets: Socket[] = [];
    const srv: Server = createServer((s) => { sockets.push(s); });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    const port = (srv.address() as { port: number }).port;
    try {
      const sh = ssh(a, { name: 'node-mute', port }, { timeouts: { connectMs: 500 } });
      const t0 = Date.now();
      await assert.rejects(sh.run('true', { timeoutMs: 5_000 }), (e) => isLlmgwError(e, 'NODE_UNREACHABLE') && /500 ms/.test(e.message));
      assert.ok(Date.now() - t0 < 3_000);
    } finally {
      sockets.forEach((s) => s.destroy());
      await new Promise<void>((r) => srv.close(() => r()));
    }
  });

  it('a run cut by a dropped connection is NODE_UNREACHABLE; the next run reconnects after sshd restarts', async () => {
    const c = await startSshd();
    try {
      const sh = ssh(c, { name: 'node-c' });
      assert.equal((await sh.run('echo one')).stdout, 'one\n');
      const token = uniqueSleep(30);
      const cut = assert.rejects(sh.run(`sleep ${token}`), (e) => isLlmgwError(e, 'NODE_UNREACHABLE') && /connection lost/.test(e.message));
      await waitRunning(`sleep ${token}`);
      await c.restart(); // kills sshd with every connection it serves, then starts it again
      await cut;
      assert.equal((await sh.run('echo two')).stdout, 'two\n');
      assert.equal(sh.connection.connects, 2);
      const many = await Promise.all(Array.from({ length: 5 }, () => sh.run('echo x')));
      assert.ok(many.every((r) => r.stdout === 'x\n'));
      assert.equal(sh.connection.connects, 2);
    } finally {
      await c.stop();
    }
  });

  it('drops what the login shell prints before the command (noisy rc files)', async () => {
    const c = await startSshd({ loginRc: 'echo "Welcome to node-c"; echo "rc warning" >&2' });
    try {
      const sh = ssh(c, { name: 'node-c' });
      assert.deepEqual(await sh.run('echo out; echo err >&2'), { code: 0, signal: null, stdout: 'out\n', stderr: 'err\n' });
      const token = uniqueSleep();
      await assert.rejects(sh.run(`sleep ${token}`, { timeoutMs: 800 }), codeIs('NODE_TIMEOUT'));
      assert.ok(await waitGone(`sleep ${token}`));
    } finally {
      await c.stop();
    }
  });

  it('close() is idempotent and later runs are refused', async () => {
    const sh = ssh(a, { name: 'node-a' });
    await sh.run('true');
    await sh.close();
    await sh.close();
    await assert.rejects(sh.run('true'), /closed/);
  });
});

// ---------------------------------------------------------------- the ssh2 error texts ssh.ts matches

describe('the ssh2 error texts ssh.ts matches, produced by the real ssh2 against sshd (an ssh2 upgrade that changes them fails here)', () => {
  /** A bare ssh2 client, authenticated to `inst` with its host key pinned, ready. */
  async function rawClient(inst: SshdInstance, algorithms?: ConnectConfig['algorithms']): Promise<Client> {
    const spec = sshdNodeSpec(inst);
    const privateKey = await readFile(join(inst.secretsDir, inst.identityName));
    const pinned = parseHostKey(inst.hostKey)!.blob;
    const c = new Client();
    return new Promise((resolve, reject) => {
      c.once('ready', () => resolve(c));
      // ssh2 may report more errors after the first (a reset after a failed handshake): all land here
      c.on('error', (e) => {
        reject(e);
        c.destroy();
      });
      c.connect({ host: spec.host, port: spec.port, username: spec.user, privateKey, hostVerifier: (k: Buffer) => k.equals(pinned), ...(algorithms ? { algorithms } : {}) });
    });
  }

  it("asking a client whose connection closed for a channel throws 'Not connected' (exec and sftp)", async () => {
    const c = await rawClient(a);
    const closed = once(c, 'close');
    c.end();
    await closed;
    for (const ask of [() => c.exec('true', () => undefined), () => c.sftp(() => undefined)]) {
      const e = (() => {
        try {
          ask();
        } catch (err) {
          return err;
        }
        return assert.fail('no error thrown');
      })();
      assert.ok(e instanceof Error);
      assert.equal(e.message, 'Not connected');
      assert.ok(isConnectionGone(e), 'ssh.ts takes it for a connection that is gone');
    }
  });

  it("a channel request the connection drops before the server answers fails with 'No response from server'", async () => {
    const c = await rawClient(a);
    const answered = new Promise<Error | undefined>((resolve) => c.exec('true', (err) => resolve(err)));
    c.destroy(); // the request is written; no answer can be read now
    const e = await answered;
    assert.ok(e instanceof Error, 'the exec callback got an error');
    assert.equal(e.message, 'No response from server');
    assert.ok(isConnectionGone(e), 'ssh.ts takes it for a connection that is gone');
  });

  it('a host key algorithm the server does not offer fails the handshake with "no matching host key format"', async () => {
    assert.ok(a.hostKey.startsWith('ssh-ed25519 '), 'the test sshd offers only an ed25519 host key');
    await assert.rejects(rawClient(a, { serverHostKey: ['ecdsa-sha2-nistp256'] }), (e: unknown) => {
      assert.ok(e instanceof Error);
      assert.equal(e.message, 'Handshake failed: no matching host key format');
      assert.match(e.message, NO_MATCHING_HOST_KEY);
      return true;
    });
  });
});
