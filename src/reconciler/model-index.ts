/** A snapshot's models by name, indexed once per snapshot (the router asks per request). */
import type { FleetSnapshot, ModelView } from './view.js';

export class ModelIndex {
  private index: { of: readonly ModelView[]; byName: Map<string, ModelView> } | null = null;

  get(s: FleetSnapshot, name: string): ModelView | null {
    if (this.index?.of !== s.models) this.index = { of: s.models, byName: new Map(s.models.map((m) => [m.name, m])) };
    return this.index.byName.get(name) ?? null;
  }
}
