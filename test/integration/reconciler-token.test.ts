/**
 * A model with token: through the whole controller (real sshd node, real git server, real
 * llama-server): the header is read and the file downloaded with the token from the secrets dir,
 * and the replica serves; a model whose secret is missing is not counted towards parking and says
 * which secret to put where. The token shows in no log line.
 */
import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { tokenSecrets } from '../../src/serve/secrets.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { startGatedOrigin, type GatedOrigin } from '../harness/gated-origin.js';

const TOKEN = `hf_${randomBytes(16).toString('hex')}`;
let fleet: TestFleet;
let origin: GatedOrigin;

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const { good } = fleet.models;
  origin = await startGatedOrigin(good.path, TOKEN);
  writeFileSync(join(fleet.secretsDir, 'hf-token'), `${TOKEN}\n`, { mode: 0o600 });
  const files = fleet.baseFiles();
  for (const f of ['models/good.yaml', 'models/kev.yaml', 'models/huge.yaml']) delete files[f];
  files['models/gated.yaml'] = [`source: ${origin.url}`, `sha256: ${good.sha256}`, 'profile: tiny', 'replicas: 1', 'token: hf-token', ''].join('\n');
  // placed (memory given), but its secret is not in the secrets dir
  files['models/locked.yaml'] = [`source: ${origin.url}`, `sha256: ${fleet.models.good2.sha256}`, 'profile: tiny', 'replicas: 1', 'memory: 256MiB', 'token: not-there', ''].join('\n');
  await fleet.push(files, 'gated models');
});

after(async () => {
  await fleet?.cleanup();
  await origin?.close();
});

describe('download tokens in the controller', () => {
  it('reads the header and downloads with the token; a missing secret is named and not counted', async () => {
    const ctl = await fleet.startController({ readSecret: tokenSecrets(fleet.secretsDir) });
    try {
      const model = (name: string) => ctl.reconciler.snapshot().models.find((m) => m.name === name);
      await ctl.until('gated ready and locked failing on its secret', 90_000, () => model('gated')?.ready === 1 && model('locked')?.lastError?.code === 'SECRET_NOT_FOUND');
      const gated = model('gated')!;
      assert.ok(gated.memoryBytes! > fleet.models.good.bytes, `estimate ${gated.memoryBytes} read through the token`);
      assert.ok(origin.hubSeen.some((x) => x.method === 'HEAD') && origin.hubSeen.some((x) => x.method === 'GET'), JSON.stringify(origin.hubSeen));
      assert.ok(origin.hubSeen.every((x) => x.auth === `Bearer ${TOKEN}` && !x.tokenInArgv), JSON.stringify(origin.hubSeen));
      assert.ok(origin.cdnSeen.every((x) => x.auth === null), 'the token followed the redirect to another host');

      const locked = model('locked')!;
      assert.match(locked.lastError!.message, /secret 'not-there' not found in the secrets dir/);
      assert.equal(locked.consecutiveFailures, 0, 'a missing secret is not the model\'s failure');
      assert.equal(locked.parked, null);
      assert.ok(!JSON.stringify(ctl.logs).includes(TOKEN), 'the token is in a log line');
    } finally {
      await ctl.stop();
    }
  });
});
