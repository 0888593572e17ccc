/**
 * For load balancers, at the root and without a token or a gate (doors.ts):
 *   GET /healthz   200 while the process answers
 *   GET /readyz    200 when this instance can route (a valid spec and a snapshot), else 503
 */
import { noStore, type AdminRoutes } from './context.js';

export const healthRoutes: AdminRoutes = (app, { backend }) => {
  app.get('/healthz', async (_req, reply) => noStore(reply).send({ ok: true }));
  app.get('/readyz', async (_req, reply) => {
    const s = backend.snapshot();
    const ready = backend.spec() !== null && s.appliedRevision !== null;
    return noStore(reply)
      .code(ready ? 200 : 503)
      .send({ ready, revision: s.appliedRevision, leader: s.leader, ...(ready ? {} : { reason: 'NO_VALID_SPEC' }) });
  });
};
