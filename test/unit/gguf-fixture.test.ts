import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { gguf } from '@huggingface/gguf';
import {
  GGML_TYPE,
  GGUF_TYPE,
  GgufWriter,
  TINY_VOCAB_SIZE,
  f32ToF16Bits,
  writeTinyModel,
} from '../fixtures/gguf.js';

async function readGguf(path: string) {
  return gguf(path, { allowLocalFile: true });
}

describe('GGUF fixture', () => {
  let dir = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'llmgw-gguf-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('writes a small llama model quickly, with the metadata and tensors llama.cpp needs', async () => {
    // quickly in CPU time (this process, every thread): a shared machine's load stretches the wall clock, not this
    const c0 = process.cpuUsage();
    const m = await writeTinyModel(join(dir, 'tiny.gguf'));
    const cpu = process.cpuUsage(c0);
    const ms = (cpu.user + cpu.system) / 1000;
    assert.ok(ms < 1000, `took ${ms} ms of CPU`);
    assert.ok(m.bytes > 1_000_000 && m.bytes <= 8_000_000, `size ${m.bytes}`);
    assert.equal((await stat(m.path)).size, m.bytes);
    assert.equal(createHash('sha256').update(await readFile(m.path)).digest('hex'), m.sha256);

    const { metadata, tensorInfos } = await readGguf(m.path);
    const md = metadata as Record<string, unknown>;
    assert.equal(md['version'], 3);
    assert.equal(md['general.architecture'], 'llama');
    assert.equal(md['general.alignment'], 32);
    assert.equal(md['general.file_type'], 0);
    assert.equal(md['llama.context_length'], 2048);
    assert.equal(md['llama.embedding_length'], 128);
    assert.equal(md['llama.block_count'], 4);
    assert.equal(md['llama.feed_forward_length'], 256);
    assert.equal(md['llama.attention.head_count'], 4);
    assert.equal(md['llama.attention.head_count_kv'], 4);
    assert.equal(md['llama.rope.dimension_count'], 32);
    assert.ok(Math.abs((md['llama.attention.layer_norm_rms_epsilon'] as number) - 1e-5) < 1e-9);
    assert.equal(md['tokenizer.ggml.model'], 'llama');
    const tokens = md['tokenizer.ggml.tokens'] as string[];
    assert.equal(tokens.length, TINY_VOCAB_SIZE);
    assert.deepEqual(tokens.slice(0, 3), ['<unk>', '<s>', '</s>']);
    assert.equal(tokens[3 + 0x0a], '<0x0A>');
    assert.equal((md['tokenizer.ggml.scores'] as number[]).length, TINY_VOCAB_SIZE);
    assert.equal((md['tokenizer.ggml.token_type'] as number[]).length, TINY_VOCAB_SIZE);
    assert.match(md['tokenizer.chat_template'] as string, /im_start/);

    const names = tensorInfos.map((t) => t.name);
    assert.equal(names.length, 3 + 4 * 9);
    for (const n of ['token_embd.weight', 'output_norm.weight', 'output.weight']) assert.ok(names.includes(n), n);
    for (let l = 0; l < 4; l++) {
      for (const s of ['attn_norm', 'attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_norm', 'ffn_gate', 'ffn_up', 'ffn_down']) {
        assert.ok(names.includes(`blk.${l}.${s}.weight`), `blk.${l}.${s}.weight`);
      }
    }
    const byName = new Map(tensorInfos.map((t) => [t.name, t]));
    assert.deepEqual(byName.get('token_embd.weight')!.shape, [128n, BigInt(TINY_VOCAB_SIZE)]);
    assert.deepEqual(byName.get('blk.0.ffn_down.weight')!.shape, [256n, 128n]);
    assert.deepEqual(byName.get('blk.0.ffn_up.weight')!.shape, [128n, 256n]);
    // offsets: contiguous, each tensor padded to the alignment (what gguf.cpp checks)
    let expected = 0n;
    for (const t of tensorInfos) {
      assert.equal(t.offset, expected, t.name);
      const n = t.shape.reduce((a, b) => a * b, 1n) * (t.dtype === GGML_TYPE.F16 ? 2n : 4n);
      expected += ((n + 31n) / 32n) * 32n;
    }
  });

  test('same seed gives a byte-identical file; another seed or architecture does not', async () => {
    const a = await writeTinyModel(join(dir, 'a.gguf'), { seed: 7 });
    const b = await writeTinyModel(join(dir, 'b.gguf'), { seed: 7 });
    const c = await writeTinyModel(join(dir, 'c.gguf'), { seed: 8 });
    const d = await writeTinyModel(join(dir, 'd.gguf'), { seed: 7, architecture: 'kev' });
    assert.equal(a.sha256, b.sha256);
    assert.equal(a.bytes, b.bytes);
    assert.notEqual(a.sha256, c.sha256);
    assert.equal(a.bytes, c.bytes);
    assert.notEqual(a.sha256, d.sha256);
    // stable across runs and machines: pin the default model's digest
    const def = await writeTinyModel(join(dir, 'default.gguf'));
    assert.equal(def.sha256, 'b3114cc1b18d8440ff0e6e753c80f008450000cda118e73dc8b0be57b241989b');
  });

  test('an unknown architecture prefixes every model key with its name', async () => {
    const m = await writeTinyModel(join(dir, 'kev.gguf'), { architecture: 'kev' });
    const md = (await readGguf(m.path)).metadata as Record<string, unknown>;
    assert.equal(md['general.architecture'], 'kev');
    assert.equal(md['kev.block_count'], 4);
    assert.equal(md['kev.embedding_length'], 128);
    assert.deepEqual(Object.keys(md).filter((k) => k.startsWith('llama.')), []);
  });

  test('options change the shape; f16 halves the 2-D weights and keeps norms in f32', async () => {
    const m = await writeTinyModel(join(dir, 'opt.gguf'), { embeddingLength: 64, layers: 2, contextLength: 512, tensorType: 'f16' });
    const { metadata, tensorInfos } = await readGguf(m.path);
    const md = metadata as Record<string, unknown>;
    assert.equal(md['llama.embedding_length'], 64);
    assert.equal(md['llama.block_count'], 2);
    assert.equal(md['llama.context_length'], 512);
    assert.equal(md['llama.attention.head_count'], 2);
    assert.equal(md['general.file_type'], 1);
    assert.equal(tensorInfos.length, 3 + 2 * 9);
    for (const t of tensorInfos) assert.equal(t.dtype, t.shape.length === 1 ? GGML_TYPE.F32 : GGML_TYPE.F16, t.name);
    await assert.rejects(writeTinyModel(join(dir, 'x.gguf'), { embeddingLength: 100 }), /multiple of 32/);
  });

  test('f32 → f16 conversion', () => {
    assert.equal(f32ToF16Bits(0), 0x0000);
    assert.equal(f32ToF16Bits(-0), 0x8000);
    assert.equal(f32ToF16Bits(1), 0x3c00);
    assert.equal(f32ToF16Bits(-2), 0xc000);
    assert.equal(f32ToF16Bits(0.5), 0x3800);
    assert.equal(f32ToF16Bits(65504), 0x7bff);
    assert.equal(f32ToF16Bits(1e6), 0x7c00);
    assert.equal(f32ToF16Bits(Infinity), 0x7c00);
    assert.equal(f32ToF16Bits(-Infinity), 0xfc00);
    assert.equal(f32ToF16Bits(NaN) & 0x7c00, 0x7c00);
    assert.equal(f32ToF16Bits(2 ** -24), 0x0001); // smallest subnormal
    assert.equal(f32ToF16Bits(2 ** -14), 0x0400); // smallest normal
    assert.equal(f32ToF16Bits(1e-9), 0x0000);
    assert.equal(f32ToF16Bits(1 + 2 ** -11), 0x3c00); // tie → even
    assert.equal(f32ToF16Bits(1 + 3 * 2 ** -11), 0x3c02); // tie → even (up)
  });

  test('GgufWriter writes every value type readably and rejects duplicates', async () => {
    const w = new GgufWriter()
      .string('general.architecture', 'test')
      .u32('a.u32', 4_000_000_000)
      .i32('a.i32', -5)
      .u64('a.u64', 2n ** 40n)
      .f32('a.f32', 0.25)
      .bool('a.bool', true)
      .array('a.strs', GGUF_TYPE.STRING, ['x', 'yz', 'ünï'])
      .array('a.i32s', GGUF_TYPE.INT32, [1, -2, 3])
      .array('a.f32s', GGUF_TYPE.FLOAT32, [0.5, -1.5])
      .array('a.u8s', GGUF_TYPE.UINT8, [1, 255])
      .tensor('t', [2, 3], new Float32Array([1, 2, 3, 4, 5, 6]))
      .tensor('u', [4], new Float32Array([1, 2, 3, 4]), GGML_TYPE.F16);
    assert.throws(() => w.u32('a.u32', 1), /duplicate key/);
    assert.throws(() => w.tensor('t', [1], new Float32Array([1])), /duplicate tensor/);
    assert.throws(() => w.tensor('v', [2, 2], new Float32Array([1])), /dims say 4/);
    const buf = w.toBuffer();
    assert.equal(buf.length % 32, 0);
    const path = join(dir, 'kinds.gguf');
    await writeFile(path, buf);
    const { metadata, tensorInfos } = await readGguf(path);
    const md = metadata as Record<string, unknown>;
    assert.equal(md['a.u32'], 4_000_000_000);
    assert.equal(md['a.i32'], -5);
    assert.equal(md['a.u64'], 2n ** 40n);
    assert.equal(md['a.f32'], 0.25);
    assert.equal(md['a.bool'], true);
    assert.deepEqual(md['a.strs'], ['x', 'yz', 'ünï']);
    assert.deepEqual(md['a.i32s'], [1, -2, 3]);
    assert.deepEqual(md['a.f32s'], [0.5, -1.5]);
    assert.deepEqual(md['a.u8s'], [1, 255]);
    assert.deepEqual(
      tensorInfos.map((t) => [t.name, t.shape, t.dtype, t.offset]),
      [
        ['t', [2n, 3n], GGML_TYPE.F32, 0n],
        ['u', [4n], GGML_TYPE.F16, 32n],
      ],
    );
    // tensor data: 24 bytes of f32 padded to 32, then 4 halves
    const dataStart = buf.length - 64;
    assert.equal(buf.readFloatLE(dataStart + 20), 6);
    assert.equal(buf.readUInt16LE(dataStart + 32 + 6), 0x4400); // 4.0 in f16
  });
});
