/**
 * `rollout:` blocks (fleet.yaml's default, a model's own) and the shared checks in checks/ →
 * RolloutSpec per model, with every problem at once (file:line:col, field, hint). Pure but for
 * compiling a check's json_schema with ajv, loaded only when a check has one.
 *
 * A model's own block replaces fleet.yaml's whole; `rollout: {}` (no checks, no canary) is no
 * rollout, which is how a model turns the default off. The block is not part of the definition
 * digest: changing how a revision rolls out does not roll it out.
 */
import { createRequire } from 'node:module';
import type { Reasons } from '../errors/catalogue.js';
import type { CanarySpec, CheckExpect, RolloutCheck, RolloutSpec } from '../rollout/types.js';
import type { ParsedObject } from './load.js';
import type { Problem } from './types.js';
import { formatDuration, parseDuration } from './units.js';
import { problem } from './yaml.js';

type Raw = Record<string, unknown>;
type Path = (string | number)[];

/** What an omitted field of a check or a canary is (docs/rollouts.md lists them). */
export const ROLLOUT_DEFAULTS = {
  path: '/v1/chat/completions',
  status: 200,
  timeoutMs: 30_000,
  steps: [0.1, 0.5],
  intervalMs: 300_000,
  minRequests: 30,
  maxErrorRateIncrease: 0.02,
  maxTtftRatio: 1.5,
  maxTpotRatio: 1.5,
  onInconclusive: 'hold',
} as const;

export interface RolloutResult {
  readonly problems: Problem[];
  readonly warnings: Problem[];
  /** fleet.yaml's block (null: none, or it has problems). */
  readonly fleetDefault: RolloutSpec | null;
  /** The rollout in force per model; a model is absent when its block (or the default it takes) has problems. */
  readonly byModel: ReadonlyMap<string, RolloutSpec | null>;
}

const obj = (v: unknown): Raw => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Raw) : {});
const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const dur = (v: unknown, dflt: number): number => (v === undefined ? dflt : (parseDuration(v as string | number) ?? dflt));
/** "10%" → 0.1 (the schema allows only such strings). */
const percent = (v: unknown): number => Number(String(v).replace(/%$/, '')) / 100;
const pct = (f: number): string => `${+(f * 100).toFixed(4)}%`;

const require = createRequire(import.meta.url);
let ajv: import('ajv').Ajv | null = null;

/** Why a check's json_schema does not compile, or null when it does (ajv, strict mode off: unknown keywords are allowed). */
export function jsonSchemaProblem(schema: unknown): string | null {
  if (!ajv) {
    const { Ajv } = require('ajv') as typeof import('ajv');
    ajv = new Ajv({ allErrors: true, strict: false });
  }
  try {
    ajv.compile(schema as object);
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

function regexProblem(source: string): string | null {
  try {
    new RegExp(source);
    return null;
  } catch (e) {
    return (e instanceof Error ? e.message : String(e)).replace(/^Invalid regular expression: /, '');
  }
}

/**
 * `checkFiles`: the names of every checks/ file, read or not (one whose own problems kept it from
 * being read is reported at its file, not as a dangling `use:`).
 */
export function checkRollouts(objects: readonly ParsedObject[], checkFiles: ReadonlySet<string> = new Set()): RolloutResult {
  const problems: Problem[] = [];
  const warnings: Problem[] = [];
  const add = (o: ParsedObject, path: Path, code: keyof typeof Reasons, message: string, hint?: string, into: Problem[] = problems): void => {
    into.push(problem(o.parsed.file, o.parsed.position(path), path.length ? '/' + path.join('/') : '', code, message, hint));
  };

  /** A check's request, expectation and bounds: the check, or null when something is wrong (reported). */
  const readCheck = (o: ParsedObject, at: Path, raw: Raw, name: string): RolloutCheck | null => {
    const before = problems.length;
    const request = obj(raw.request);
    if (Object.hasOwn(request, 'model')) {
      add(o, [...at, 'request', 'model'], 'SPEC_INVALID_VALUE', `check "${name}" sets the request's model`, 'remove model: — llmgw sends the check to the revision under test itself');
    }
    const e = obj(raw.expect);
    for (const field of ['matches', 'not_matches'] as const) {
      const source = str(e[field]);
      const bad = source === null ? null : regexProblem(source);
      if (bad !== null) add(o, [...at, 'expect', field], 'SPEC_INVALID_VALUE', `expect.${field} of check "${name}" is not a valid regular expression: ${bad}`, 'a JavaScript regular expression, e.g. "\\\\b4\\\\b" (in YAML double quotes a backslash is written twice; in single quotes once)');
    }
    if (e.json_schema !== undefined) {
      const bad = jsonSchemaProblem(e.json_schema);
      if (bad !== null) add(o, [...at, 'expect', 'json_schema'], 'SPEC_INVALID_VALUE', `expect.json_schema of check "${name}" does not compile: ${bad}`, 'a JSON Schema (draft-07), e.g. { type: object, required: [answer] }');
    }
    const timeoutMs = dur(raw.timeout, ROLLOUT_DEFAULTS.timeoutMs);
    if (timeoutMs <= 0) add(o, [...at, 'timeout'], 'SPEC_INVALID_VALUE', `check "${name}" has a timeout of 0`, 'a check needs time to answer: e.g. 30s (the default)');
    const maxTtftMs = e.max_ttft === undefined ? null : dur(e.max_ttft, 0);
    if (maxTtftMs !== null && maxTtftMs <= 0) add(o, [...at, 'expect', 'max_ttft'], 'SPEC_INVALID_VALUE', `expect.max_ttft of check "${name}" is 0`, 'a bound on the first token such as 2s');
    else if (maxTtftMs !== null && timeoutMs > 0 && maxTtftMs > timeoutMs) {
      add(o, [...at, 'expect', 'max_ttft'], 'SPEC_INVALID_VALUE', `expect.max_ttft (${formatDuration(maxTtftMs)}) of check "${name}" is longer than its timeout (${formatDuration(timeoutMs)})`, 'make max_ttft at most the timeout, or raise timeout:');
    }
    if (problems.length > before) return null;
    const expect: CheckExpect = {
      status: typeof e.status === 'number' ? e.status : ROLLOUT_DEFAULTS.status,
      matches: str(e.matches),
      contains: str(e.contains),
      notMatches: str(e.not_matches),
      jsonSchema: e.json_schema === undefined ? null : obj(e.json_schema),
      maxTtftMs,
    };
    return { name, file: o.parsed.file, path: str(raw.path) ?? ROLLOUT_DEFAULTS.path, request, expect, timeoutMs };
  };

  // checks/<name>.yaml: each read once, whether or not a rollout uses it
  const shared = new Map<string, { o: ParsedObject; check: RolloutCheck | null }>();
  for (const o of objects) if (o.kind === 'check') shared.set(o.name, { o, check: readCheck(o, [], o.raw, o.name) });
  const used = new Set<string>();

  const readCanary = (o: ParsedObject, raw: Raw): CanarySpec | null => {
    const before = problems.length;
    const at: Path = ['rollout', 'canary'];
    const stepsRaw = Array.isArray(raw.steps) ? raw.steps : null;
    const steps = stepsRaw ? stepsRaw.map(percent) : [...ROLLOUT_DEFAULTS.steps];
    steps.forEach((s, i) => {
      if (s <= 0 || s > 1) add(o, [...at, 'steps', i], 'SPEC_INVALID_VALUE', `canary step ${pct(s)} is not above 0% and at most 100%`, 'each step is the share of the model\'s requests on the new revision, e.g. steps: [10%, 50%]');
      else if (i > 0 && s <= steps[i - 1]!) add(o, [...at, 'steps', i], 'SPEC_INVALID_VALUE', `canary step ${pct(s)} is not above the step before it (${pct(steps[i - 1]!)})`, 'steps grow strictly, e.g. [10%, 50%]; the revision is promoted after the last one passes');
    });
    const intervalMs = dur(raw.interval, ROLLOUT_DEFAULTS.intervalMs);
    if (intervalMs <= 0) add(o, [...at, 'interval'], 'SPEC_INVALID_VALUE', 'canary interval is 0', 'the time at each step, e.g. 5m (the default); it must see min_requests on both revisions');
    const minRequests = typeof raw.min_requests === 'number' ? raw.min_requests : ROLLOUT_DEFAULTS.minRequests;
    if (minRequests < 1) add(o, [...at, 'min_requests'], 'SPEC_INVALID_VALUE', `canary min_requests is ${minRequests}`, 'at least 1 (default 30): below it a step is inconclusive, so 0 would judge a step on no requests at all');
    const maxErrorRateIncrease = raw.max_error_rate_increase === undefined ? ROLLOUT_DEFAULTS.maxErrorRateIncrease : percent(raw.max_error_rate_increase);
    if (maxErrorRateIncrease > 1) add(o, [...at, 'max_error_rate_increase'], 'SPEC_INVALID_VALUE', `canary max_error_rate_increase ${pct(maxErrorRateIncrease)} is above 100%`, 'percentage points the canary\'s error rate may exceed the stable revision\'s, e.g. 2% (the default)');
    const ratio = (field: 'max_ttft_ratio' | 'max_tpot_ratio', dflt: number): number => {
      const v = typeof raw[field] === 'number' ? (raw[field] as number) : dflt;
      if (v < 1) add(o, [...at, field], 'SPEC_INVALID_VALUE', `canary ${field} ${v} is below 1: the canary would fail for being as fast as the stable revision`, `at least 1; ${dflt} (the default) lets the canary be up to ${Math.round((dflt - 1) * 100)}% slower at p95`);
      return v;
    };
    const maxTtftRatio = ratio('max_ttft_ratio', ROLLOUT_DEFAULTS.maxTtftRatio);
    const maxTpotRatio = ratio('max_tpot_ratio', ROLLOUT_DEFAULTS.maxTpotRatio);
    if (problems.length > before) return null;
    const onInconclusive = raw.on_inconclusive === 'rollback' ? 'rollback' : ROLLOUT_DEFAULTS.onInconclusive;
    return { steps, intervalMs, minRequests, maxErrorRateIncrease, maxTtftRatio, maxTpotRatio, onInconclusive };
  };

  /** A file's `rollout:` block: the spec (null when it is empty), or 'invalid' (problems reported). */
  const readBlock = (o: ParsedObject): RolloutSpec | null | 'invalid' => {
    const raw = obj(o.raw.rollout);
    const before = problems.length;
    const checks: RolloutCheck[] = [];
    const names = new Map<string, number>();
    const items = Array.isArray(raw.checks) ? (raw.checks as unknown[]) : [];
    items.forEach((item, i) => {
      const c = obj(item);
      const at: Path = ['rollout', 'checks', i];
      const use = str(c.use);
      let name: string;
      let check: RolloutCheck | null;
      if (use !== null) {
        name = use;
        used.add(use);
        const found = shared.get(use);
        if (!found && checkFiles.has(use)) return; // it has problems of its own, reported at its file: the block is not built
        if (!found) {
          const have = [...shared.keys()].sort();
          add(o, [...at, 'use'], 'SPEC_DANGLING_REF', `check "${use}" does not exist`, have.length ? `shared checks: ${have.slice(0, 12).join(', ')}${have.length > 12 ? ', …' : ''} (checks/<name>.yaml)` : `there are no shared checks; add checks/${use}.yaml, or write the check here with name: and request:`);
          return;
        }
        check = found.check; // its own problems are reported at its file
      } else {
        name = str(c.name) ?? '';
        check = readCheck(o, at, c, name);
      }
      const first = names.get(name);
      if (first !== undefined) {
        add(o, [...at, use !== null ? 'use' : 'name'], 'SPEC_DUPLICATE_NAME', `check "${name}" appears twice in this rollout (first on line ${o.parsed.position(['rollout', 'checks', first]).line})`, 'each check of a model has its own name: rename one, or drop the repeat');
        return;
      }
      names.set(name, i);
      if (check) checks.push(check);
    });
    const canary = raw.canary === undefined ? null : readCanary(o, obj(raw.canary));
    if (problems.length > before || checks.length !== items.length) return 'invalid';
    return checks.length === 0 && canary === null ? null : { checks, canary };
  };

  const fleetObj = objects.find((o) => o.kind === 'fleet');
  const fleetBlock = fleetObj && fleetObj.raw.rollout !== undefined ? readBlock(fleetObj) : null;
  const byModel = new Map<string, RolloutSpec | null>();
  for (const o of objects) {
    if (o.kind !== 'model') continue;
    const own = o.raw.rollout !== undefined ? readBlock(o) : fleetBlock;
    if (own !== 'invalid') byModel.set(o.name, own);
  }
  for (const [name, { o }] of shared) {
    if (!used.has(name)) add(o, [], 'SPEC_UNUSED_CHECK', `no rollout uses check "${name}"`, `name it in a model's (or fleet.yaml's) rollout.checks with \`- use: ${name}\`, or remove the file`, warnings);
  }
  return { problems, warnings, fleetDefault: fleetBlock === 'invalid' ? null : fleetBlock, byModel };
}
