/**
 * Restarts (surge-first replacement):
 *   POST /restart[?wait=true&timeout=S]  body {replicas}|{model}|{all:true}
 *   GET  /restart?ids=a,b[&wait=true&timeout=S]  whether a restart is done (200 done, 202 not yet)
 * With `wait`, the request is held until the restart is done, the timeout (at most the limits'
 * maxWaitMs) passes, the client goes away or the app closes.
 */
import type { FastifyReply } from 'fastify';
import { LlmgwError } from '../../errors/catalogue.js';
import type { RestartJson } from '../../wire/shape.js';
import { MAX_NAME, noStore, type AdminRouteContext, type AdminRoutes } from './context.js';

const waitQuery = {
  wait: { type: 'boolean', default: false },
  /** seconds */
  timeout: { type: 'number', minimum: 0 },
} as const;

function waitUntil(cond: () => boolean, ms: number, pollMs: number, signal: AbortSignal): Promise<boolean> {
  if (cond()) return Promise.resolve(true);
  if (ms <= 0 || signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const deadline = Date.now() + ms;
    const finish = (v: boolean): void => {
      clearInterval(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(v);
    };
    const onAbort = (): void => finish(cond());
    const timer = setInterval(() => {
      if (cond()) finish(true);
      else if (Date.now() >= deadline) finish(false);
    }, Math.max(1, Math.min(pollMs, ms)));
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Aborts when the client goes away before the reply is sent. */
function clientGone(reply: FastifyReply): { signal: AbortSignal; dispose: () => void } {
  const ac = new AbortController();
  const onClose = (): void => {
    if (!reply.raw.writableEnded) ac.abort();
  };
  reply.raw.once('close', onClose);
  return { signal: ac.signal, dispose: () => reply.raw.removeListener('close', onClose) };
}

async function answerRestart(ctx: AdminRouteContext, reply: FastifyReply, ids: readonly string[], wait: boolean, timeoutS: number | undefined): Promise<FastifyReply> {
  const { backend, limits } = ctx;
  let done = backend.restartDone(ids);
  if (!done && wait) {
    const ms = Math.min(limits.maxWaitMs, timeoutS === undefined ? limits.defaultWaitMs : timeoutS * 1000);
    const gone = clientGone(reply);
    try {
      done = await waitUntil(() => backend.restartDone(ids), ms, limits.pollMs, AbortSignal.any([gone.signal, ctx.closing]));
    } finally {
      gone.dispose();
    }
  }
  const body: RestartJson = { ids, done };
  return noStore(reply).code(done ? 200 : 202).send(body);
}

export const restartRoutes: AdminRoutes = (api, ctx) => {
  const { backend, canonicalModel, log } = ctx;
  api.post<{ Body: { replicas?: string[]; model?: string; all?: boolean }; Querystring: { wait: boolean; timeout?: number } }>(
    '/restart',
    {
      schema: {
        body: {
          type: 'object',
          properties: {
            replicas: { type: 'array', minItems: 1, maxItems: 1000, items: { type: 'string', minLength: 1, maxLength: MAX_NAME } },
            model: { type: 'string', minLength: 1, maxLength: MAX_NAME },
            all: { type: 'boolean' },
          },
          additionalProperties: false,
        },
        querystring: { type: 'object', properties: waitQuery, additionalProperties: false },
      },
    },
    async (req, reply) => {
      const b = req.body;
      const given = [b.replicas !== undefined, b.model !== undefined, b.all === true].filter(Boolean).length;
      if (given !== 1) {
        throw new LlmgwError(
          'ADMIN_BAD_REQUEST',
          given === 0 ? 'Name what to restart: exactly one of "replicas" (ids), "model" or "all": true.' : 'Give exactly one of "replicas", "model" or "all": true, not several.',
        );
      }
      const request = b.replicas !== undefined ? { replicas: [...new Set(b.replicas)] } : b.model !== undefined ? { model: canonicalModel(b.model) } : { all: true };
      const ids = await backend.restart(request);
      log?.info({ request, ids }, 'admin: restart');
      return answerRestart(ctx, reply, ids, req.query.wait, req.query.timeout);
    },
  );

  api.get<{ Querystring: { ids: string; wait: boolean; timeout?: number } }>(
    '/restart',
    {
      schema: {
        querystring: { type: 'object', properties: { ids: { type: 'string', maxLength: 100_000 }, ...waitQuery }, required: ['ids'], additionalProperties: false },
      },
    },
    async (req, reply) => {
      const ids = req.query.ids.split(',').map((s) => s.trim()).filter((s) => s !== '');
      return answerRestart(ctx, reply, ids, req.query.wait, req.query.timeout);
    },
  );
};
