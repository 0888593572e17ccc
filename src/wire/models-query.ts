/**
 * Which models a `GET /admin/v1/models` answer lists: by phase, by a name glob, a page at a time
 * (sorted by name; `after` is the last name of the previous page). Pure: the admin route validates
 * the query, this picks from the snapshot.
 */
import type { ModelPhase, ModelView } from '../reconciler/view.js';

export interface ModelsQuery {
  readonly phases?: readonly ModelPhase[];
  /** A glob over model names and aliases: `*` any run of characters, `?` one character. */
  readonly name?: string;
  /** At most this many models (default: all). */
  readonly limit?: number;
  /** Models whose name sorts after this one (the `next` of the previous page). */
  readonly after?: string;
}

export interface ModelsPage {
  readonly models: readonly ModelView[];
  /** How many models match the phase and name filters, over all pages. */
  readonly total: number;
  /** The `after` of the next page, or null on the last one. */
  readonly next: string | null;
}

/** A glob as an anchored regular expression (every other character literal). */
export function globRegExp(glob: string): RegExp {
  const body = [...glob].map((c) => (c === '*' ? '.*' : c === '?' ? '.' : c.replace(/[\\^$.|+()[\]{}]/g, '\\$&'))).join('');
  return new RegExp(`^${body}$`);
}

export function pickModels(models: readonly ModelView[], q: ModelsQuery): ModelsPage {
  const phases = q.phases && q.phases.length > 0 ? new Set(q.phases) : null;
  const re = q.name !== undefined ? globRegExp(q.name) : null;
  const matching = models
    .filter((m) => (!phases || phases.has(m.phase)) && (!re || re.test(m.name) || m.spec.aliases.some((a) => re.test(a))))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const from = q.after === undefined ? 0 : matching.findIndex((m) => m.name > q.after!);
  const rest = from < 0 ? [] : matching.slice(from);
  const page = q.limit === undefined ? rest : rest.slice(0, q.limit);
  return { models: page, total: matching.length, next: page.length < rest.length ? page[page.length - 1]!.name : null };
}
