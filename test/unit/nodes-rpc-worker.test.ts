/**
 * RPC workers, the pure parts: which bind addresses are refused (rpc-server takes one IPv4 address;
 * never a wildcard), the /proc/net/tcp spelling of an address, rpc-server's argv, which cmake flags
 * turn RPC on, and the node's bind address (listen_address, else 127.0.0.1; a wildcard is
 * RPC_BIND_REFUSED before any script is rendered).
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { wantsRpc } from '../../src/nodes/ops/engine-build.js';
import { procNetTcpAddr, rpcBindRefusal, rpcWorkerArgs, rpcWorkerStartScript } from '../../src/nodes/ops/rpc-worker.js';
import { rpcBindHost } from '../../src/nodes/rpc-workers.js';
import { isCode } from '../harness/errors.js';

describe('rpc worker bind address', () => {
  const refused = ['0.0.0.0', '0.0.00.0', '::', '0:0:0:0:0:0:0:0', '[::]', '', 'node-a.lan', 'localhost', '10.0.0.256', '::1', 'fd00::5'];
  for (const h of refused) it(`refused: ${JSON.stringify(h)}`, () => assert.notEqual(rpcBindRefusal(h), null));
  for (const h of ['127.0.0.1', '127.0.0.2', '10.0.0.5', '192.168.1.20']) it(`allowed: ${h}`, () => assert.equal(rpcBindRefusal(h), null));

  it("the node's: listen_address, else 127.0.0.1 (never the replicas' 0.0.0.0 fallback); a wildcard is RPC_BIND_REFUSED", () => {
    assert.equal(rpcBindHost({ name: 'a' }), '127.0.0.1');
    assert.equal(rpcBindHost({ name: 'a', listenAddress: '10.0.0.5' }), '10.0.0.5');
    assert.throws(() => rpcBindHost({ name: 'a', listenAddress: '0.0.0.0' }), isCode('RPC_BIND_REFUSED', /node a: rpc worker: '0\.0\.0\.0' binds every interface/));
    const s = { dataDir: '/d', id: 'w1', port: 24000, engineBinary: '/e/llama-server', args: [], stateHead: '{"id":"w1"' };
    assert.throws(() => rpcWorkerStartScript({ ...s, host: '0.0.0.0' }), isCode('RPC_BIND_REFUSED'));
    assert.match(rpcWorkerStartScript({ ...s, host: '10.0.0.5' }), /grep -qi '\^0500000A:5DC0\$'/, 'waits for a listener on exactly 10.0.0.5:24000');
  });

  it('/proc/net/tcp spelling and argv', () => {
    assert.equal(procNetTcpAddr('127.0.0.1'), '0100007F');
    assert.equal(procNetTcpAddr('10.0.0.5'), '0500000A');
    assert.deepEqual(rpcWorkerArgs('10.0.0.5', 24000, null), ['--host', '10.0.0.5', '--port', '24000']);
    assert.deepEqual(rpcWorkerArgs('10.0.0.5', 24000, 4), ['--host', '10.0.0.5', '--port', '24000', '--threads', '4']);
  });
});

describe('cmake flags that turn RPC on', () => {
  const cases: [string[], boolean][] = [
    [['-DGGML_RPC=ON'], true], [['-DGGML_RPC:BOOL=ON'], true], [['-DLLAMA_RPC=1'], true], [['-DGGML_CUDA=ON', '-DGGML_RPC=on'], true],
    [[], false], [['-DGGML_RPC=OFF'], false], [['-DGGML_RPC_RDMA=ON'], false], [['-DGGML_CUDA=ON'], false],
  ];
  for (const [flags, want] of cases) it(`${JSON.stringify(flags)} → ${want}`, () => assert.equal(wantsRpc(flags), want));
});
