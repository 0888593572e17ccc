/**
 * llmgw as a service: deploy/llmgw.service passes `systemd-analyze verify`, and the unit, its
 * config file deploy/llmgw.yaml and docs/deploy.md say the same thing. The unit's ExecStart is
 * parsed as llmgw serve parses it (every flag one of src/serve/config.ts SETTINGS) and resolved
 * with the config file through the real resolveConfig; its directories, credential and stop
 * timeout are checked against that resolved config; every `Option=value` docs/deploy.md quotes is
 * in the unit, and every option the page says is left out is not.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { readConfigFile, resolveConfig, SETTINGS, type SettingName } from '../../src/serve/config.js';
import { parseDuration } from '../../src/fleet-spec/units.js';
import { repoRoot } from '../harness/paths.js';

const UNIT = 'deploy/llmgw.service';
const CONFIG = 'deploy/llmgw.yaml';
const DOC = 'docs/deploy.md';

/** A unit file as systemd reads it: section → option → every value given (in order). */
function parseUnit(text: string): Map<string, Map<string, string[]>> {
  const sections = new Map<string, Map<string, string[]>>();
  let current: Map<string, string[]> | null = null;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const head = /^\[(.+)\]$/.exec(line);
    if (head) {
      current = new Map();
      sections.set(head[1]!, current);
      continue;
    }
    const eq = line.indexOf('=');
    assert.ok(current && eq > 0, `${UNIT}: "${line}" is outside a section or not Option=value`);
    const [key, value] = [line.slice(0, eq), line.slice(eq + 1)];
    current.set(key, [...(current.get(key) ?? []), value]);
  }
  return sections;
}

const unitText = readFileSync(join(repoRoot, UNIT), 'utf8');
const unit = parseUnit(unitText);
const service = unit.get('Service')!;
const one = (key: string): string => {
  const v = service.get(key);
  assert.ok(v && v.length === 1, `${UNIT}: [Service] ${key}= is given ${v?.length ?? 0} times, once expected`);
  return v[0]!;
};
/** systemd's time span (45s, 1min 30s, 90): milliseconds. */
const timespan = (v: string): number => {
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  let ms = 0;
  for (const m of v.matchAll(/(\d+)\s*(ms|s|sec|min|m|h)\b/g)) ms += Number(m[1]) * { ms: 1, s: 1000, sec: 1000, min: 60_000, m: 60_000, h: 3_600_000 }[m[2] as 'ms']!;
  return ms;
};

/** ExecStart= split into argv (the unit uses no quoting) and its `llmgw serve` flags. */
const argv = one('ExecStart').split(/\s+/);
const serveAt = argv.indexOf('serve');
const flagByName = new Map<string, SettingName>(Object.entries(SETTINGS).map(([name, s]) => [s.flag, name as SettingName]));
const execFlags = new Map<string, string>();
for (let i = serveAt + 1; i < argv.length; i += 2) {
  assert.ok(argv[i]!.startsWith('--'), `${UNIT}: ExecStart: ${argv[i]} is no --flag`);
  execFlags.set(argv[i]!.slice(2), argv[i + 1]!);
}
const configPath = execFlags.get('config')!;
const workDir = one('WorkingDirectory');
const resolved = resolveConfig({
  flags: Object.fromEntries([...execFlags].filter(([f]) => f !== 'config').map(([f, v]) => [flagByName.get(f)!, v])),
  env: {},
  file: readConfigFile(join(repoRoot, CONFIG)),
  cwd: workDir,
});
const doc = readFileSync(join(repoRoot, DOC), 'utf8');

describe('deploy/llmgw.service', () => {
  it('passes `systemd-analyze verify`', () => {
    const r = spawnSync('systemd-analyze', ['verify', UNIT], { cwd: repoRoot, encoding: 'utf8' });
    assert.ifError(r.error);
    const about = `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => l.includes('llmgw.service'));
    assert.equal(r.status, 0, `${r.stdout}${r.stderr}`);
    assert.deepEqual(about, []);
  });

  it('runs `llmgw serve --config <the example config>` with flags llmgw serve takes', () => {
    assert.equal(argv.slice(0, serveAt + 1).join(' '), '/usr/bin/env llmgw serve', 'llmgw is looked up on systemd\'s PATH, wherever npm put it');
    for (const f of execFlags.keys()) assert.ok(f === 'config' || flagByName.has(f), `${UNIT}: ExecStart --${f} is no flag of llmgw serve`);
    assert.equal(configPath, '/etc/llmgw/llmgw.yaml');
    assert.match(unitText, new RegExp(`install .*${CONFIG.replace('.', '\\.')} ${configPath.replace(/\./g, '\\.')}`), 'the unit\'s header installs the example config where ExecStart reads it');
  });

  it('a dedicated user, and the state dir is its StateDirectory (the one writable place under ProtectSystem=strict)', () => {
    assert.notEqual(one('User'), 'root');
    assert.equal(one('User'), 'llmgw');
    assert.equal(one('ProtectSystem'), 'strict');
    assert.equal(resolved.stateDir, `/var/lib/${one('StateDirectory')}`);
    assert.equal(workDir, resolved.stateDir);
    assert.equal(one('StateDirectoryMode'), '0700');
    assert.equal(service.get('ReadWritePaths'), undefined, 'nothing else is writable: a local node\'s data_dir goes below the state dir');
    assert.equal(resolved.usageLog, null, 'a usage log would have to be below the state dir');
  });

  it('the admin token comes in as a credential, the other secrets as files under /etc/llmgw', () => {
    const creds = (service.get('LoadCredential') ?? []).map((v) => v.split(':') as [string, string]);
    assert.deepEqual(creds, [['admin-token', '/etc/llmgw/admin-token']]);
    assert.equal(execFlags.get('admin-token-file'), '%d/admin-token', 'read from $CREDENTIALS_DIRECTORY (%d)');
    assert.equal(resolved.admin.auth, true);
    assert.equal(resolved.secretsDir, '/etc/llmgw/secrets');
    assert.equal(resolved.fleet.tokenFile, '/etc/llmgw/git-token');
  });

  it('stops with SIGTERM and waits longer than --shutdown-grace; restarts on failure; leaves local replicas running', () => {
    assert.equal(one('KillSignal'), 'SIGTERM');
    const stopMs = timespan(one('TimeoutStopSec'));
    assert.ok(stopMs > resolved.shutdownGraceMs, `TimeoutStopSec ${stopMs} ms must be above the shutdown grace ${resolved.shutdownGraceMs} ms`);
    assert.equal(one('Restart'), 'on-failure');
    assert.equal(one('KillMode'), 'process');
  });

  it('hardening that still lets llmgw use the network and run llama-server', () => {
    assert.equal(one('NoNewPrivileges'), 'yes');
    assert.equal(one('CapabilityBoundingSet'), '');
    const families = one('RestrictAddressFamilies').split(/\s+/);
    for (const f of ['AF_INET', 'AF_INET6', 'AF_UNIX']) assert.ok(families.includes(f), `${f} is allowed (SSH, git, etcd, replicas)`);
    for (const off of ['MemoryDenyWriteExecute', 'PrivateDevices', 'PrivateNetwork', 'IPAddressDeny', 'ProcSubset', 'NoExecPaths']) {
      assert.equal(service.get(off), undefined, `${off} would break llmgw or its local replicas`);
    }
  });
});

describe('deploy/llmgw.yaml', () => {
  it('every key, commented-out ones included, is a setting of llmgw serve', () => {
    const text = readFileSync(join(repoRoot, CONFIG), 'utf8');
    const uncommented = text.split('\n').map((l) => l.replace(/^# ([a-z_]+: )/, '$1')).join('\n');
    const known = new Set<string>(Object.values(SETTINGS).map((s) => s.key));
    const keys = Object.keys(parseYaml(uncommented) as Record<string, unknown>);
    assert.ok(keys.length >= 10, keys.join(', '));
    for (const k of keys) assert.ok(known.has(k), `${CONFIG}: ${k} is no config key of llmgw serve`);
    assert.equal(resolved.shutdownGraceMs, parseDuration(String(readConfigFile(join(repoRoot, CONFIG)).shutdown_grace)));
  });
});

describe('docs/deploy.md ↔ the unit', () => {
  it('every Option=value the page quotes is the unit\'s', () => {
    const set = doc.replace(/Left out on purpose:[^]*?(\n\n|$)/, '');
    const quoted = [...set.matchAll(/`([A-Z][A-Za-z]+)=([^`]*)`/g)].map((m) => [m[1]!, m[2]!] as const);
    assert.ok(quoted.length >= 8, `only ${quoted.length} quoted`);
    for (const [key, value] of quoted) {
      if (value === '') continue; // `Option=` names the option in a sentence, it quotes no setting
      const have = [...unit.values()].flatMap((s) => s.get(key) ?? []);
      assert.ok(have.length > 0, `${DOC} quotes ${key}=, which ${UNIT} does not set`);
      const v = value.replace(/…$/, '');
      assert.ok(have.some((h) => (value.endsWith('…') ? h.startsWith(v) : h === v || h.split(/\s+/).join(' ') === v.split(/\s+/).join(' '))), `${DOC} quotes ${key}=${value}; ${UNIT} has ${have.join(' | ')}`);
    }
  });

  it('every option the page says is left out is not in the unit', () => {
    const para = /Left out on purpose:([^]*?)(\n\n|$)/.exec(doc);
    assert.ok(para, `${DOC} has a "Left out on purpose:" list`);
    const names = [...para[1]!.matchAll(/`([A-Z][A-Za-z]+)(=[^`]*)?`/g)].map((m) => m[1]!);
    assert.ok(names.length >= 4, names.join(', '));
    for (const n of names) assert.equal(service.get(n), undefined, `${DOC} says ${n} is left out, ${UNIT} sets it`);
  });

  it('the paths and flags the page names are the unit\'s and the config\'s', () => {
    const paths = new Set([resolved.stateDir, resolved.secretsDir, configPath, ...(service.get('LoadCredential') ?? []).map((v) => v.split(':')[1]!), resolved.fleet.tokenFile!]);
    for (const p of paths) assert.ok(doc.includes(`\`${p}`), `${DOC} does not name ${p}`);
    assert.ok(doc.includes(`--admin-token-file ${execFlags.get('admin-token-file')}`));
    const grace = /`--shutdown-grace` \(`shutdown_grace`, (\w+) by\s+default\)/.exec(doc);
    assert.ok(grace, `${DOC} names the shutdown grace's default`);
    assert.equal(parseDuration(grace[1]!), resolveConfig({ flags: {}, env: {}, file: { fleet: '/x' }, cwd: '/' }).shutdownGraceMs);
    for (const m of doc.matchAll(/`--([a-z-]+)`/g)) {
      if (['ignore-scripts', 'version'].includes(m[1]!)) continue; // npm's; llmgw --version
      assert.ok(flagByName.has(m[1]!) || m[1] === 'config', `${DOC}: --${m[1]} is no flag of llmgw serve`);
    }
  });
});
