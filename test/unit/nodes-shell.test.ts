import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { isLlmgwError } from '../../src/errors/catalogue.js';
import { LocalShell } from '../../src/nodes/local.js';
import { checkScript, MAX_SCRIPT_BYTES, OutputTail, shJoin, shq } from '../../src/nodes/shell.js';
import { AfterMarker, fingerprint, parseHostKey, remoteCommand, validIdentityName } from '../../src/nodes/ssh.js';
import { assertSuccess, openShell } from '../../src/nodes/transport.js';
import { localNodeSpec, makeKeyPair } from '../harness/sshd.js';

const execFileP = promisify(execFile);

/** Values that break naive quoting. */
const NASTY = ['', 'plain', 'a;touch X', '$(touch X)', '`touch X`', "'", "it's", '"', '\\', 'a\nb', '\n', '$HOME', '*', '-n', 'ü ✓', "';touch X;'", '${IFS}', '|&<>'];

let dir: string;
before(async () => { dir = await mkdtemp(join(tmpdir(), 'llmgw-shell-unit-')); });
after(async () => { await rm(dir, { recursive: true, force: true }); });

describe('shq / shJoin', () => {
  it('round-trips every value through sh verbatim and runs nothing', async () => {
    for (const v0 of NASTY) {
      const v = v0.replace('X', join(dir, 'pwned'));
      const r = spawnSync('sh', ['-c', `printf %s ${shq(v)}`], { encoding: 'utf8' });
      assert.equal(r.stdout, v);
    }
    assert.deepEqual(await readdir(dir), []);
  });
  it('joins arguments so sh sees each one intact', () => {
    const args = ['a b', "c'd", '', '$x'];
    const r = spawnSync('sh', ['-c', `for a in ${shJoin(args)}; do printf '[%s]' "$a"; done`], { encoding: 'utf8' });
    assert.equal(r.stdout, "[a b][c'd][][$x]");
  });
  it('refuses NUL bytes', () => {
    assert.throws(() => shq('a\0b'), /NUL/);
  });
});

describe('remoteCommand (what ssh sends to the login shell)', () => {
  for (const login of ['sh', 'bash']) {
    it(`reaches sh -c byte for byte through ${login} as the login shell and reports its process group`, async () => {
      const marker = 'llmgw-run-0123456789abcdef:';
      for (const v0 of NASTY) {
        const v = v0.replace('X', join(dir, 'pwned'));
        const script = `printf %s ${shq(v)}\nprintf '%s' "$0" >&2`;
        // setsid: like sshd, make the login shell a session leader so $$ names the process group.
        const r = spawnSync('setsid', ['-w', login, '-c', remoteCommand(script, marker)], { encoding: 'utf8' });
        assert.equal(r.stdout, `${marker}\n${v}`);
        assert.match(r.stderr, new RegExp(`^${marker}\\d+\\nsh$`));
      }
      assert.deepEqual(await readdir(dir), []);
    });
  }
  it('refuses markers that would need quoting', () => {
    assert.throws(() => remoteCommand('true', "x'; rm -rf /"), /marker/);
  });
});

describe('AfterMarker', () => {
  it('drops what comes before the marker line, in any chunking, and reports its value', () => {
    const text = 'motd noise\nmore\nMARK:4242\nreal output\n';
    for (let split = 0; split <= text.length; split++) {
      const sink = new OutputTail(1024);
      let seen: string | null | undefined;
      const m = new AfterMarker(Buffer.from('MARK:'), sink, (v) => { seen = v; });
      m.push(Buffer.from(text.slice(0, split)));
      m.push(Buffer.from(text.slice(split)));
      m.end();
      assert.equal(sink.toString(), 'real output\n');
      assert.equal(seen, '4242');
    }
  });
  it('keeps everything when the marker never comes (the login shell failed)', () => {
    const sink = new OutputTail(1024);
    let seen: string | null | undefined;
    const m = new AfterMarker(Buffer.from('MARK:'), sink, (v) => { seen = v; });
    m.push(Buffer.from('fish: unknown command\n'));
    m.end();
    assert.equal(sink.toString(), 'fish: unknown command\n');
    assert.equal(seen, null);
  });
});

describe('OutputTail', () => {
  it('keeps the last cap bytes', () => {
    const t = new OutputTail(10);
    for (let i = 0; i < 100; i++) t.push(Buffer.from(`${i % 10}`.repeat(3)));
    assert.equal(t.toString(), '6777888999');
    assert.equal(t.total, 300);
  });
});

describe('host keys', () => {
  it('parses "<type> <base64>" and fingerprints like ssh-keygen -l', async () => {
    const pub = await makeKeyPair(dir, 'hk');
    const parsed = parseHostKey(pub);
    assert.ok(parsed);
    assert.equal(parsed.type, 'ssh-ed25519');
    const { stdout } = await execFileP('ssh-keygen', ['-l', '-E', 'sha256', '-f', join(dir, 'hk.pub')]);
    assert.equal(fingerprint(parsed.blob), stdout.split(' ')[1]);
    assert.ok(parseHostKey(`${pub} a comment`));
    await rm(join(dir, 'hk'));
    await rm(join(dir, 'hk.pub'));
  });
  it('rejects malformed keys and a type that disagrees with the blob', async () => {
    const pub = await makeKeyPair(dir, 'hk2');
    const blob = pub.split(' ')[1]!;
    assert.equal(parseHostKey(''), null);
    assert.equal(parseHostKey('ssh-ed25519'), null);
    assert.equal(parseHostKey('ssh-ed25519 !!!'), null);
    assert.equal(parseHostKey(`ssh-rsa ${blob}`), null);
    await rm(join(dir, 'hk2'));
    await rm(join(dir, 'hk2.pub'));
  });
});

describe('identity names', () => {
  it('allows plain file names only', () => {
    for (const ok of ['id_ed25519', 'node-a.key', '.hidden']) assert.equal(validIdentityName(ok), true, ok);
    for (const bad of ['', '.', '..', '../id', 'a/b', '/etc/shadow', 'a\0b']) assert.equal(validIdentityName(bad), false, bad);
  });
});

describe('checkScript', () => {
  it('refuses scripts over the one-argument limit and NUL bytes', () => {
    checkScript('x'.repeat(MAX_SCRIPT_BYTES));
    assert.throws(() => checkScript('x'.repeat(MAX_SCRIPT_BYTES + 1)), /stdin/);
    assert.throws(() => checkScript('a\0b'), /NUL/);
  });
});

describe('LocalShell specifics', () => {
  it('openShell picks the local transport for transport: local', async () => {
    const shell = openShell(localNodeSpec(dir, { name: 'here' }), { secretsDir: dir });
    assert.ok(shell instanceof LocalShell);
    assert.equal(shell.node, 'here');
    assert.equal((await shell.run('echo ok')).stdout, 'ok\n');
    await shell.close();
    await shell.close();
  });
  it('caps stdout and stderr, keeping the tail', async () => {
    const shell = new LocalShell('here', { outputCapBytes: 1000 });
    const r = await shell.run('seq 1 100000; seq 1 50000 >&2');
    assert.equal(r.stdout.length, 1000);
    assert.ok(r.stdout.endsWith('99999\n100000\n'));
    assert.equal(r.stderr.length, 1000);
    assert.ok(r.stderr.endsWith('49999\n50000\n'));
  });
  it('upload failure leaves no temp file and says why', async () => {
    const shell = new LocalShell('here');
    const src = join(dir, 'src.txt');
    await execFileP('sh', ['-c', `printf hello > ${shq(src)}`]);
    await assert.rejects(shell.upload(src, join(dir, 'missing-dir', 'f')), (e) => isLlmgwError(e, 'NODE_COMMAND_FAILED') && /missing-dir/.test(e.message));
    await assert.rejects(shell.upload(join(dir, 'nope'), join(dir, 'f')), (e) => isLlmgwError(e, 'NODE_COMMAND_FAILED'));
    assert.deepEqual((await readdir(dir)).sort(), ['src.txt']);
    assert.equal(await readFile(src, 'utf8'), 'hello');
    await rm(src);
  });
});

describe('assertSuccess', () => {
  it('passes exit 0 and turns anything else into NODE_COMMAND_FAILED with the stderr tail', () => {
    const ok = { code: 0, signal: null, stdout: 'x', stderr: '' };
    assert.equal(assertSuccess('n1', 'step', ok), ok);
    assert.throws(() => assertSuccess('n1', 'install engine', { code: 2, signal: null, stdout: '', stderr: 'boom\n' }),
      (e) => isLlmgwError(e, 'NODE_COMMAND_FAILED') && e.message === 'node n1: install engine failed (exit code 2): boom');
    assert.throws(() => assertSuccess('n1', 'x', { code: null, signal: 'SIGKILL', stdout: '', stderr: '' }),
      (e) => isLlmgwError(e, 'NODE_COMMAND_FAILED') && /signal SIGKILL/.test(e.message));
  });
});
