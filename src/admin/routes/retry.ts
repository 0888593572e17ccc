/** POST /models/:name/retry: unpark a model or clear its backoff; answers after the pass that handled it. */
import type { RetryJson } from '../../wire/shape.js';
import { nameParams, noStore, type AdminRoutes } from './context.js';

export const retryRoutes: AdminRoutes = (api, { backend, canonicalModel, log }) => {
  api.post<{ Params: { name: string } }>('/models/:name/retry', { schema: { params: nameParams } }, async (req, reply) => {
    const model = canonicalModel(req.params.name);
    const r = await backend.retry(model);
    const after = backend.snapshot().models.find((m) => m.name === r.model) ?? null;
    const message = r.outcome === 'unparked' ? `${r.model}: unparked; it will be started again` : `${r.model}: not parked; backoff cleared`;
    log?.info({ model: r.model, outcome: r.outcome }, 'admin: retry');
    const body: RetryJson = { model: r.model, outcome: r.outcome, phase: after?.phase ?? null, message };
    return noStore(reply).send(body);
  });
};
