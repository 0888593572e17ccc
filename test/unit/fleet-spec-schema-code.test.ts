/**
 * schemas/validators.generated.cjs (ajv's standalone code for the schemas, used instead of compiling
 * them at each start): it is current with schemas/*.schema.json, it is what the loader uses, and its
 * functions answer as the ones ajv compiles — the same verdict, errors (parentSchema and its x-hint
 * included) and defaults written — on every file of the minimal fleet and of every invalid case.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { validatorModuleCode } from '../../src/fleet-spec/schema-code.js';
import { GENERATED_VALIDATORS, compileValidators, generatedValidators, type SchemaKind } from '../../src/fleet-spec/schemas.js';
import { parseYaml } from '../../src/fleet-spec/yaml.js';
import { invalidCases } from '../fixtures/invalid-fleets.js';
import { minimalFleet, type FleetFilesMap } from '../harness/fleet.js';

const KIND_DIRS: Readonly<Record<string, SchemaKind>> = { nodes: 'node', engines: 'engine', profiles: 'profile', models: 'model', checks: 'check' };

function kindOf(path: string): SchemaKind | null {
  if (path === 'fleet.yaml') return 'fleet';
  if (path === 'access/keys.yaml') return 'keys';
  const [dir = '', base = ''] = path.split('/');
  return base.endsWith('.yaml') ? (KIND_DIRS[dir] ?? null) : null;
}

/** Every YAML mapping among the fleet files of the minimal fleet and the invalid cases, with its kind. */
function objects(): { label: string; kind: SchemaKind; value: Record<string, unknown> }[] {
  const maps: { name: string; files: FleetFilesMap }[] = [{ name: 'minimal', files: minimalFleet() }];
  for (const c of invalidCases) {
    const files = minimalFleet();
    c.edit?.(files);
    maps.push({ name: c.name, files });
  }
  const out: { label: string; kind: SchemaKind; value: Record<string, unknown> }[] = [];
  for (const { name, files } of maps) {
    for (const [path, text] of Object.entries(files)) {
      const kind = kindOf(path);
      if (!kind) continue;
      const r = parseYaml(path, text);
      if (!('parsed' in r)) continue;
      const v = r.parsed.value ?? {};
      if (typeof v === 'object' && !Array.isArray(v)) out.push({ label: `${name}: ${path}`, kind, value: v as Record<string, unknown> });
    }
  }
  return out;
}

describe('the generated schema validators', () => {
  it('are current: the file is what schema-code.ts writes from the schemas now', () => {
    assert.ok(
      readFileSync(GENERATED_VALIDATORS, 'utf8') === validatorModuleCode(),
      'schemas/validators.generated.cjs is stale: run `npx tsc -p tsconfig.json && node dist/src/fleet-spec/schema-code.js` and commit it',
    );
    assert.notEqual(generatedValidators(), null, 'the loader takes the generated validators (their hash matches the schemas)');
  });

  it('answer as ajv-compiled validators: verdict, errors and defaults, on every fixture file', () => {
    const generated = generatedValidators()!;
    const compiled = compileValidators();
    const all = objects();
    assert.ok(all.length > 300, `${all.length} objects checked`);
    let invalid = 0;
    for (const o of all) {
      const [a, b] = [structuredClone(o.value), structuredClone(o.value)];
      const okA = generated[o.kind](a);
      const okB = compiled[o.kind](b);
      assert.equal(okA, okB, o.label);
      assert.deepEqual(a, b, `${o.label}: defaults written`);
      assert.deepEqual(generated[o.kind].errors ?? null, compiled[o.kind].errors ?? null, `${o.label}: errors`);
      if (!okA) invalid++;
    }
    assert.ok(invalid >= 10, `${invalid} of the objects are schema-invalid, so errors were compared`);
  });
});
