/**
 * The one catalogue of failure reasons. Each reason has a stable code (never change one that
 * shipped), the HTTP status it maps to on the admin API and router, whether retrying the same
 * thing can help, and a hint an operator can act on. The core matches on `code`, never on text.
 */
export interface Reason {
  readonly code: string;
  readonly http: number;
  readonly retryable: boolean;
  readonly hint: string;
}

function reason(code: string, http: number, retryable: boolean, hint: string): Reason {
  return Object.freeze({ code, http, retryable, hint });
}

export const Reasons = Object.freeze({
  // --- fleet spec (validation) ---
  SPEC_YAML_SYNTAX: reason('SPEC_YAML_SYNTAX', 422, false, 'Fix the YAML syntax at the given line and column.'),
  SPEC_YAML_DUPLICATE_KEY: reason('SPEC_YAML_DUPLICATE_KEY', 422, false, 'Remove one of the duplicated keys; YAML mappings need unique keys.'),
  SPEC_YAML_ALIAS_LIMIT: reason('SPEC_YAML_ALIAS_LIMIT', 422, false, 'Expand the YAML aliases by hand; fleet files may not use alias chains that blow up in size.'),
  SPEC_NOT_A_MAPPING: reason('SPEC_NOT_A_MAPPING', 422, false, 'The file must hold one YAML mapping (key: value pairs) at the top level.'),
  SPEC_FILE_TOO_LARGE: reason('SPEC_FILE_TOO_LARGE', 422, false, 'Fleet files are small YAML documents; keep each under the size limit.'),
  SPEC_NOT_UTF8: reason('SPEC_NOT_UTF8', 422, false, 'Save the file as UTF-8 text.'),
  SPEC_SYMLINK_ESCAPES: reason('SPEC_SYMLINK_ESCAPES', 422, false, 'Replace the symlink with the file itself; links may not point outside the fleet repo.'),
  SPEC_UNEXPECTED_FILE: reason('SPEC_UNEXPECTED_FILE', 422, false, 'Fleet objects are <kind>/<name>.yaml files; move or rename the file.'),
  SPEC_BAD_NAME: reason('SPEC_BAD_NAME', 422, false, 'Names are lowercase letters, digits, ".", "_" and "-", start and end with a letter or digit, at most 63 characters.'),
  SPEC_SCHEMA: reason('SPEC_SCHEMA', 422, false, 'Change the field to a value the schema allows (see schemas/).'),
  SPEC_DANGLING_REF: reason('SPEC_DANGLING_REF', 422, false, 'Point the reference at an object that exists in the fleet repo, or add that object.'),
  SPEC_DUPLICATE_NAME: reason('SPEC_DUPLICATE_NAME', 422, false, 'Model names and aliases share one namespace; rename one of them.'),
  SPEC_INVALID_VALUE: reason('SPEC_INVALID_VALUE', 422, false, 'Change the value to one within the allowed range.'),
  SPEC_MISSING_FLEET: reason('SPEC_MISSING_FLEET', 422, false, 'Add a fleet.yaml at the top of the fleet repo (an empty mapping `{}` takes all defaults).'),

  // --- git ---
  GIT_AUTH_FAILED: reason('GIT_AUTH_FAILED', 502, false, 'Check the git token (env var or file named in the controller config) and its read access to the fleet repo.'),
  GIT_UNREACHABLE: reason('GIT_UNREACHABLE', 502, true, 'Check that the fleet repo URL is right and the git server is reachable from the controller.'),
  GIT_REF_NOT_FOUND: reason('GIT_REF_NOT_FOUND', 404, false, 'Check the branch or revision name; it does not exist in the fleet repo.'),
  GIT_PUSH_REJECTED: reason('GIT_PUSH_REJECTED', 409, true, 'Someone else moved the branch; llmgw retries with the new tip.'),
  GIT_FAILED: reason('GIT_FAILED', 500, true, 'See the error detail; the git operation failed.'),
  GIT_PATH_NOT_FOUND: reason('GIT_PATH_NOT_FOUND', 404, false, 'The file does not exist (or is not a regular file) at that revision of the fleet repo.'),
  SPEC_REJECTED: reason('SPEC_REJECTED', 422, false, 'The fleet revision failed validation and was not applied; run `llmgw validate --rev REV` and fix the problems listed. The last valid revision stays in force.'),

  // --- nodes: transport (ssh / local) ---
  NODE_UNREACHABLE: reason('NODE_UNREACHABLE', 502, true, 'Check that the node is up and its sshd reachable at host:port from the controller.'),
  NODE_HOST_KEY_MISMATCH: reason('NODE_HOST_KEY_MISMATCH', 502, false, 'The node presented a host key other than the one pinned in nodes/<node>.yaml. Verify the machine; if the key legitimately changed, update host_key in a commit.'),
  NODE_AUTH_FAILED: reason('NODE_AUTH_FAILED', 502, false, 'Check the node\'s user and that the identity key named in nodes/<node>.yaml exists in the secrets dir and is authorized on the node.'),
  SECRET_NOT_FOUND: reason('SECRET_NOT_FOUND', 500, false, 'Put the named secret (file) into the controller\'s secrets dir; secrets never live in the fleet repo.'),
  SECRET_INVALID: reason('SECRET_INVALID', 500, false, 'The named secret in the controller\'s secrets dir is not in the form expected (a bearer token is one line of visible ASCII without spaces); fix the file.'),
  NODE_TIMEOUT: reason('NODE_TIMEOUT', 504, true, 'The operation on the node took longer than its timeout; check the node\'s load and network.'),
  NODE_COMMAND_FAILED: reason('NODE_COMMAND_FAILED', 500, true, 'A command on the node failed; see the detail (stderr) for why.'),
  NODE_NO_FREE_PORT: reason('NODE_NO_FREE_PORT', 503, true, 'Every port in the node\'s port range is in use; widen ports in nodes/<node>.yaml or stop replicas.'),
  NODE_DISK_FULL: reason('NODE_DISK_FULL', 507, false, 'Free disk space in the node\'s data dir or move data_dir to a larger disk.'),

  // --- nodes: engines ---
  ENGINE_CHECKSUM_MISMATCH: reason('ENGINE_CHECKSUM_MISMATCH', 502, false, 'The downloaded engine artifact does not match its sha256 in engines/<engine>.yaml; fix the url or the checksum.'),
  ENGINE_DOWNLOAD_FAILED: reason('ENGINE_DOWNLOAD_FAILED', 502, true, 'The engine artifact could not be downloaded; check the url and the node\'s network (or set fetch: controller).'),
  ENGINE_BUILD_FAILED: reason('ENGINE_BUILD_FAILED', 500, false, 'Building the engine on the node failed; see the build log tail in the detail.'),
  ENGINE_TOOL_MISSING: reason('ENGINE_TOOL_MISSING', 500, false, 'A tool the install needs (git, cmake, a C++ compiler, tar, curl) is missing on the node; install it there.'),
  ENGINE_NOT_FOUND: reason('ENGINE_NOT_FOUND', 500, false, 'The engine binary at the configured path does not exist or does not run `--version` on the node.'),
  ENGINE_ARTIFACT_INVALID: reason('ENGINE_ARTIFACT_INVALID', 502, false, 'The engine artifact does not unpack (tar.gz, tar or zip) or has no runnable binary at its `binary:` path; fix the archive or the path in engines/<engine>.yaml.'),

  // --- nodes: model files ---
  MODEL_CHECKSUM_MISMATCH: reason('MODEL_CHECKSUM_MISMATCH', 502, false, 'The model file does not match the sha256 in models/<model>.yaml; fix the source or the checksum.'),
  MODEL_DOWNLOAD_FAILED: reason('MODEL_DOWNLOAD_FAILED', 502, true, 'The model file could not be downloaded; check the source URL and the node\'s network.'),
  MODEL_FILE_NOT_FOUND: reason('MODEL_FILE_NOT_FOUND', 404, false, 'The file:// source does not exist on the node; copy it there or change the source.'),

  // --- replicas ---
  REPLICA_UNKNOWN_ARCHITECTURE: reason('REPLICA_UNKNOWN_ARCHITECTURE', 500, false, 'The engine version does not know this model\'s architecture; upgrade the profile\'s engine version or use another model file, then commit (or `llmgw ctl retry MODEL`).'),
  REPLICA_OUT_OF_MEMORY: reason('REPLICA_OUT_OF_MEMORY', 507, false, 'The replica ran out of memory while loading; lower ctx_size/parallel in the profile or set a larger memory: for the model so placement picks a bigger node.'),
  REPLICA_PORT_IN_USE: reason('REPLICA_PORT_IN_USE', 503, true, 'The replica\'s port was taken by another process; llmgw picks another port on the next attempt.'),
  REPLICA_MODEL_LOAD_FAILED: reason('REPLICA_MODEL_LOAD_FAILED', 500, false, 'The engine could not load the model file; check that the file is a valid GGUF for this engine version.'),
  REPLICA_START_TIMEOUT: reason('REPLICA_START_TIMEOUT', 504, true, 'The replica was not healthy within the profile\'s start_timeout; raise start_timeout or check the node\'s load.'),
  REPLICA_EXITED: reason('REPLICA_EXITED', 500, true, 'The replica process exited; see the log tail in the detail.'),
  REPLICA_UNHEALTHY: reason('REPLICA_UNHEALTHY', 504, true, 'The replica\'s process is alive but has not answered /health for longer than the profile\'s start_timeout (hung, or the node is overloaded); llmgw stopped it and starts a new one. Check the node\'s load and the replica\'s log (`llmgw ctl logs`).'),
  REPLICA_NOT_FOUND: reason('REPLICA_NOT_FOUND', 404, false, 'No replica with that id exists on the node.'),

  // --- controller ---
  INTERNAL: reason('INTERNAL', 500, true, 'An unexpected error inside llmgw; see the controller log for the stack and report it.'),
  NO_VALID_SPEC: reason('NO_VALID_SPEC', 503, true, 'No valid fleet revision has been applied yet; check `llmgw ctl status` for the sync error or the rejected revision.'),

  // --- router ---
  MODEL_NOT_FOUND: reason('MODEL_NOT_FOUND', 404, false, 'No model or alias of that name exists in the fleet spec; GET /v1/models lists the models your key may use.'),
  MODEL_FORBIDDEN: reason('MODEL_FORBIDDEN', 403, false, 'The API key may not use this model; add the model to the key\'s models in access/keys.yaml or use another key.'),
  MODEL_PARKED: reason('MODEL_PARKED', 503, false, 'The model is parked after repeated start failures and is not started again until its definition changes or a retry: fix the cause, then `llmgw ctl retry MODEL` or push a commit with the trailer `Llmgw-Retry: MODEL`.'),
  MODEL_UNPLACEABLE: reason('MODEL_UNPLACEABLE', 503, false, 'The model fits on no node (see the reason); free memory on a node, add a node, relax node_selector or lower the model\'s memory.'),
  MODEL_LOADING: reason('MODEL_LOADING', 503, true, 'The model is starting and was not ready within the activation window; retry after Retry-After seconds.'),
  MODEL_FAILING: reason('MODEL_FAILING', 503, true, 'The model\'s replicas failed to start and llmgw is backing off; it tries again after Retry-After seconds (see the last error).'),
  AUTH_MISSING: reason('AUTH_MISSING', 401, false, 'Send the API key as `Authorization: Bearer KEY` (or `x-api-key: KEY`).'),
  AUTH_INVALID: reason('AUTH_INVALID', 401, false, 'The API key is not one of the keys in access/keys.yaml (compared by sha256); check the key.'),
  BAD_REQUEST: reason('BAD_REQUEST', 400, false, 'The request body must be a JSON object; see the OpenAI API reference for the endpoint.'),
  BAD_JSON: reason('BAD_JSON', 400, false, 'The request body is not valid JSON; send `Content-Type: application/json` with a JSON object.'),
  MODEL_MISSING: reason('MODEL_MISSING', 400, false, 'Name the model in the request body\'s `model` field (a model name or alias from GET /v1/models).'),
  BODY_TOO_LARGE: reason('BODY_TOO_LARGE', 413, false, 'The request body exceeds the router\'s body size limit; send less, or raise the limit in the router configuration.'),
  ROUTE_NOT_FOUND: reason('ROUTE_NOT_FOUND', 404, false, 'The router serves POST /v1/chat/completions, /v1/completions, /v1/embeddings, GET /v1/models and other POST /v1/* requests that name a model.'),
  CONCURRENCY_LIMIT: reason('CONCURRENCY_LIMIT', 429, true, 'The model is at its max_concurrency; retry shortly, or raise max_concurrency / add replicas in models/<model>.yaml.'),
  UPSTREAM_CONNECT: reason('UPSTREAM_CONNECT', 502, true, 'No ready replica of the model accepted a connection; llmgw replaces failed replicas, retry shortly.'),
  UPSTREAM_FIRST_BYTE_TIMEOUT: reason('UPSTREAM_FIRST_BYTE_TIMEOUT', 504, true, 'The replica did not start answering within the first-byte timeout; the node may be overloaded, or raise the timeout (or stream the response).'),
  UPSTREAM_STALLED: reason('UPSTREAM_STALLED', 504, true, 'The replica stopped sending mid-response for longer than the stream idle timeout; check the node\'s load.'),
  UPSTREAM_FAILED: reason('UPSTREAM_FAILED', 502, true, 'The connection to the replica failed mid-request; retry.'),
  UPSTREAM_AUTH: reason('UPSTREAM_AUTH', 502, false, 'The replica refused llmgw\'s engine API key; the replica was not started by this controller or its key changed. Restart it (`llmgw ctl restart MODEL`).'),
  ROUTER_SHUTTING_DOWN: reason('ROUTER_SHUTTING_DOWN', 503, true, 'The router is shutting down; retry against another instance or after it restarts.'),

  // --- admin API ---
  ADMIN_AUTH_MISSING: reason('ADMIN_AUTH_MISSING', 401, false, 'Send the admin token as `Authorization: Bearer TOKEN`; `llmgw ctl` takes it from --token, LLMGW_ADMIN_TOKEN or its config file (~/.config/llmgw/ctl.json).'),
  ADMIN_AUTH_INVALID: reason('ADMIN_AUTH_INVALID', 401, false, 'The admin token does not match the controller\'s; use the token the controller was started with (its admin token file or LLMGW_ADMIN_TOKEN).'),
  WEBHOOK_SIGNATURE_INVALID: reason('WEBHOOK_SIGNATURE_INVALID', 401, false, 'Give the git server\'s webhook the same secret as the controller config; llmgw checks X-Hub-Signature-256 (GitHub), X-Gitea-Signature (Gitea, Forgejo) or X-Gitlab-Token (GitLab).'),
  WEBHOOK_NOT_CONFIGURED: reason('WEBHOOK_NOT_CONFIGURED', 404, false, 'The controller has no webhook secret configured; set one in the controller config to accept git push webhooks (polling still picks up commits).'),
  NOT_FOUND: reason('NOT_FOUND', 404, false, 'Nothing of that name exists in the fleet in force; `llmgw ctl models`, `llmgw ctl replicas` and `llmgw ctl nodes` list what does.'),
  ADMIN_ROUTE_NOT_FOUND: reason('ADMIN_ROUTE_NOT_FOUND', 404, false, 'The admin API serves /admin/v1/status, /models, /models/NAME, /models/NAME/retry, /replicas, /replicas/ID/logs, /nodes, /restart and /webhook; check the URL and method.'),
  ADMIN_BAD_REQUEST: reason('ADMIN_BAD_REQUEST', 400, false, 'Fix the request as the message says: JSON bodies and query parameters as the admin API documents them (`llmgw ctl --help` shows what the CLI sends).'),

  // --- CLI usage ---
  USAGE: reason('USAGE', 400, false, 'Run `llmgw help` for usage.'),
} as const);

export type ReasonCode = keyof typeof Reasons;

/** An error that carries a catalogue reason. Adapters translate library errors into these. */
export class LlmgwError extends Error {
  readonly reason: Reason;
  readonly detail: Readonly<Record<string, unknown>>;
  constructor(code: ReasonCode, message: string, detail: Record<string, unknown> = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LlmgwError';
    this.reason = Reasons[code];
    this.detail = Object.freeze({ ...detail });
  }
  get code(): ReasonCode {
    return this.reason.code as ReasonCode;
  }
}

/** A reason reference for status, logs and metrics: the stable code and a message. */
export function reasonOf(e: unknown): { code: string; message: string } {
  if (e instanceof LlmgwError) return { code: e.code, message: e.message };
  return { code: 'INTERNAL', message: e instanceof Error ? e.message : String(e) };
}

export function isLlmgwError(e: unknown, code?: ReasonCode): e is LlmgwError {
  return e instanceof LlmgwError && (code === undefined || e.code === code);
}
