/**
 * A stand-in controller process for the adoption test (nodes-driver-adoption.test.ts): opens an ssh
 * driver per node, starts one replica on each, waits until both are ready, prints
 * `READY {"replicas":[{node,id,pid,port}…]}` and then idles until it is killed (SIGKILL, by the test).
 *
 * Input: env LLMGW_CHILD_INPUT = JSON { nodes: [{ spec: NodeSpec, secretsDir }], binary, modelPath, apiKey, profile }.
 */
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import { openShell } from '../../src/nodes/transport.js';
import type { NodeSpec, ProfileSpec } from '../../src/fleet-spec/types.js';

interface ChildInput {
  readonly nodes: { readonly spec: NodeSpec; readonly secretsDir: string }[];
  readonly binary: string;
  readonly modelPath: string;
  readonly apiKey: string;
  readonly profile: ProfileSpec;
}

async function main(): Promise<void> {
  const input = JSON.parse(process.env['LLMGW_CHILD_INPUT'] ?? '') as ChildInput;
  const out: { node: string; id: string; pid: number; port: number }[] = [];
  const drivers = input.nodes.map((n) => new ShellNodeDriver(n.spec, openShell(n.spec, { secretsDir: n.secretsDir })));
  await Promise.all(drivers.map(async (d, i) => {
    const id = `adopt-${i}-${process.pid}`;
    const h = await d.startReplica({ id, model: 'tiny', digest: `digest-${i}`, modelPath: input.modelPath, binary: input.binary, profile: input.profile, apiKey: input.apiKey });
    await d.waitReady(id, { timeoutMs: 60_000 });
    out.push({ node: d.node, id, pid: h.pid, port: h.port });
  }));
  process.stdout.write(`READY ${JSON.stringify({ replicas: out })}\n`);
  setInterval(() => {}, 60_000); // the ssh connections stay open until we are killed
}

main().catch((e: unknown) => {
  process.stderr.write(`child failed: ${e instanceof Error ? e.stack ?? e.message : String(e)}\n`);
  process.exit(1);
});
