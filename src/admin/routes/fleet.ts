/**
 * The fleet as the admin API reads it (one snapshot each, shaped in wire/shape.ts):
 *   GET /status                fleet summary
 *   GET /models[?phase=a,b&name=GLOB&limit=N&after=NAME]  models by name (a page; total, next)
 *   GET /models/:name          one model (by name or alias)
 *   GET /replicas              every replica
 *   GET /nodes                 nodes: reachable, memory, engines
 */
import { LlmgwError } from '../../errors/catalogue.js';
import type { ModelPhase } from '../../reconciler/view.js';
import { MODEL_PHASES, modelJson, modelsJson, nodesJson, replicasJson, statusJson, type ModelOneJson, type ModelsJson, type NodesJson } from '../../wire/shape.js';
import { MAX_NAME, nameParams, noStore, type AdminRoutes } from './context.js';

const phaseList = `^(${MODEL_PHASES.join('|')})(,(${MODEL_PHASES.join('|')}))*$`;

export const fleetRoutes: AdminRoutes = (api, { backend, whatSpec }) => {
  api.get('/status', async (_req, reply) => noStore(reply).send(statusJson(backend.snapshot())));

  api.get<{ Querystring: { phase?: string; name?: string; limit?: number; after?: string } }>(
    '/models',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            phase: { type: 'string', pattern: phaseList },
            name: { type: 'string', minLength: 1, maxLength: MAX_NAME },
            limit: { type: 'integer', minimum: 1, maximum: 100_000 },
            after: { type: 'string', minLength: 1, maxLength: MAX_NAME },
          },
        },
      },
    },
    async (req, reply) => {
      const q = req.query;
      const body: ModelsJson = modelsJson(backend.snapshot(), {
        ...(q.phase ? { phases: q.phase.split(',') as ModelPhase[] } : {}),
        ...(q.name !== undefined ? { name: q.name } : {}),
        ...(q.limit !== undefined ? { limit: q.limit } : {}),
        ...(q.after !== undefined ? { after: q.after } : {}),
      });
      return noStore(reply).send(body);
    },
  );

  api.get<{ Params: { name: string } }>('/models/:name', { schema: { params: nameParams } }, async (req, reply) => {
    const s = backend.snapshot();
    const name = req.params.name;
    const canonical = backend.spec()?.modelNames[name] ?? name;
    const m = s.models.find((x) => x.name === canonical);
    if (!m) throw new LlmgwError('NOT_FOUND', `No model named "${name}" in ${whatSpec()}.`, { model: name });
    const body: ModelOneJson = { at: new Date(s.at).toISOString(), model: modelJson(m, s.appliedRevision, s.at) };
    return noStore(reply).send(body);
  });

  api.get('/replicas', async (_req, reply) => noStore(reply).send(replicasJson(backend.snapshot())));

  api.get('/nodes', async (_req, reply) => {
    const body: NodesJson = nodesJson(backend.snapshot(), backend.spec());
    return noStore(reply).send(body);
  });
};
