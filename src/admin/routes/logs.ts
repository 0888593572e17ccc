/** GET /replicas/:id/logs?lines=N: a replica's log tail (at most the limits' maxLogLines). */
import type { LogsJson } from '../../wire/shape.js';
import { MAX_NAME, noStore, type AdminRoutes } from './context.js';

export const logRoutes: AdminRoutes = (api, { backend, limits }) => {
  api.get<{ Params: { id: string }; Querystring: { lines: number } }>(
    '/replicas/:id/logs',
    {
      schema: {
        params: { type: 'object', properties: { id: { type: 'string', minLength: 1, maxLength: MAX_NAME } } },
        querystring: { type: 'object', properties: { lines: { type: 'integer', minimum: 1, maximum: limits.maxLogLines, default: 100 } }, additionalProperties: false },
      },
    },
    async (req, reply) => {
      const text = await backend.logs(req.params.id, req.query.lines);
      const body: LogsJson = { replica: req.params.id, lines: req.query.lines, log: text };
      return noStore(reply).send(body);
    },
  );
};
