/**
 * The POST routes the router forwards to a replica, pure: an allow-list, path and query as sent.
 *
 * llama-server serves more under /v1/ than the APIs llmgw offers, and some of it reaches other
 * clients' requests: `/v1/chat/completions/control` acts on a running completion named by its id
 * (`reasoning_end`), `/v1/streams/lookup` answers which of the conversation ids it is given have a
 * resumable stream running, anyone's (read from llama.cpp's tools/server/server.cpp and
 * server-stream.h, the build node-llama-cpp 3.21.1 ships; GET and DELETE /v1/stream, the rest of
 * that API, are no POST and never reach the proxy). A path is forwarded
 * only when it is one of FORWARDED_PATHS; everything else under POST /v1/ is 404 ROUTE_NOT_FOUND
 * before its body is read, and never reaches a replica.
 *
 * Left out on purpose: `/v1/audio/transcriptions` (a multipart body; the router reads JSON only),
 * `/v1/chat/completions/input_tokens` (llama-server's own, no OpenAI API), and every llama-server
 * route outside /v1/ (`/slots`, `/props`, `/infill`, `/tokenize`, …), which the router never forwards.
 */

/** The forwarded POST paths (without a query string). */
export const FORWARDED_PATHS: ReadonlySet<string> = new Set([
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/embeddings',
  '/v1/responses',
  '/v1/responses/input_tokens',
  '/v1/messages',
  '/v1/messages/count_tokens',
  '/v1/rerank',
  '/v1/reranking',
]);

/** True when a POST to `url` (a request's path and query) goes to a replica. */
export function forwardsPath(url: string): boolean {
  if (FORWARDED_PATHS.has(url)) return true;
  const q = url.indexOf('?');
  return q > 0 && FORWARDED_PATHS.has(url.slice(0, q));
}
