/** Which address a node's replicas bind (llama-server --host): the node file's listen_address, or a default by transport and host. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import { replicaBindHost } from '../../src/nodes/shell-driver.js';
import { minimalFleet, tempFleet } from '../harness/fleet.js';

describe('replicaBindHost', () => {
  const cases: { name: string; node: Parameters<typeof replicaBindHost>[0]; bind: string }[] = [
    { name: 'ssh node with an IP host: that address', node: { transport: 'ssh', host: '10.0.0.1' }, bind: '10.0.0.1' },
    { name: 'ssh node with an IPv6 host: that address', node: { transport: 'ssh', host: 'fd00::1' }, bind: 'fd00::1' },
    { name: 'ssh node with a DNS host: every interface (the name may resolve to loopback on the node)', node: { transport: 'ssh', host: 'gpu-1.internal' }, bind: '0.0.0.0' },
    { name: 'ssh node with a DNS host and listen_address: that address', node: { transport: 'ssh', host: 'gpu-1.internal', listenAddress: '10.20.0.11' }, bind: '10.20.0.11' },
    { name: 'listen_address wins over an IP host (a NAT address the router uses, another on the node)', node: { transport: 'ssh', host: '192.0.2.7', listenAddress: '10.20.0.11' }, bind: '10.20.0.11' },
    { name: 'local node: loopback', node: { transport: 'local', host: '127.0.0.1' }, bind: '127.0.0.1' },
  ];
  for (const c of cases) it(c.name, () => assert.equal(replicaBindHost(c.node), c.bind));
});

describe('listen_address in a node file', () => {
  it('is read into the node spec; absent, the spec has none', async () => {
    const files = minimalFleet();
    files['nodes/cpu-01.yaml'] = files['nodes/cpu-01.yaml']!.replace('host: 10.0.0.1', 'host: cpu-01.internal\nlisten_address: 10.0.0.1');
    const f = tempFleet(files);
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), null);
      assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
      assert.equal(r.spec.nodes['cpu-01']!.listenAddress, '10.0.0.1');
      assert.equal(replicaBindHost(r.spec.nodes['cpu-01']!), '10.0.0.1');
      assert.equal(r.spec.nodes['cpu-02']!.listenAddress, undefined);
    } finally {
      f.cleanup();
    }
  });
});
