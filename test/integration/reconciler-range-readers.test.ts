/**
 * Which nodes the controller asks for a GGUF header when a model's file:// source is not on the
 * controller (Reconciler.rangeReaders, real sshd nodes, real git server): only reachable nodes whose
 * labels match the model's node_selector. The nodes here share the controller's file system, so each
 * driver maps the spec's path (absent everywhere) to the real file, and records who was asked.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { openNodeDriver } from '../../src/nodes/shell-driver.js';
import type { NodeDriver } from '../../src/nodes/driver.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';

let fleet: TestFleet;
/** Spec paths that exist on no machine; the drivers read the mapped real file instead. */
const ON_NODES = '/llmgw-test-only-on-nodes/remote.gguf';
const STRANDED = '/llmgw-test-only-on-nodes/stranded.gguf';

before(async () => {
  fleet = await startTestFleet({ nodes: 3 });
  const files = fleet.baseFiles();
  for (const f of ['models/good.yaml', 'models/kev.yaml', 'models/huge.yaml']) delete files[f];
  // node-1 is reachable but not labelled for the models; node-2 is labelled for both but will be down
  files['nodes/node-1.yaml'] += 'labels: { disk: none }\n';
  files['nodes/node-2.yaml'] += 'labels: { disk: models, stranded: "yes" }\n';
  files['nodes/node-3.yaml'] += 'labels: { disk: models }\n';
  const { good, good2 } = fleet.models;
  files['models/remote.yaml'] = [`source: file://${ON_NODES}`, `sha256: ${good.sha256}`, 'profile: tiny', 'replicas: 0', 'node_selector: { disk: models }', ''].join('\n');
  files['models/stranded.yaml'] = [`source: file://${STRANDED}`, `sha256: ${good2.sha256}`, 'profile: tiny', 'replicas: 1', 'node_selector: { stranded: "yes" }', ''].join('\n');
  await fleet.push(files, 'models whose files are only on the nodes');
  await fleet.nodes[1]!.stop();
});

after(async () => {
  await fleet?.cleanup();
});

describe('memory estimates read on the nodes', () => {
  it('asks only reachable nodes matching the node_selector; with none, says so', async () => {
    const asked: { node: string; path: string }[] = [];
    const real: Record<string, string> = { [ON_NODES]: fleet.models.good.path, [STRANDED]: fleet.models.good2.path };
    const ctl = await fleet.startController({
      driverFor: (n) => {
        const d = openNodeDriver(n, { secretsDir: fleet.secretsDir });
        return Object.assign(Object.create(d) as NodeDriver, {
          readFileRange: (path: string, offset: number, length: number) => {
            asked.push({ node: n.name, path });
            return d.readFileRange(real[path] ?? path, offset, length);
          },
        });
      },
    });
    try {
      const model = (name: string) => ctl.reconciler.snapshot().models.find((m) => m.name === name);
      await ctl.until('the estimate of remote and the reason for stranded', 90_000, () => (model('remote')?.memoryBytes ?? null) !== null && (model('stranded')?.unplaceable ?? null) !== null);

      // remote: read on node-3 only (node-1's labels do not match, node-2 is down)
      const remoteAsked = new Set(asked.filter((a) => a.path === ON_NODES).map((a) => a.node));
      assert.deepEqual([...remoteAsked], ['node-3']);
      const fileBytes = fleet.models.good.bytes;
      const remote = model('remote')!;
      assert.ok(remote.memoryBytes! > fileBytes, `estimate ${remote.memoryBytes} covers the ${fileBytes}-byte file plus KV cache and overhead`);

      // stranded: the only matching node is down, so nothing is read and the reason says why
      assert.equal(asked.filter((a) => a.path === STRANDED).length, 0, JSON.stringify(asked));
      const stranded = model('stranded')!;
      assert.equal(stranded.memoryBytes, null);
      assert.equal(stranded.unplaceable!.code, 'PLACEMENT_MEMORY_UNKNOWN');
      assert.match(stranded.unplaceable!.reason, /memory need unknown: could not read the GGUF header of file:\/\/\/llmgw-test-only-on-nodes\/stranded\.gguf \(not on the controller, and no reachable node to read it on\); set memory: in models\/stranded\.yaml/);
      assert.ok(!ctl.reconciler.snapshot().nodes.find((n) => n.name === 'node-2')!.reachable, 'node-2 is down');
    } finally {
      await ctl.stop();
    }
  });
});
