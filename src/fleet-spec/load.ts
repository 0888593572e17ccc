/**
 * Fleet repo → FleetSpec: read each file through FleetFiles, YAML → JSON Schema → semantic
 * checks. Every problem is reported at once, each with file:line:col, field and a hint; any
 * problem rejects the whole revision.
 */
import { isLlmgwError } from '../errors/catalogue.js';
import type { FleetEntry, FleetFiles } from './files.js';
import { isValidName } from './names.js';
import { validator, type SchemaKind } from './schemas.js';
import { schemaProblems } from './schema-problems.js';
import { decodeUtf8, parseYaml, problem, type ParsedYaml } from './yaml.js';
import {
  normalizeEngine,
  normalizeFleet,
  normalizeKeys,
  normalizeModelLimits,
  normalizeModel,
  normalizeNode,
  normalizeProfile,
  type ModelDraft,
} from './normalize.js';
import { checkSpec } from './semantic.js';
import type { FleetSpec, LoadResult, Problem } from './types.js';

/** Fleet files are small; anything larger is refused before it is read. */
export const MAX_FILE_BYTES = 256 * 1024;

const KIND_DIRS: Readonly<Record<string, SchemaKind>> = { nodes: 'node', engines: 'engine', profiles: 'profile', models: 'model', checks: 'check' };
/** File-level problems point at the file's start, so editors and GitHub annotations can show them. */
const FILE_START = { line: 1, col: 1 };
const IGNORED = /^(README(\.[a-z]+)?|\.gitkeep|\.keep|\.gitignore)$/i;
const YAML_EXT = /\.ya?ml$/;

interface FleetFile {
  readonly kind: SchemaKind;
  readonly name: string;
  readonly entry: FleetEntry;
}

export interface ParsedObject {
  readonly kind: SchemaKind;
  readonly name: string;
  readonly parsed: ParsedYaml;
  readonly raw: Record<string, unknown>;
}

function classify(entries: readonly FleetEntry[], problems: Problem[]): FleetFile[] {
  const out: FleetFile[] = [];
  const seen = new Map<string, string>();
  for (const entry of [...entries].sort((a, b) => a.path.localeCompare(b.path))) {
    const parts = entry.path.split('/');
    const unexpected = (why: string): void => {
      problems.push(problem(entry.path, FILE_START, '', 'SPEC_UNEXPECTED_FILE', why));
    };
    let kind: SchemaKind | null = null;
    let name = '';
    if (parts.length === 1) {
      const top = parts[0]!;
      if (top === 'fleet.yaml' || top === 'fleet.yml') {
        kind = 'fleet';
        name = 'fleet';
      } else if ((top in KIND_DIRS || top === 'access') && entry.kind !== 'dir') {
        unexpected(`is not a folder; it must be a folder of ${top === 'access' ? 'access files' : `${top.slice(0, -1)} files`}`);
        continue;
      } else continue; // README, CI config, … are not fleet objects
    } else if (parts.length === 2) {
      const [dir = '', base = ''] = parts;
      const dirKind = KIND_DIRS[dir];
      if (!dirKind && dir !== 'access') continue;
      if (IGNORED.test(base)) continue;
      if (dir === 'access') {
        if (base === 'keys.yaml' || base === 'keys.yml') {
          kind = 'keys';
          name = 'keys';
        } else {
          unexpected('is not a known access file (access/keys.yaml)');
          continue;
        }
      } else {
        if (!YAML_EXT.test(base)) {
          unexpected(entry.kind === 'dir' ? `is a folder; ${dir}/ holds one <name>.yaml file per object` : `is not a .yaml file; ${dir}/ holds one <name>.yaml file per object`);
          continue;
        }
        kind = dirKind!;
        name = base.replace(YAML_EXT, '');
        if (!isValidName(name)) {
          problems.push(problem(entry.path, FILE_START, '', 'SPEC_BAD_NAME', `${JSON.stringify(name)} is not a valid ${kind} name`));
          continue;
        }
      }
    } else continue;
    if (entry.kind !== 'file' && entry.kind !== 'symlink') {
      unexpected(`is a ${entry.kind === 'dir' ? 'folder' : 'special entry (submodule?)'}, not a YAML file`);
      continue;
    }
    const id = `${kind}/${name}`;
    const prev = seen.get(id);
    if (prev) {
      problems.push(problem(entry.path, FILE_START, '', 'SPEC_DUPLICATE_NAME', `defines the same ${kind} as ${prev}`));
      continue;
    }
    seen.set(id, entry.path);
    out.push({ kind, name, entry });
  }
  return out;
}

async function readOne(files: FleetFiles, f: FleetFile, problems: Problem[]): Promise<ParsedObject | null> {
  const path = f.entry.path;
  if (f.entry.kind === 'file' && f.entry.size > MAX_FILE_BYTES) {
    problems.push(problem(path, FILE_START, '', 'SPEC_FILE_TOO_LARGE', `file is ${f.entry.size} bytes; fleet files may be at most ${MAX_FILE_BYTES} bytes`));
    return null;
  }
  let bytes: Uint8Array;
  try {
    bytes = await files.read(path, MAX_FILE_BYTES);
  } catch (e) {
    if (isLlmgwError(e) && (e.code === 'SPEC_FILE_TOO_LARGE' || e.code === 'SPEC_SYMLINK_ESCAPES' || e.code === 'SPEC_UNEXPECTED_FILE')) {
      problems.push(problem(path, FILE_START, '', e.code, e.message));
      return null;
    }
    throw e;
  }
  const decoded = decodeUtf8(path, bytes);
  if ('problem' in decoded) {
    problems.push(decoded.problem);
    return null;
  }
  const res = parseYaml(path, decoded.text.replace(/^\uFEFF/, ''));
  if ('problems' in res) {
    problems.push(...res.problems);
    return null;
  }
  const { parsed } = res;
  let value = parsed.value;
  if (value === null || value === undefined) value = {}; // an empty file is an empty mapping
  if (typeof value !== 'object' || Array.isArray(value)) {
    problems.push(
      problem(path, parsed.position([]), '', 'SPEC_NOT_A_MAPPING', `the file holds ${Array.isArray(value) ? 'a list' : `a ${typeof value}`}, not a mapping of fields`),
    );
    return null;
  }
  const raw = value as Record<string, unknown>;
  const validate = validator(f.kind);
  if (!validate(raw)) {
    problems.push(...schemaProblems(parsed, validate.errors ?? []));
    return null;
  }
  return { kind: f.kind, name: f.name, parsed, raw };
}

export async function loadFleetSpec(files: FleetFiles, revision: string | null): Promise<LoadResult> {
  const problems: Problem[] = [];
  const entries = await files.list();
  const fleetFiles = classify(entries, problems);
  const objects = (await Promise.all(fleetFiles.map((f) => readOne(files, f, problems)))).filter((o): o is ParsedObject => o !== null);

  const fleetObj = objects.find((o) => o.kind === 'fleet');
  const hasFleetFile = fleetFiles.some((f) => f.kind === 'fleet');
  if (!hasFleetFile) {
    problems.push(problem('fleet.yaml', null, '', 'SPEC_MISSING_FLEET', `${files.label} has no fleet.yaml: it is not a fleet repo, or the file is missing`));
  }
  const byKind = (k: SchemaKind): ParsedObject[] => objects.filter((o) => o.kind === k);
  const nodes = byKind('node').map((o) => normalizeNode(o.name, o.parsed.file, o.raw));
  const engines = byKind('engine').map((o) => normalizeEngine(o.name, o.parsed.file, o.raw));
  const profiles = byKind('profile').map((o) => normalizeProfile(o.name, o.parsed.file, o.raw));
  const models: ModelDraft[] = byKind('model').map((o) => normalizeModel(o.name, o.parsed.file, o.raw));
  const keysObj = objects.find((o) => o.kind === 'keys');
  const keys = keysObj ? normalizeKeys(keysObj.raw) : [];
  const settings = normalizeFleet(fleetObj?.raw ?? (validateDefaults() as Record<string, unknown>));

  const modelLimits = keysObj ? normalizeModelLimits(keysObj.raw) : {};
  const checkFiles = new Set(fleetFiles.filter((f) => f.kind === 'check').map((f) => f.name));
  const checked = checkSpec({ settings, nodes, engines, profiles, models, keys, modelLimits, objects, checkFiles });
  problems.push(...checked.problems);
  if (problems.length > 0) return { ok: false, problems: sortProblems(problems), warnings: checked.warnings };

  const spec: FleetSpec = deepFreeze({
    revision,
    settings: { ...settings, rollout: checked.fleetRollout },
    nodes: Object.fromEntries(nodes.map((n) => [n.name, n])),
    engines: Object.fromEntries(engines.map((e) => [e.name, e])),
    profiles: Object.fromEntries(profiles.map((p) => [p.name, p])),
    models: Object.fromEntries(checked.models.map((m) => [m.name, m])),
    access: { keys: checked.keys, file: keysObj?.parsed.file ?? null, modelLimits: checked.modelLimits },
    modelNames: checked.modelNames,
  });
  return { ok: true, spec, warnings: checked.warnings };
}

function validateDefaults(): unknown {
  const v: Record<string, unknown> = {};
  validator('fleet')(v);
  return v;
}

function sortProblems(ps: Problem[]): Problem[] {
  return ps.sort((a, b) => a.file.localeCompare(b.file) || (a.line ?? 0) - (b.line ?? 0) || (a.col ?? 0) - (b.col ?? 0));
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o as Record<string, unknown>)) deepFreeze(v);
  }
  return o;
}
