/**
 * The one catalogue of failure reasons. Each reason has a stable code (its key; never change one
 * that shipped), the HTTP status it maps to on the admin API and router, whether a client retrying
 * the same request can help (`retryable`), whether it counts toward parking when a replica start
 * fails with it (`counts`: the model's fault, not the node's or the controller's), the OpenAI
 * error `type`/`code` the router answers it with, and a hint an operator can act on. The core
 * matches on `code`, never on text.
 */
import { redactUrls } from '../util/redact-url.js';

export interface Reason {
  readonly code: string;
  readonly http: number;
  readonly retryable: boolean;
  /** A replica start failing with this reason counts toward parking the model. */
  readonly countsTowardParking: boolean;
  /** The node is at fault (its disk, its ports): the model is placed elsewhere for a while. */
  readonly avoidsNode: boolean;
  /** The OpenAI error envelope's `type` and `code` (router reasons only). Part of the API. */
  readonly openai: { readonly type: string; readonly code: string } | null;
  readonly hint: string;
}

interface ReasonDef {
  readonly http: number;
  readonly retryable: boolean;
  readonly counts: boolean;
  readonly avoidsNode?: boolean;
  readonly openai?: { readonly type: string; readonly code: string };
  readonly hint: string;
}

function catalogue<const T extends Record<string, ReasonDef>>(defs: T): { readonly [K in keyof T]: Reason } {
  const out: Record<string, Reason> = {};
  for (const [code, d] of Object.entries(defs)) {
    out[code] = Object.freeze({ code, http: d.http, retryable: d.retryable, countsTowardParking: d.counts, avoidsNode: d.avoidsNode ?? false, openai: d.openai ?? null, hint: d.hint });
  }
  return Object.freeze(out) as { readonly [K in keyof T]: Reason };
}

export const Reasons = catalogue({
  // --- fleet spec (validation) ---
  SPEC_YAML_SYNTAX: { http: 422, retryable: false, counts: false, hint: 'Fix the YAML syntax at the given line and column.' },
  SPEC_YAML_DUPLICATE_KEY: { http: 422, retryable: false, counts: false, hint: 'Remove one of the duplicated keys; YAML mappings need unique keys.' },
  SPEC_YAML_ALIAS_LIMIT: { http: 422, retryable: false, counts: false, hint: 'Expand the YAML aliases by hand; fleet files may not use alias chains that blow up in size.' },
  SPEC_NOT_A_MAPPING: { http: 422, retryable: false, counts: false, hint: 'The file must hold one YAML mapping (key: value pairs) at the top level.' },
  SPEC_FILE_TOO_LARGE: { http: 422, retryable: false, counts: false, hint: 'Fleet files are small YAML documents; keep each under the size limit.' },
  SPEC_NOT_UTF8: { http: 422, retryable: false, counts: false, hint: 'Save the file as UTF-8 text.' },
  SPEC_SYMLINK_ESCAPES: { http: 422, retryable: false, counts: false, hint: 'Replace the symlink with the file itself; links may not point outside the fleet repo.' },
  SPEC_UNEXPECTED_FILE: { http: 422, retryable: false, counts: false, hint: 'Fleet objects are <kind>/<name>.yaml files; move or rename the file.' },
  SPEC_BAD_NAME: { http: 422, retryable: false, counts: false, hint: 'Names are lowercase letters, digits, ".", "_" and "-", start and end with a letter or digit, at most 63 characters.' },
  SPEC_SCHEMA: { http: 422, retryable: false, counts: false, hint: 'Change the field to a value the schema allows (see schemas/).' },
  SPEC_DANGLING_REF: { http: 422, retryable: false, counts: false, hint: 'Point the reference at an object that exists in the fleet repo, or add that object.' },
  SPEC_DUPLICATE_NAME: { http: 422, retryable: false, counts: false, hint: 'Model names and aliases share one namespace; rename one of them.' },
  SPEC_INVALID_VALUE: { http: 422, retryable: false, counts: false, hint: 'Change the value to one within the allowed range.' },
  SPEC_MISSING_FLEET: { http: 422, retryable: false, counts: false, hint: 'Add a fleet.yaml at the top of the fleet repo (an empty mapping `{}` takes all defaults).' },
  SPEC_UNUSED_CHECK: { http: 422, retryable: false, counts: false, hint: 'A warning, not an error: no rollout names this checks/ file. Name it from a model\'s (or fleet.yaml\'s) rollout.checks with `- use: NAME`, or remove the file.' },
  SPEC_ENGINE_NO_RPC: { http: 422, retryable: false, counts: false, hint: 'placement: {spread: rpc} runs a model that fits on no single node as a llama.cpp RPC group, whose hosts run rpc-server: the profile\'s engine version must carry it. Build it with -DGGML_RPC=ON in its cmake_flags, set rpc: true on a version whose artifact or path carries rpc-server, or use spread: none.' },

  // --- git ---
  GIT_AUTH_FAILED: { http: 502, retryable: false, counts: false, hint: 'Check the git token (env var or file named in the controller config) and its read access to the fleet repo.' },
  GIT_UNREACHABLE: { http: 502, retryable: true, counts: false, hint: 'Check that the fleet repo URL is right and the git server is reachable from the controller.' },
  GIT_REF_NOT_FOUND: { http: 404, retryable: false, counts: false, hint: 'Check the branch or revision name; it does not exist in the fleet repo.' },
  GIT_PUSH_REJECTED: { http: 409, retryable: true, counts: false, hint: 'Someone else moved the branch; llmgw retries with the new tip.' },
  STATUS_EPOCH_STALE: { http: 409, retryable: false, counts: false, hint: 'A newer leader writes the status branch; this instance was deposed.' },
  STATUS_EPOCH_FORGED: { http: 409, retryable: false, counts: false, hint: 'A status-branch commit (named in the message) carries an Llmgw-Epoch above the epoch of the leader that holds the leader key (above etcd\'s own revision while none holds it): no leader of this etcd wrote it (someone who can push llmgw/status, or a commit from before an etcd restore). It fences nothing and the leader writes on; it is shown while it is on the branch\'s first-parent history. Find who pushed it and restrict push access to the status branch; to clear it, reset the branch to a commit before it (or delete the branch: the leader writes it afresh).' },
  ETCD_ENDPOINT_REFUSED: { http: 502, retryable: false, counts: false, hint: 'The snapshot published in etcd names a replica endpoint that is not its node\'s host and a port in that node\'s ports range; a standby does not route there. Someone other than the leader may be writing the etcd prefix: restrict write access to it.' },
  FORWARDED_REQUEST_REFUSED: { http: 400, retryable: false, counts: false, hint: 'A request under the etcd prefix\'s requests/ was unknown, malformed, or not attached to its sender\'s lease; the leader refused it without running it (one whose sender\'s lease was gone by its turn is logged at info: the sender gave up waiting). Someone other than an llmgw instance may be writing the etcd prefix: restrict write access to it.' },
  GIT_FAILED: { http: 500, retryable: true, counts: false, hint: 'See the error detail; the git operation failed.' },
  GIT_PATH_NOT_FOUND: { http: 404, retryable: false, counts: false, hint: 'The file does not exist (or is not a regular file) at that revision of the fleet repo.' },
  SPEC_REJECTED: { http: 422, retryable: false, counts: false, hint: 'The fleet revision failed validation and was not applied; run `llmgw validate --rev REV` and fix the problems listed. The last valid revision stays in force.' },

  // --- nodes: transport (ssh / local) ---
  NODE_UNREACHABLE: { http: 502, retryable: true, counts: false, hint: 'Check that the node is up and its sshd reachable at host:port from the controller.' },
  NODE_HOST_KEY_MISMATCH: { http: 502, retryable: false, counts: false, hint: 'The node presented a host key other than the one pinned in nodes/<node>.yaml. Verify the machine; if the key legitimately changed, update host_key in a commit.' },
  NODE_AUTH_FAILED: { http: 502, retryable: false, counts: false, hint: 'Check the node\'s user and that the identity key named in nodes/<node>.yaml exists in the secrets dir and is authorized on the node.' },
  SECRET_NOT_FOUND: { http: 500, retryable: false, counts: false, hint: 'Put the named secret (file) into the controller\'s secrets dir; secrets never live in the fleet repo.' },
  SECRET_INVALID: { http: 500, retryable: false, counts: false, hint: 'The named secret in the controller\'s secrets dir is not in the form expected (a bearer token is one line of visible ASCII without spaces); fix the file.' },
  SECRET_TOO_SHORT: { http: 500, retryable: false, counts: false, hint: 'An operator secret (admin token, webhook secret, engine key) must be at least 16 characters; put a longer random one in place (e.g. `openssl rand -base64 24`).' },
  NODE_TIMEOUT: { http: 504, retryable: true, counts: false, hint: 'The operation on the node took longer than its timeout; check the node\'s load and network.' },
  NODE_COMMAND_FAILED: { http: 500, retryable: true, counts: false, hint: 'A command on the node failed; see the detail (stderr) for why.' },
  NODE_NO_FREE_PORT: { http: 503, retryable: true, counts: false, avoidsNode: true, hint: 'Every port in the node\'s port range is in use; widen ports in nodes/<node>.yaml or stop replicas.' },
  NODE_DISK_FULL: { http: 507, retryable: false, counts: false, avoidsNode: true, hint: 'Free disk space in the node\'s data dir or move data_dir to a larger disk; meanwhile llmgw places the model on another node (it does not count toward parking).' },
  NODE_OWNED: { http: 409, retryable: false, counts: false, hint: 'Another controller owns this node (the message names it, its epoch and when it last renewed); this one does not act on it. Stop the other controller, or run them as one HA cluster with --etcd; its ownership expires ttl seconds (in the message) after its last renewal, then this controller takes the node over.' },
  NODE_FENCED: { http: 409, retryable: false, counts: false, hint: 'A newer leader of this controller\'s cluster (a higher epoch, named in the message) has acted on this node, so this instance is deposed and its action was refused; it resigns, and the current leader carries on. Nothing to do. An epoch above etcd\'s revision (an etcd restored from a backup) is not a newer leader: the leader takes such a node over by itself (NODE_EPOCH_FORGED), with no edit on the node.' },
  NODE_EPOCH_FORGED: { http: 409, retryable: false, counts: false, hint: 'A node\'s owner record of this cluster carried an epoch above etcd\'s current revision: not one this etcd made (etcd was restored from a backup, so its revisions went back, or someone wrote the record). It fences nothing: the leader took the node over at its own epoch and acts on. After a restore nothing is to do; otherwise find who can write <data dir>/.locks on the node.' },

  // --- nodes: engines ---
  ENGINE_CHECKSUM_MISMATCH: { http: 502, retryable: false, counts: true, hint: 'The downloaded engine artifact does not match its sha256 in engines/<engine>.yaml; fix the url or the checksum.' },
  ENGINE_DOWNLOAD_FAILED: { http: 502, retryable: true, counts: true, hint: 'The engine artifact could not be downloaded; check the url and the node\'s network (or set fetch: controller).' },
  ENGINE_BUILD_FAILED: { http: 500, retryable: false, counts: true, hint: 'Building the engine on the node failed; see the build log tail in the detail.' },
  ENGINE_TOOL_MISSING: { http: 500, retryable: false, counts: true, hint: 'A tool the install needs (git, cmake, a C++ compiler, tar, curl) is missing on the node; install it there.' },
  ENGINE_NOT_FOUND: { http: 500, retryable: false, counts: true, hint: 'The engine binary at the configured path does not exist or does not run `--version` on the node.' },
  ENGINE_ARTIFACT_INVALID: { http: 502, retryable: false, counts: true, hint: 'The engine artifact does not unpack (tar.gz, tar or zip) or has no runnable binary at its `binary:` path; fix the archive or the path in engines/<engine>.yaml.' },
  ENGINE_NO_RPC: { http: 500, retryable: false, counts: true, hint: 'The engine version has no rpc-server beside its llama-server, so it cannot run an RPC worker of a split model: build it with -DGGML_RPC=ON in cmake_flags (llmgw then builds and installs rpc-server too), or use an artifact that carries rpc-server (or ggml-rpc-server) beside llama-server.' },

  // --- nodes: model files ---
  MODEL_CHECKSUM_MISMATCH: { http: 502, retryable: false, counts: true, hint: 'The model file does not match the sha256 in models/<model>.yaml; fix the source or the checksum.' },
  MODEL_DOWNLOAD_FAILED: { http: 502, retryable: true, counts: true, hint: 'The model file could not be downloaded; check the source URL and the node\'s network.' },
  MODEL_FILE_NOT_FOUND: { http: 404, retryable: false, counts: true, hint: 'The file:// source does not exist on the node; copy it there or change the source.' },

  // --- replicas ---
  REPLICA_UNKNOWN_ARCHITECTURE: { http: 500, retryable: false, counts: true, hint: 'The engine version does not know this model\'s architecture; upgrade the profile\'s engine version or use another model file, then commit (or `llmgw ctl retry MODEL`).' },
  REPLICA_OUT_OF_MEMORY: { http: 507, retryable: false, counts: true, hint: 'The replica ran out of memory while loading; lower ctx_size/parallel in the profile or set a larger memory: for the model so placement picks a bigger node.' },
  REPLICA_DEVICE_OUT_OF_MEMORY: { http: 507, retryable: true, counts: false, avoidsNode: true, hint: 'The replica ran out of device (GPU) memory while loading (Vulkan ErrorOutOfDeviceMemory, CUDA out of memory): llmgw\'s estimate was too low for that device. Not counted toward parking: the node is avoided for a while and the model placed elsewhere. Lower gpu_layers or ctx_size in the profile, use gpu_layers: auto, or declare a smaller device budget (capacity.devices in nodes/<node>.yaml).' },
  REPLICA_PORT_IN_USE: { http: 503, retryable: true, counts: false, hint: 'The replica\'s port was taken by another process; llmgw picks another port on the next attempt.' },
  REPLICA_MODEL_LOAD_FAILED: { http: 500, retryable: false, counts: true, hint: 'The engine could not load the model file; check that the file is a valid GGUF for this engine version.' },
  REPLICA_START_TIMEOUT: { http: 504, retryable: true, counts: true, hint: 'The replica was not healthy within the profile\'s start_timeout; raise start_timeout or check the node\'s load.' },
  REPLICA_EXITED: { http: 500, retryable: true, counts: true, hint: 'The replica process exited; see the log tail in the detail.' },
  REPLICA_UNHEALTHY: { http: 504, retryable: true, counts: true, hint: 'The replica\'s process is alive but has not answered /health for longer than the profile\'s start_timeout (hung, or the node is overloaded); llmgw stopped it and starts a new one. Check the node\'s load and the replica\'s log (`llmgw ctl logs`).' },
  REPLICA_NOT_FOUND: { http: 404, retryable: false, counts: true, hint: 'No replica with that id exists on the node: there never was one, or it was stopped (replaced, surplus, idle, evicted, failed), and a stopped replica\'s directory goes with it, its log included. `llmgw ctl status` lists the replicas there are.' },
  REPLICA_INPUT_GONE: { http: 503, retryable: true, counts: false, hint: 'The engine or the model file this controller had found installed on the node was gone or changed when a replica started; llmgw installed or fetched it again and started the replica once more (not counted). If it repeats, something removes or replaces files in the node\'s data dir or the engine\'s path.' },
  RPC_BIND_REFUSED: { http: 500, retryable: false, counts: false, avoidsNode: true, hint: 'An RPC worker (rpc-server) binds one IPv4 address only, the node\'s listen_address or 127.0.0.1: never 0.0.0.0 or a name, since the RPC protocol has no authentication or encryption. Set listen_address in nodes/<node>.yaml to the node\'s address on a private network (docs/rpc-groups.md).' },
  RPC_WORKER_EXITED: { http: 500, retryable: true, counts: true, hint: 'The RPC worker (rpc-server) of a split model exited; the message has its last log line (an address in use, an abort). The head cannot compute without it.' },
  RPC_WORKER_START_TIMEOUT: { http: 504, retryable: true, counts: true, hint: 'rpc-server did not listen on its address within 30 s of its start and was stopped; check the node\'s load and the worker\'s log in the detail.' },
  RPC_VERSION_MISMATCH: { http: 500, retryable: false, counts: true, hint: 'The head\'s llama-server and a worker\'s rpc-server speak different RPC protocol versions (the head\'s log: "RPC server version mismatch"): the major must be equal and the worker\'s minor not newer. Every host of a group runs the same engine version; install that version on each.' },
  RPC_WORKER_UNREACHABLE: { http: 502, retryable: true, counts: true, hint: 'The head could not connect to a worker\'s rpc-server (its log: "Failed to connect to HOST:PORT"): the worker is not running, or the head cannot reach the worker\'s listen_address (a firewall, another network).' },
  WARMUP_TIMED_OUT: { http: 504, retryable: true, counts: false, hint: 'A new replica\'s warm-up (its model\'s hottest prompt prefixes replayed to it before it takes traffic) did not finish within the profile\'s warmup.timeout; the replica took traffic then, its cache primed with what was replayed. Raise warmup.timeout, or lower warmup.prefixes / warmup.max_tokens.' },
  WARMUP_REPLAY_FAILED: { http: 502, retryable: true, counts: false, hint: 'A new replica answered a warm-up replay with a server error or not at all (the message says which; a prefix it refuses with a 4xx is skipped); the warm-up stopped there and the replica took traffic at once. Nothing to do unless it recurs: then see the replica\'s log (`llmgw ctl logs`).' },
  SLOT_RESTORE_FAILED: { http: 502, retryable: true, counts: false, hint: 'A new replica\'s warm-up by slot files (the old replica\'s slots saved and restored into it, where node, engine build, model file and cache flags match) failed: the old replica would not save, or the new one refused a file (missing, damaged, or not its shapes). The replica was warmed by replay instead. Nothing to do unless it recurs: then see both replicas\' logs and the node\'s free disk in its data dir (slots/).' },
  SLOT_RESTORE_NO_GAIN: { http: 502, retryable: true, counts: false, hint: 'A new replica restored the old replica\'s slot files and the engine said it did, but the replays that followed took nothing from its cache (llama-server\'s cache_n stayed 0; llama.cpp #26676): the restore did not help and the replica was warmed by replay. Nothing to do; if it recurs on an engine version, the slot files of that build are not worth saving.' },

  // --- controller ---
  INTERNAL: { http: 500, retryable: true, counts: false, openai: { type: 'server_error', code: 'internal_error' }, hint: 'An unexpected error inside llmgw; see the controller log for the stack and report it.' },
  STATE_VERSION_NEWER: { http: 500, retryable: false, counts: false, hint: 'The state record (state file or etcd) was written by a newer llmgw than this instance. This instance does not write over it and does not act: upgrade it to the version of the others (a rolling upgrade moves every instance forward; going back to an older llmgw needs the record of its own version).' },
  STATE_FILE_CORRUPT: { http: 500, retryable: false, counts: false, hint: 'The state file was not an llmgw state record and was moved aside (see the message for where); the controller started from an empty record, so failure counts and parking start afresh. Look at the moved file for what went wrong (disk, a hand edit).' },
  STATE_UNREADABLE: { http: 500, retryable: true, counts: false, hint: 'The controller cannot read its state file; check the permissions and the disk of the state dir (--state-dir).' },
  CONTROLLER_STANDBY: { http: 503, retryable: true, counts: false, hint: 'This instance is a standby of an HA controller on etcd: the leader (see `llmgw ctl status`) places, starts and stops replicas and writes status; this one routes from the leader\'s published snapshot and forwards retries, restarts, log reads and on-demand activity to it. Nothing to do unless no instance leads.' },
  STATE_WRITE_FAILED: { http: 500, retryable: true, counts: false, hint: 'The controller cannot write its state file, so failure counts and parking do not survive a restart; free disk space in the state dir or fix its permissions (--state-dir).' },
  NO_VALID_SPEC: { http: 503, retryable: true, counts: false, openai: { type: 'server_error', code: 'fleet_not_ready' }, hint: 'No valid fleet revision has been applied yet; check `llmgw ctl status` for the sync error or the rejected revision.' },

  // --- HA on etcd (--etcd) ---
  ETCD_UNAVAILABLE: { http: 503, retryable: true, counts: false, openai: { type: 'server_error', code: 'etcd_unavailable' }, hint: 'No etcd endpoint answered in time (refused, timed out or partitioned); check that the --etcd URLs are right and etcd is up and reachable from this instance. A leader that cannot reach etcd stops acting before its lease can expire.' },
  ETCD_AUTH_FAILED: { http: 502, retryable: false, counts: false, hint: 'etcd refused the credentials or the permission: check the etcd user and its password file, the client certificate, and that the user\'s role may read and write the keys under the --etcd prefix.' },
  ETCD_TLS_FAILED: { http: 502, retryable: false, counts: false, hint: 'The TLS handshake with etcd failed: check that the CA file signed etcd\'s server certificate and that the certificate names the endpoint\'s host, and that etcd trusts the client certificate and key given (etcd --client-cert-auth --trusted-ca-file).' },
  ETCD_FAILED: { http: 500, retryable: true, counts: false, hint: 'An etcd request failed for another reason than reachability or credentials; see the message (etcd\'s own error).' },
  ETCD_CONFIG_INVALID: { http: 500, retryable: false, counts: false, hint: 'A file given for the etcd connection (CA, client certificate, client key, password) is missing, empty or not in the form expected; fix the file named in the message.' },
  ETCD_STATE_CORRUPT: { http: 500, retryable: false, counts: false, hint: 'The state record in etcd was not an llmgw state record; the leader started from an empty record (failure counts and parking start afresh) and overwrites it on its next save. A copy of the bad value is kept beside it (see the message).' },
  ETCD_VALUE_TOO_LARGE: { http: 500, retryable: false, counts: false, hint: 'Not raised since entries past the limit are cut (ETCD_VALUE_TRUNCATED); an older version refused the whole save or publish with it. One value llmgw keeps in etcd (an entry of the state record or of the published snapshot) would pass the size etcd takes in one request. Raise etcd\'s --max-request-bytes only together with llmgw\'s limit; see docs/ha-and-trust.md (sizing).' },
  ETCD_REVISION_WENT_BACK: { http: 503, retryable: true, counts: false, hint: 'etcd answered with a revision below one it had given already: it was restored from a backup (or an endpoint belongs to another cluster). A leader whose epoch is above that revision stepped down and a new election follows at once; leader records from before the restore are removed by the instances they name. Check that the restore was intended and that every --etcd URL is a member of the same cluster.' },
  LEADER_DEPOSED: { http: 409, retryable: true, counts: false, hint: 'This instance lost leadership (a newer leader holds the election key, or its key expired); its write was refused by etcd and it stopped acting. Nothing to do: the current leader carries on; check `llmgw ctl status` for which instance leads.' },
  LEADER_RENEWAL_OVERDUE: { http: 503, retryable: true, counts: false, hint: 'The leader could not renew its etcd lease within the renew deadline, so it stopped acting before the lease could expire; it campaigns again once etcd answers. Check the network between this instance and etcd, and etcd\'s load.' },
  LEADER_KEY_FORGED: { http: 409, retryable: true, counts: false, hint: 'The etcd leader key held a value no llmgw leader of this etcd wrote (not a leader record, attached to no lease, a create revision above etcd\'s revision, or the leader\'s own key overwritten in place): it was removed, not followed, and a new election followed. Someone other than llmgw writes the etcd prefix: find who, and restrict write access to it.' },
  LEADER_UNAVAILABLE: { http: 503, retryable: true, counts: false, openai: { type: 'server_error', code: 'leader_unavailable' }, hint: 'This instance is a standby and the leader did not answer its forwarded request in time (no leader elected, or the leader is busy or cut off from etcd); retry shortly, or check `llmgw ctl status` for which instance leads.' },
  ETCD_VALUE_TRUNCATED: { http: 500, retryable: false, counts: false, hint: 'One entry llmgw keeps in etcd (of the state record or the published snapshot: one model\'s, one node\'s) would pass the size of one etcd value, so its longest strings were cut (each ending in "… (N bytes cut)") and the rest of the save or publish was written as usual; the message names the key and its sizes. Reasons are capped at 2 KiB where they are made, so this means an unusually large record (very many replicas): look at that model.' },
  DRAIN_ROUTERS_BEHIND: { http: 503, retryable: false, counts: false, hint: 'A replica being stopped waited for every live router (each HA instance, through etcd) to route from a published snapshot without it, and drain_grace ran out first: the routers named in the message had not applied that snapshot (a standby whose etcd watch lags, one that cannot write its applied revision to etcd, or an llmgw too old to publish one), so the replica was stopped anyway and a request they sent it may have been cut. Check the named instances\' link to etcd (`llmgw ctl status` on them), and upgrade every instance to the same llmgw.' },

  // --- router ---
  MODEL_NOT_FOUND: { http: 404, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'model_not_found' }, hint: 'No model or alias of that name exists in the fleet spec; GET /v1/models lists the models your key may use.' },
  MODEL_FORBIDDEN: { http: 403, retryable: false, counts: false, openai: { type: 'permission_error', code: 'model_not_allowed' }, hint: 'The API key may not use this model; add the model to the key\'s models in access/keys.yaml or use another key.' },
  MODEL_PARKED: { http: 503, retryable: false, counts: false, openai: { type: 'model_unavailable_error', code: 'model_parked' }, hint: 'The model is parked after repeated start failures and is not started again until its definition changes or a retry: fix the cause, then `llmgw ctl retry MODEL` or push a commit with the trailer `Llmgw-Retry: MODEL`.' },
  MODEL_UNPLACEABLE: { http: 503, retryable: false, counts: false, openai: { type: 'model_unavailable_error', code: 'model_unplaceable' }, hint: 'The model fits on no node (see the reason); free memory on a node, add a node, relax node_selector or lower the model\'s memory.' },
  // sub-codes of MODEL_UNPLACEABLE: why placement found no node (the router still answers model_unplaceable)
  PLACEMENT_MEMORY_UNKNOWN: { http: 503, retryable: false, counts: false, hint: 'The model\'s memory need is not known yet (its GGUF header could not be read; see the message): fix the source or its access, or set memory: in models/<model>.yaml.' },
  PLACEMENT_NO_MATCHING_NODE: { http: 503, retryable: false, counts: false, hint: 'No reachable node carries every label of the model\'s node_selector; relax node_selector in models/<model>.yaml or label a node.' },
  PLACEMENT_NO_ROOM: { http: 503, retryable: false, counts: false, hint: 'No matching node has the free memory the replica needs; free memory on a node (stop or move replicas), add a node, or lower the model\'s memory (ctx_size, parallel, a smaller quantization).' },
  PLACEMENT_NO_DEVICE_ROOM: { http: 503, retryable: false, counts: false, hint: 'A node has the host memory but no allowed device has the free device memory the replica needs (its offloaded layers, their KV cache and compute buffers); lower gpu_layers (or use auto), ctx_size or parallel in the profile, free a device (stop replicas on it), or add a GPU node.' },
  PLACEMENT_NO_CORES: { http: 503, retryable: false, counts: false, hint: 'An extra replica of a scaling model goes only where threads × (its replicas on the node + 1) fits in the node\'s cores: a replica competing for the same cores adds nothing. Add a node, declare a node\'s capacity.cpus if observation undercounts them, or lower the profile\'s threads.' },
  PLACEMENT_GROUP_VERSIONS: { http: 503, retryable: false, counts: false, hint: 'The hosts an RPC group (placement: {spread: rpc}) would run on have different versions of its engine installed, and every host of a group runs the same version (the RPC protocol changes between versions): install the profile\'s version on every host, or remove the other version.' },
  MODEL_LOADING: { http: 503, retryable: true, counts: false, openai: { type: 'model_unavailable_error', code: 'model_loading' }, hint: 'The model is starting and was not ready within the activation window; retry after Retry-After seconds.' },
  MODEL_FAILING: { http: 503, retryable: true, counts: false, openai: { type: 'model_unavailable_error', code: 'model_failing' }, hint: 'The model\'s replicas failed to start and llmgw is backing off; it tries again after Retry-After seconds (see the last error).' },
  AUTH_MISSING: { http: 401, retryable: false, counts: false, openai: { type: 'authentication_error', code: 'missing_api_key' }, hint: 'Send the API key as `Authorization: Bearer KEY` (or `x-api-key: KEY`).' },
  AUTH_INVALID: { http: 401, retryable: false, counts: false, openai: { type: 'authentication_error', code: 'invalid_api_key' }, hint: 'The API key is not one of the keys in access/keys.yaml (compared by sha256); check the key.' },
  BAD_REQUEST: { http: 400, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'invalid_request' }, hint: 'The request body must be a JSON object; see the OpenAI API reference for the endpoint.' },
  BAD_JSON: { http: 400, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'invalid_json' }, hint: 'The request body is not valid JSON; send `Content-Type: application/json` with a JSON object.' },
  MODEL_MISSING: { http: 400, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'missing_model' }, hint: 'Name the model in the request body\'s `model` field (a model name or alias from GET /v1/models).' },
  BODY_TOO_LARGE: { http: 413, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'request_too_large' }, hint: 'The request body exceeds the router\'s body size limit; send less, or raise the limit in the router configuration.' },
  ROUTE_NOT_FOUND: { http: 404, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'unknown_url' }, hint: 'The router forwards POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses (and /v1/responses/input_tokens), /v1/messages (and /v1/messages/count_tokens), /v1/rerank and /v1/reranking, and serves GET /v1/models; llama-server\'s other routes are not reachable through it.' },
  CONCURRENCY_LIMIT: { http: 429, retryable: true, counts: false, openai: { type: 'rate_limit_error', code: 'concurrency_limit_exceeded' }, hint: 'The model is at its max_concurrency; retry shortly, or raise max_concurrency / add replicas in models/<model>.yaml.' },
  MODEL_OVERLOADED: { http: 429, retryable: true, counts: false, openai: { type: 'rate_limit_error', code: 'model_overloaded' }, hint: 'Every slot of the model\'s ready replicas is busy and its queue is full (or the request waited its queue timeout); retry after Retry-After seconds, or add replicas / raise the profile\'s parallel or the model\'s queue: {max, timeout}.' },
  KEY_RATE_LIMITED: { http: 429, retryable: true, counts: false, openai: { type: 'rate_limit_error', code: 'key_rate_limit_exceeded' }, hint: 'The API key (or the key on this model) is at its requests_per_minute in access/keys.yaml; retry after Retry-After seconds, or raise the limit in access/keys.yaml (the key\'s limits or model_limits, or the model\'s limits under models:).' },
  KEY_TOKENS_LIMITED: { http: 429, retryable: true, counts: false, openai: { type: 'rate_limit_error', code: 'key_tokens_limit_exceeded' }, hint: 'The API key (or the key on this model) used its tokens_per_minute in access/keys.yaml (prompt, cached and completion tokens as the replicas reported them); retry after Retry-After seconds, or raise the limit in access/keys.yaml.' },
  KEY_CONCURRENCY_LIMITED: { http: 429, retryable: true, counts: false, openai: { type: 'rate_limit_error', code: 'key_concurrency_limit_exceeded' }, hint: 'The API key (or the key on this model) has as many requests in progress as its concurrency in access/keys.yaml allows; retry when one ends, or raise the limit in access/keys.yaml.' },
  UPSTREAM_CONNECT: { http: 502, retryable: true, counts: false, openai: { type: 'server_error', code: 'upstream_connect_failed' }, hint: 'No ready replica of the model accepted a connection; llmgw replaces failed replicas, retry shortly.' },
  UPSTREAM_FIRST_BYTE_TIMEOUT: { http: 504, retryable: true, counts: false, openai: { type: 'server_error', code: 'upstream_first_byte_timeout' }, hint: 'The replica did not start answering within the first-byte timeout; the node may be overloaded, or raise the timeout (or stream the response).' },
  UPSTREAM_STALLED: { http: 504, retryable: true, counts: false, openai: { type: 'server_error', code: 'upstream_stalled' }, hint: 'The replica stopped sending mid-response for longer than the stream idle timeout; check the node\'s load.' },
  UPSTREAM_FAILED: { http: 502, retryable: true, counts: false, openai: { type: 'server_error', code: 'upstream_error' }, hint: 'The connection to the replica failed mid-request; retry.' },
  UPSTREAM_AUTH: { http: 502, retryable: false, counts: false, openai: { type: 'server_error', code: 'upstream_auth_failed' }, hint: 'The replica refused llmgw\'s engine API key; the replica was not started by this controller or its key changed. Restart it (`llmgw ctl restart MODEL`).' },
  ROUTER_OVERLOADED: { http: 503, retryable: true, counts: false, openai: { type: 'server_error', code: 'router_overloaded' }, hint: 'The router is at its limit of requests in progress (or of bytes held: request bodies, and answers held whole to take their prompt-cache figures out for keys not trusted); retry after Retry-After seconds, or raise router_max_in_flight in the controller config.' },
  REQUEST_TIMEOUT: { http: 408, retryable: true, counts: false, openai: { type: 'invalid_request_error', code: 'request_timeout' }, hint: 'The client did not send its whole request (headers, then body) within the server\'s client timeout; send the request at once, or raise client_timeout / header_timeout in the controller config.' },
  HEADERS_TOO_LARGE: { http: 431, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'headers_too_large' }, hint: 'The request headers are larger than the server accepts (16 KiB); send fewer or smaller headers.' },
  MALFORMED_HTTP: { http: 400, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'malformed_request' }, hint: 'The request is not valid HTTP/1.1 (request line, header syntax, method or framing); fix the client.' },
  ROUTER_SHUTTING_DOWN: { http: 503, retryable: true, counts: false, openai: { type: 'server_error', code: 'router_shutting_down' }, hint: 'The router is shutting down; retry against another instance or after it restarts.' },
  FOREIGN_HOST: { http: 403, retryable: false, counts: false, openai: { type: 'permission_error', code: 'foreign_host' }, hint: 'Authentication is off (serve --local, --no-admin-auth or --no-router-auth), so llmgw serves only this machine: the request\'s Host must be loopback (localhost, 127.0.0.1, [::1]) or a host given with --allowed-hosts. Use http://127.0.0.1:PORT, add the name to --allowed-hosts, or turn authentication on.' },
  FOREIGN_ORIGIN: { http: 403, retryable: false, counts: false, openai: { type: 'permission_error', code: 'foreign_origin' }, hint: 'Authentication is off, so llmgw serves only this machine: a request a web page from another site sends (its Origin is not loopback or an allowed host) is refused, so the page cannot act on the fleet or use the models (CSRF, DNS rebinding). Open the status page from this machine, add the host to --allowed-hosts, or turn authentication on.' },
  UNSUPPORTED_MEDIA_TYPE: { http: 415, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'unsupported_media_type' }, hint: 'The router reads a request body only as JSON: send `Content-Type: application/json` (the OpenAI and Anthropic clients do).' },
  KEY_LIMITS_UNCOUNTED: { http: 503, retryable: true, counts: false, openai: { type: 'server_error', code: 'key_limits_not_counted' }, hint: 'The API key has limits in access/keys.yaml, which the instances on etcd share, and this instance has not counted the live instances since it started (etcd has not answered), so it does not know its share; it refuses limited keys rather than enforce the whole limit alone. Keys without limits are served. Retry, or through another instance; check that etcd is reachable from this one.' },
  SLOT_PICK_REFUSED: { http: 400, retryable: false, counts: false, openai: { type: 'invalid_request_error', code: 'slot_pick_refused' }, hint: 'The request carried `id_slot`, which picks a replica\'s slot: the router places requests itself (a picked slot can be busy while it counts one free, or sit next to another key\'s prompt cache), so it refuses the field for every key. Leave `id_slot` out (or -1).' },
  RESPONSE_NOT_REDACTABLE: { http: 502, retryable: false, counts: false, openai: { type: 'server_error', code: 'response_not_redactable' }, hint: 'The replica\'s answer could not be rid of its prompt-cache figures (timings, cached_tokens), which a key not marked `trusted: true` in access/keys.yaml does not see: a non-streamed answer over 8 MiB (or one stream line over it), or a body that may carry them and is not JSON. Stream the request, ask for less (logprobs, n), or mark the key trusted.' },

  // --- admin API ---
  ADMIN_AUTH_MISSING: { http: 401, retryable: false, counts: false, hint: 'Send the admin token as `Authorization: Bearer TOKEN`; `llmgw ctl` takes it from --token, LLMGW_ADMIN_TOKEN or its config file (~/.config/llmgw/ctl.json).' },
  ADMIN_AUTH_INVALID: { http: 401, retryable: false, counts: false, hint: 'The admin token does not match the controller\'s; use the token the controller was started with (its admin token file or LLMGW_ADMIN_TOKEN).' },
  WEBHOOK_SIGNATURE_INVALID: { http: 401, retryable: false, counts: false, hint: 'Give the git server\'s webhook the same secret as the controller config; llmgw checks X-Hub-Signature-256 (GitHub), X-Gitea-Signature (Gitea, Forgejo) or X-Gitlab-Token (GitLab).' },
  WEBHOOK_NOT_CONFIGURED: { http: 404, retryable: false, counts: false, hint: 'The controller has no webhook secret configured; set one in the controller config to accept git push webhooks (polling still picks up commits).' },
  NOT_FOUND: { http: 404, retryable: false, counts: false, hint: 'Nothing of that name exists in the fleet in force; `llmgw ctl models`, `llmgw ctl replicas` and `llmgw ctl nodes` list what does.' },
  ADMIN_ROUTE_NOT_FOUND: { http: 404, retryable: false, counts: false, hint: 'The admin API serves /admin/v1/status, /models, /models/NAME, /models/NAME/retry, /models/NAME/rollout (and its /promote and /abort), /replicas, /replicas/ID/logs, /nodes, /restart and /webhook (and /healthz, /readyz, /metrics and the status page at /ui/); check the URL and method.' },
  ADMIN_BODY_TOO_LARGE: { http: 413, retryable: false, counts: false, hint: 'The request body is larger than the admin API accepts (a webhook delivery: 64 KiB, read before its signature is checked); a push whose delivery is bigger is still picked up by polling.' },
  ADMIN_OVERLOADED: { http: 503, retryable: true, counts: false, hint: 'The admin port is at its limit of requests in progress (or of webhook bodies read before their signature is checked); retry after Retry-After seconds. Many clients at once here is unusual: look for a flood.' },
  ADMIN_BAD_REQUEST: { http: 400, retryable: false, counts: false, hint: 'Fix the request as the message says: JSON bodies and query parameters as the admin API documents them (`llmgw ctl --help` shows what the CLI sends).' },

  // --- CLI usage ---
  USAGE: { http: 400, retryable: false, counts: false, hint: 'Run `llmgw help` for usage.' },

  // --- rollout (a model's `rollout:` block: checks, then a canary judged against the stable revision) ---
  ROLLOUT_CHECK_FAILED: { http: 503, retryable: false, counts: false, hint: 'A check in the model\'s rollout (named in the message, with what it expected and what came back) failed against the new revision\'s first replica, so no user request reached it and the old revision keeps serving. Fix the definition (or the check) in the fleet repo, or run the checks again with `llmgw ctl retry MODEL`.' },
  ROLLOUT_ROLLED_BACK: { http: 503, retryable: false, counts: false, hint: 'The canary did worse than the stable revision on the same traffic (the message gives both arms\' figures) and was rolled back; the old revision serves. The revision stays held until its definition changes or `llmgw ctl retry MODEL`; `llmgw ctl rollout MODEL` shows the figures of both arms.' },
  ROLLOUT_INCONCLUSIVE: { http: 503, retryable: false, counts: false, hint: 'A canary step saw fewer requests on an arm than the rollout\'s min_requests, so it neither passed nor failed. Lower min_requests or lengthen interval to fit the model\'s traffic (docs/rollouts.md), or decide by hand: `llmgw ctl rollout promote MODEL` or `llmgw ctl rollout abort MODEL`.' },
  ROLLOUT_HELD: { http: 503, retryable: false, counts: false, hint: 'The rollout is held where it was (a step was inconclusive and the rollout says on_inconclusive: hold; the message says why) until an operator decides: `llmgw ctl rollout promote MODEL` promotes the new revision, `llmgw ctl rollout abort MODEL` rolls it back, `llmgw ctl retry MODEL` runs the rollout again.' },
  ROLLOUT_ABORTED: { http: 409, retryable: false, counts: false, hint: 'An operator aborted the rollout (`llmgw ctl rollout abort MODEL`); the old revision serves and the new one is held until its definition changes or `llmgw ctl retry MODEL`.' },
  ROLLOUT_NONE: { http: 409, retryable: false, counts: false, hint: 'The model has no rollout under way or held back, so there is nothing to promote or abort: a rollout begins when the definition of a model with a `rollout:` block changes while it serves (docs/rollouts.md). `llmgw ctl rollout MODEL` shows a model\'s rollout.' },
});

export type ReasonCode = keyof typeof Reasons;

/** An error that carries a catalogue reason. Adapters translate library errors into these. */
export class LlmgwError extends Error {
  readonly reason: Reason;
  readonly detail: Readonly<Record<string, unknown>>;
  constructor(code: ReasonCode, message: string, detail: Record<string, unknown> = {}, options?: { cause?: unknown }) {
    // a presigned source's query or a URL's user info never leaves in a message or its detail
    // and a message is bounded and printable (reasonText): it reaches etcd, the status branch and terminals
    super(reasonText(redactUrls(message)), options);
    this.name = 'LlmgwError';
    this.reason = Reasons[code];
    // detail goes to logs (a log tail, stderr): kept whole, but without terminal controls
    this.detail = Object.freeze(Object.fromEntries(Object.entries(detail).map(([k, v]) => [k, typeof v === 'string' ? printable(redactUrls(v)) : v])));
  }
  get code(): ReasonCode {
    return this.reason.code as ReasonCode;
  }
}

/** A bad command line or configuration (the catalogue's USAGE): the command exits 2 with the message. */
export function usageError(message: string): LlmgwError {
  return new LlmgwError('USAGE', message);
}

export function isUsageError(e: unknown): e is LlmgwError {
  return e instanceof LlmgwError && e.code === 'USAGE';
}

/** A reason as status, logs and metrics carry it: the stable code and a message. */
export interface ReasonRef {
  readonly code: string;
  readonly message: string;
}

/** The reason of any error: its catalogue code, or INTERNAL for an error no adapter translated. */
export function reasonOf(e: unknown): ReasonRef {
  if (e instanceof LlmgwError) return { code: e.code, message: e.message };
  return { code: 'INTERNAL', message: reasonText(redactUrls(e instanceof Error ? e.message : String(e))) };
}

/** The most bytes (UTF-8) of a reason's message, its cut note included. */
export const REASON_MAX_BYTES = 2048;

// C0 but tab and newline, DEL, C1, and a UTF-16 surrogate without its pair
// eslint-disable-next-line no-control-regex
const UNPRINTABLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * `text` with every control character but tab and newline (C0, DEL, C1: an ESC that starts an OSC 52
 * clipboard write, a CR that overwrites a line) and every unpaired surrogate replaced by U+FFFD; a CR
 * before a newline is dropped. What comes from outside (an engine's log line, a node's stderr, a
 * GGUF's strings) is safe to print on a terminal after this.
 */
export function printable(text: string): string {
  return text.replace(/\r\n/g, '\n').replace(UNPRINTABLE, '\ufffd');
}

/**
 * A reason's message as it may be kept and shown: printable(), and at most `maxBytes` of UTF-8 —
 * a longer one keeps its head and ends in "… (N bytes cut)". Every reason is made through it
 * (LlmgwError, reasonOf, the engine's failure line): a model's state entry in etcd, the status
 * branch and `ctl status` stay small whatever a GGUF or an engine says. The whole line stays in the
 * replica's log (`llmgw ctl logs`).
 */
export function reasonText(text: string, maxBytes: number = REASON_MAX_BYTES): string {
  const t = printable(text);
  // a UTF-16 unit is at most 3 bytes of UTF-8 (a pair: 4 for 2)
  if (t.length * 3 <= maxBytes) return t;
  const buf = Buffer.from(t, 'utf8');
  if (buf.length <= maxBytes) return t;
  const budget = Math.max(0, maxBytes - Buffer.byteLength(`… (${buf.length} bytes cut)`));
  let end = budget;
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--; // not inside a character
  return `${buf.subarray(0, end).toString('utf8')}… (${buf.length - end} bytes cut)`;
}

/**
 * A code's hint for an operator, naming the model where the hint says MODEL (MODEL_PARKED's is how to
 * unpark it); without a model, the hint as the catalogue has it. The one place a hint's text is taken from.
 */
export function hintFor(code: ReasonCode, model?: string): string {
  const hint = Reasons[code].hint;
  return model === undefined ? hint : hint.replaceAll('MODEL', model);
}

export function isLlmgwError(e: unknown, code?: ReasonCode): e is LlmgwError {
  return e instanceof LlmgwError && (code === undefined || e.code === code);
}

/**
 * Whether a replica start that failed with this code counts toward parking the model. A code the
 * catalogue does not know (a node reporting something new) counts: the model's failures must not
 * go uncounted by default, or a broken model would be started forever.
 */
export function countsTowardParking(code: string): boolean {
  return Object.hasOwn(Reasons, code) ? Reasons[code as ReasonCode].countsTowardParking : true;
}

/** Whether a replica start that failed with this code was the node's fault, so the model goes elsewhere for a while. */
export function avoidsNode(code: string): boolean {
  return Object.hasOwn(Reasons, code) && Reasons[code as ReasonCode].avoidsNode;
}
