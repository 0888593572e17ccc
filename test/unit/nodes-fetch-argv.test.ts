/**
 * #36 N14: a presigned source URL (its query string is a credential) and a download token are in
 * no process's argv on the node while the model downloads. The fetch script runs as the local
 * transport runs it (`sh -c SCRIPT`, the URL and token on stdin) against a real HTTP server that
 * holds the body half-sent; meanwhile every /proc/<pid>/cmdline is read. Then the body completes and
 * the file is verified and in place.
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { modelFromUrlInput, modelFromUrlScript, modelPath } from '../../src/nodes/ops/model-fetch.js';
import { makeDataDir, type DataDir } from '../harness/nodes-ops-fixture.js';
import { until } from '../harness/wait.js';

const SIGNATURE = 'doorsPresignedSignature0123456789abcdef';
const TOKEN = 'doors-download-token-5e6f7a8b9c';

let fx: DataDir;
before(() => {
  fx = makeDataDir('fetch-argv');
});
after(() => fx.remove());

/** Every process's argv that holds `needle`, as "pid: argv". */
function argvHolding(needle: string): string[] {
  const out: string[] = [];
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    let cmd: string;
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, 'latin1');
    } catch {
      continue;
    }
    if (cmd.includes(needle)) out.push(`${pid}: ${cmd.replaceAll('\0', ' ').slice(0, 200)}`);
  }
  return out;
}

describe('model fetch: the presigned URL and the token in no argv', () => {
  it('while curl downloads, no /proc/*/cmdline holds the signature or the token; then the file is verified and in place', async () => {
    const body = Buffer.alloc(200_000, 9);
    const sha = createHash('sha256').update(body).digest('hex');
    let held: ServerResponse | null = null;
    let sawAuth = '';
    const server = createServer((req, res) => {
      sawAuth = String(req.headers.authorization ?? '');
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length });
      res.write(body.subarray(0, 1000));
      held = res; // the rest once the test has looked
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/m.gguf?X-Amz-Signature=${SIGNATURE}&X-Amz-Expires=60`;
      const dataDir = join(fx.root, 'data');
      const child = spawn('sh', ['-c', modelFromUrlScript(dataDir, sha, 'hf-token')], { stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.stdin.end(modelFromUrlInput(url, TOKEN));
      const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));

      await until('the download under way (the body half-sent)', 20_000, () => held !== null, { diag: () => stderr });
      assert.deepEqual(argvHolding(SIGNATURE), [], 'the presigned signature is in an argv');
      assert.deepEqual(argvHolding(TOKEN), [], 'the token is in an argv');
      assert.equal(sawAuth, `Bearer ${TOKEN}`, 'the token reached the server as the Authorization header');

      held!.end(body.subarray(1000));
      assert.equal(await exited, 0, stderr);
      assert.equal(Number(stdout.trim().split('\n').at(-1)), body.length);
      assert.ok(existsSync(modelPath(dataDir, sha)));
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('a line break in the URL or the token is refused before anything runs', () => {
    assert.throws(() => modelFromUrlInput('http://h/m.gguf\nurl = "http://evil/"'), /line break/);
    assert.throws(() => modelFromUrlInput('http://h/m.gguf', 'tok\nheader = "x: y"'), /line break/);
  });
});
