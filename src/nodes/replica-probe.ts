/**
 * What the driver asks a replica over HTTP (undici, the driver's agent): GET /health while it starts,
 * and whether what answers on its port is the replica it launched (GET /props to the engine key).
 */
import { type Agent, request } from '../util/undici-lean.js';

function bounded(ms: number, signal?: AbortSignal): AbortSignal {
  return signal ? AbortSignal.any([signal, AbortSignal.timeout(ms)]) : AbortSignal.timeout(ms);
}

/** The status of GET /health, or null when nothing answered in time. */
export async function healthStatus(endpoint: string, agent: Agent, timeoutMs: number, signal?: AbortSignal): Promise<number | null> {
  try {
    const res = await request(`${endpoint}/health`, { method: 'GET', dispatcher: agent, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, signal: bounded(timeoutMs, signal) });
    await res.body.dump();
    return res.statusCode;
  } catch {
    return null;
  }
}

/**
 * Whether what answers on the endpoint takes the engine key and serves this model file (GET /props's
 * model_path): a llama-server another controller started has another key, and none of this one's
 * replicas holds a port claimed for another (the start script claims it under the node's lock).
 */
export async function servesModel(endpoint: string, agent: Agent, timeoutMs: number, launched: { readonly apiKey: string; readonly modelPath: string }, signal?: AbortSignal): Promise<boolean> {
  try {
    const res = await request(`${endpoint}/props`, {
      method: 'GET', headers: { authorization: `Bearer ${launched.apiKey}` }, dispatcher: agent, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, signal: bounded(timeoutMs, signal),
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return false;
    }
    const props = (await res.body.json()) as { model_path?: unknown };
    return props.model_path === launched.modelPath;
  } catch {
    return false;
  }
}
