import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isLlmgwError } from '../../src/errors/catalogue.js';
import { parseProcNetTcp, parseSsListening, pickPort } from '../../src/nodes/ports.js';
import { hfToHttps, resolveModelSource } from '../../src/nodes/sources.js';

const PROC_NET_TCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 00000000:2712 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0
   2: 0100007F:2711 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:2713 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 100 0 0 10 0
`;

describe('ports', () => {
  test('listening ports from /proc/net/tcp and tcp6 (LISTEN only)', () => {
    assert.deepEqual([...parseProcNetTcp(PROC_NET_TCP)].sort(), [10000, 10002, 10003]);
  });
  test('ss -ltnH', () => {
    const ss = 'LISTEN 0 4096 127.0.0.1:10000 0.0.0.0:*\nLISTEN 0 128 [::]:10005 [::]:*\n';
    assert.deepEqual([...parseSsListening(ss)].sort(), [10000, 10005]);
  });
  test('pickPort skips used and avoided ports; NODE_NO_FREE_PORT when exhausted', () => {
    const range = { from: 10000, to: 10003 };
    const used = parseProcNetTcp(PROC_NET_TCP);
    assert.equal(pickPort('n', range, used), 10001);
    assert.throws(() => pickPort('n', range, used, new Set([10001])), (e: unknown) => isLlmgwError(e, 'NODE_NO_FREE_PORT') && /10000-10003/.test(e.message));
  });
});

describe('model sources', () => {
  test('hf:// → huggingface resolve URL, with and without revision', () => {
    assert.equal(hfToHttps('hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf'),
      'https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_k_m.gguf');
    assert.equal(hfToHttps('hf://org/repo/sub/dir/m.gguf@v1.0'), 'https://huggingface.co/org/repo/resolve/v1.0/sub/dir/m.gguf');
    assert.throws(() => hfToHttps('hf://org/m.gguf'));
    assert.throws(() => hfToHttps('hf://org/repo/../x.gguf'));
  });
  test('file:// and https://', () => {
    assert.deepEqual(resolveModelSource('file:///models/a%20b.gguf'), { kind: 'file', path: '/models/a b.gguf' });
    assert.deepEqual(resolveModelSource('https://example.com/m.gguf'), { kind: 'url', url: 'https://example.com/m.gguf' });
    assert.throws(() => resolveModelSource('file://otherhost/m.gguf'));
    assert.throws(() => resolveModelSource('ftp://x/m.gguf'));
  });
});
