/**
 * A model's rollout on the admin API (#34):
 *   GET  /models/:name/rollout          the rollout (phase, both revisions, step and share, time left,
 *                                       both arms' live figures, the verdict), or null when none runs
 *   POST /models/:name/rollout/promote  the revision under test takes the model (its checks or the rest
 *                                       of its canary skipped)
 *   POST /models/:name/rollout/abort    it is rolled back (ROLLOUT_ABORTED); the stable revision serves
 * An override answers what it did (promoted, aborted, or already: nothing to do) and the rollout after
 * it, once the pass that acts on it has run. Body (optional): `{ "by": "who" }`, said in the verdict
 * and the log (`llmgw ctl` sends its user and host); else "the admin API". A model without a rollout:
 * 409 ROLLOUT_NONE; an unknown one: 404 NOT_FOUND.
 */
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { rolloutJson, type RolloutOneJson, type RolloutOverrideJson } from '../../wire/shape.js';
import type { AdminBackend, RolloutOverridden, RolloutOverride } from '../backend.js';
import { nameParams, type AdminRoutes } from './context.js';

/** Longest `by` an override may carry. */
const MAX_BY = 120;

export interface RolloutRoutesDeps {
  readonly backend: AdminBackend;
  /** A model name or alias → its canonical name; throws NO_VALID_SPEC / NOT_FOUND. */
  readonly canonicalModel: (name: string) => string;
  readonly log: FastifyBaseLogger | undefined;
}

/** What an override did, in a sentence. */
export function overrideMessage(o: RolloutOverridden, how: RolloutOverride): string {
  const rev = o.rollout.canaryDigest.slice(0, 12);
  const stable = o.rollout.stableDigest.slice(0, 12);
  if (o.outcome === 'promoted') return `${o.model}: revision ${rev} promoted; it replaces ${stable} replica by replica, surge-first`;
  if (o.outcome === 'aborted') return `${o.model}: rollout of revision ${rev} aborted; ${stable} serves, and ${rev} stays held until its definition changes or \`llmgw ctl retry ${o.model}\``;
  const was = o.rollout.phase === 'promoted' ? 'promoted' : 'rolled back';
  const undo = how === 'abort' && o.rollout.phase === 'promoted' ? ' (to go back, push the old definition)' : '';
  return `${o.model}: the rollout of revision ${rev} was ${was} already; nothing changed${undo}`;
}

export const rolloutRoutes: AdminRoutes = (api, ctx) => registerRolloutRoutes(api, ctx);

export function registerRolloutRoutes(api: FastifyInstance, d: RolloutRoutesDeps): void {
  const params = nameParams;

  api.get<{ Params: { name: string } }>('/models/:name/rollout', { schema: { params } }, async (req, reply) => {
    const model = d.canonicalModel(req.params.name);
    const s = d.backend.snapshot();
    const spec = d.backend.spec()?.models[model];
    const m = s.models.find((x) => x.name === model);
    const body: RolloutOneJson = {
      at: new Date(s.at).toISOString(),
      model,
      digest: m?.spec.digest ?? spec?.digest ?? '',
      rollout: m?.rollout ? rolloutJson(m.rollout, model, m.spec.rollout?.canary ?? null) : null,
    };
    return reply.header('cache-control', 'no-store').send(body);
  });

  for (const how of ['promote', 'abort'] as const) {
    api.post<{ Params: { name: string }; Body: { by?: string } | undefined }>(
      `/models/:name/rollout/${how}`,
      {
        schema: {
          params,
          // no body, or `{ "by": "…" }`: printable, bounded
          body: { type: ['object', 'null'], properties: { by: { type: 'string', minLength: 1, maxLength: MAX_BY, pattern: '^[^\\u0000-\\u001f\\u007f]+$' } }, additionalProperties: false },
        },
      },
      async (req, reply) => {
        const model = d.canonicalModel(req.params.name);
        const by = req.body?.by ?? 'the admin API';
        const o = await d.backend.overrideRollout(model, how, by);
        d.log?.info({ model: o.model, how, by, outcome: o.outcome, digest: o.rollout.canaryDigest, phase: o.rollout.phase }, `admin: rollout ${how}`);
        const canary = d.backend.spec()?.models[o.model]?.rollout?.canary ?? null;
        const body: RolloutOverrideJson = { model: o.model, outcome: o.outcome, rollout: rolloutJson(o.rollout, o.model, canary), message: overrideMessage(o, how) };
        return reply.header('cache-control', 'no-store').send(body);
      },
    );
  }
}
