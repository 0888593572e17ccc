/**
 * The flags the documentation names are llmgw's: `serve`'s table in docs/commands.md ↔ SETTINGS
 * (flag, env var, config key); every flag of validate, plan and ctl is in its section there; and
 * every `--flag` in README.md and docs/ is one an llmgw command takes, or another tool's, named below.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { ctlUsage } from '../../src/cli/ctl.js';
import { planUsage } from '../../src/cli/plan.js';
import { serveUsage } from '../../src/cli/serve.js';
import { validateUsage } from '../../src/cli/validate.js';
import { SETTINGS } from '../../src/serve/config.js';
import { markdownPages, readPage, section, tableRows } from '../harness/markdown.js';

const PAGE = 'docs/commands.md';
const SERVE_FLAGS = '### Every flag';
const commands = readPage(PAGE);

/** Flags of other tools that the docs name, and whose they are. An entry the docs no longer use fails: remove it. */
const OTHER_TOOLS: Record<string, string> = {
  '--api-key': 'llama-server',
  '--cache-ram': 'llama-server',
  '--no-slots': 'llama-server',
  '--api-prefix': 'llama-server',
  '--device': 'llama-server',
  '--list-devices': 'llama-server',
  '--query-gpu': 'nvidia-smi',
  '--client-cert-auth': 'etcd',
  '--trusted-ca-file': 'etcd',
  '--max-request-bytes': 'etcd',
  '--max-txn-ops': 'etcd',
  '--auto-compaction-retention': 'etcd',
  '--quota-backend-bytes': 'etcd',
  '--first-parent': 'git log',
  '--paginate': 'gh api',
  '--jq': 'gh api',
  '--yes': 'npx',
  '--max-semi-space-size': 'node',
  '--heap-growing-percent': 'node',
  '--optimize-for-size': 'node',
  '--semi-space-growth-factor': 'node',
  '--min-semi-space-size': 'node',
  '--ignore-scripts': 'npm',
  '--rpc': 'llama-server',
};

const longFlags = (text: string): Set<string> => new Set([...text.matchAll(/(?<![\w-])--[a-z][a-z0-9-]*/g)].map((m) => m[0]));

describe('docs ↔ the flags llmgw takes', () => {
  it(`${PAGE}'s serve flag table lists every setting with its env var and config key, and nothing else`, () => {
    const rows = tableRows(section(commands, SERVE_FLAGS, PAGE));
    assert.deepEqual(rows[0], ['flag', 'env var', 'config key', 'what it sets']);
    const want = new Map<string, [string, string]>([
      ...Object.values(SETTINGS).map((s): [string, [string, string]] => [`\`--${s.flag}\``, [`\`${s.env}\``, `\`${s.key}\``]]),
      ['`--no-router-auth`', ['`LLMGW_NO_ROUTER_AUTH=1`', '`no_router_auth`']],
      ['`--no-admin-auth`', ['`LLMGW_NO_ADMIN_AUTH=1`', '`no_admin_auth`']],
      ['`--unsafe-listen-without-auth`', ['`LLMGW_UNSAFE_LISTEN_WITHOUT_AUTH=1`', '`unsafe_listen_without_auth`']],
    ]);
    const where = `${PAGE}, the table under "${SERVE_FLAGS}"`;
    const seen = new Set<string>();
    const problems: string[] = [];
    for (const [flag, env, key] of rows.slice(1)) {
      const w = want.get(flag!);
      if (!w) problems.push(`${where} lists ${flag}, which llmgw serve does not take: remove the row`);
      else if (env !== w[0] || key !== w[1]) problems.push(`${where}: ${flag} has | ${env} | ${key} |, src/serve/config.ts says | ${w[0]} | ${w[1]} |`);
      if (seen.has(flag!)) problems.push(`${where} lists ${flag} twice`);
      seen.add(flag!);
    }
    for (const [flag, [env, key]] of want) if (!seen.has(flag)) problems.push(`${flag} is missing: add to ${where}:\n| ${flag} | ${env} | ${key} | WHAT IT SETS |`);
    assert.ok(want.size >= 30, `${want.size} serve settings`);
    assert.deepEqual(problems, []);
  });

  for (const [name, usage] of [['validate', validateUsage], ['plan', planUsage], ['ctl', ctlUsage]] as const) {
    it(`every flag of llmgw ${name} is in ${PAGE} under "## llmgw ${name}"`, () => {
      const documented = longFlags(section(commands, `## llmgw ${name}`, PAGE));
      const flags = [...longFlags(usage)].filter((f) => f !== '--help');
      assert.ok(flags.length >= 2, `llmgw ${name} --help names ${flags.length} flags`);
      const missing = flags.filter((f) => !documented.has(f));
      assert.deepEqual(missing, [], `flags of llmgw ${name} that ${PAGE} does not mention under "## llmgw ${name}": add them`);
    });
  }

  it('every --flag in README.md and docs/ is one llmgw takes, or another tool\'s (OTHER_TOOLS)', () => {
    const ours = new Set([...[validateUsage, planUsage, ctlUsage, serveUsage].flatMap((u) => [...longFlags(u)]), '--config', '--help', '--version']); // llmgw [COMMAND] --help, llmgw --version
    const used = new Set<string>();
    const problems: string[] = [];
    for (const page of markdownPages()) {
      readPage(page).split('\n').forEach((line, i) => {
        for (const f of longFlags(line)) {
          used.add(f);
          if (!ours.has(f) && !Object.hasOwn(OTHER_TOOLS, f)) problems.push(`${page}:${i + 1}: ${f} is no flag of llmgw (nor in OTHER_TOOLS, for another tool's)`);
        }
      });
    }
    for (const f of Object.keys(OTHER_TOOLS)) if (!used.has(f)) problems.push(`OTHER_TOOLS names ${f}, which no page mentions any more: remove it`);
    for (const f of Object.keys(OTHER_TOOLS)) if (ours.has(f)) problems.push(`OTHER_TOOLS names ${f}, which is an llmgw flag: remove it`);
    assert.ok(used.size >= 40, `${used.size} flags found`);
    assert.deepEqual(problems, []);
  });
});
