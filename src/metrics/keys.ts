/**
 * Usage per API key (a UsageSink, src/router/usage.ts): requests by key name, model and status code,
 * and tokens by key name, model and kind (prompt evaluated, cached from the prompt cache, completion),
 * as the replicas reported them. The key label is the key's name in access/keys.yaml, never its value.
 * /metrics needs no token, so these series are opt-in (fleet.yaml `metrics_per_key: true`, #36 N14):
 * `enabled` is asked at each record, and nothing is recorded while it says no.
 */
import type { Registry } from 'prom-client';
import type { UsageRecord, UsageSink } from './ports.js';
import { CellCounter } from './cells.js';
import { MetricNames as N } from './names.js';

const MAX_LABEL = 128;
const label = (s: string): string => (s.length <= MAX_LABEL ? s : s.slice(0, MAX_LABEL));

export function createKeyMetrics(registry: Registry, enabled: () => boolean = () => true): UsageSink {
  const registers = [registry];
  const requests = new CellCounter({
    name: N.keyRequestsTotal,
    help: 'Requests per API key (its name in access/keys.yaml), model ("" when the request named no known model) and HTTP status code (499: the client went away).',
    labelNames: ['key', 'model', 'code'],
    registers,
  });
  const tokens = new CellCounter({
    name: N.keyTokensTotal,
    help: 'Tokens per API key (its name), model and kind: prompt (evaluated), cached (prompt tokens taken from the prompt cache), completion; as the replicas reported them.',
    labelNames: ['key', 'model', 'kind'],
    registers,
  });
  return {
    record(r: UsageRecord): void {
      if (!enabled()) return;
      const key = label(r.key);
      const model = label(r.model);
      requests.cell(key, model, String(r.status)).value++;
      const t = r.tokens;
      if (t.prompt > 0) tokens.cell(key, model, 'prompt').value += t.prompt;
      if (t.cached > 0) tokens.cell(key, model, 'cached').value += t.cached;
      if (t.completion > 0) tokens.cell(key, model, 'completion').value += t.completion;
    },
  };
}
