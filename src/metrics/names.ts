/**
 * Every metric llmgw exports, by name. The names are part of llmgw's interface (alert rules,
 * dashboards and operators' own queries use them): never rename one that shipped.
 */
export const MetricNames = Object.freeze({
  // --- per model (label model) ---
  modelDesiredReplicas: 'llmgw_model_desired_replicas',
  modelReadyReplicas: 'llmgw_model_ready_replicas',
  modelDrainingReplicas: 'llmgw_model_draining_replicas',
  modelDrainingInFlight: 'llmgw_model_draining_in_flight_requests',
  modelConsecutiveStartFailures: 'llmgw_model_consecutive_start_failures',
  modelParked: 'llmgw_model_parked',
  modelUnplaceable: 'llmgw_model_unplaceable',
  modelInfo: 'llmgw_model_info',
  modelState: 'llmgw_model_state',
  modelLastErrorInfo: 'llmgw_model_last_error_info',
  modelUnplaceableReasonInfo: 'llmgw_model_unplaceable_reason_info',
  modelScheduledReplicas: 'llmgw_model_scheduled_replicas',
  modelScheduleNextChangeTimestampSeconds: 'llmgw_model_schedule_next_change_timestamp_seconds',

  // --- per node (label node) ---
  nodeReachable: 'llmgw_node_reachable',
  nodeMemoryCapacityBytes: 'llmgw_node_memory_capacity_bytes',
  nodeMemoryAvailableBytes: 'llmgw_node_memory_available_bytes',
  nodeDeviceMemoryBytes: 'llmgw_node_device_memory_bytes',
  nodeDiskFreeBytes: 'llmgw_node_disk_free_bytes',
  nodeEngineInstalls: 'llmgw_node_engine_installs',
  nodeEngineInstallFailuresTotal: 'llmgw_node_engine_install_failures_total',

  // --- control plane ---
  leader: 'llmgw_leader',
  leaderChangesTotal: 'llmgw_leader_changes_total',
  modelScaleTotal: 'llmgw_model_scale_total',
  modelShortReplicas: 'llmgw_model_short_replicas',
  modelMaxReplicas: 'llmgw_model_max_replicas',
  modelLoad: 'llmgw_model_load',
  modelQueueWaitSeconds: 'llmgw_model_queue_wait_seconds',
  leaderEpoch: 'llmgw_leader_epoch',
  etcdUp: 'llmgw_etcd_up',
  notActingInfo: 'llmgw_not_acting_info',
  forgedEpochs: 'llmgw_forged_epochs',
  rolloutPhase: 'llmgw_rollout_phase',
  rolloutStep: 'llmgw_rollout_step',
  rolloutShare: 'llmgw_rollout_share',
  rolloutRequests: 'llmgw_rollout_requests',
  rolloutErrors: 'llmgw_rollout_errors',
  rolloutErrorRatio: 'llmgw_rollout_error_ratio',
  rolloutTtftP95Seconds: 'llmgw_rollout_ttft_p95_seconds',
  rolloutTpotP95Seconds: 'llmgw_rollout_tpot_p95_seconds',
  etcdWriteRefused: 'llmgw_etcd_write_refused',
  reconcileDurationSeconds: 'llmgw_reconcile_duration_seconds',
  reconcileTotal: 'llmgw_reconcile_total',
  reconcileLastSuccessTimestampSeconds: 'llmgw_reconcile_last_success_timestamp_seconds',
  fleetRevisionInfo: 'llmgw_fleet_revision_info',
  specValid: 'llmgw_spec_valid',
  specRejectedRevisionInfo: 'llmgw_spec_rejected_revision_info',
  gitSyncLastSuccessTimestampSeconds: 'llmgw_git_sync_last_success_timestamp_seconds',
  statusWriteLastSuccessTimestampSeconds: 'llmgw_status_write_last_success_timestamp_seconds',
  eventLoopDelayP99Seconds: 'llmgw_event_loop_delay_p99_seconds',
  eventLoopDelayMaxSeconds: 'llmgw_event_loop_delay_max_seconds',

  // --- certificates (label path) ---
  certificateExpiryTimestampSeconds: 'llmgw_certificate_expiry_timestamp_seconds',
  certificateReadErrors: 'llmgw_certificate_read_errors',

  // --- router ---
  routerRequestsTotal: 'llmgw_router_requests_total',
  routerRequestDurationSeconds: 'llmgw_router_request_duration_seconds',
  routerTimeToFirstTokenSeconds: 'llmgw_router_time_to_first_token_seconds',
  routerUpstreamErrorsTotal: 'llmgw_router_upstream_errors_total',
  routerInFlightRequests: 'llmgw_router_in_flight_requests',
  routerQueueDepth: 'llmgw_router_queue_depth',
  routerQueueWaitSeconds: 'llmgw_router_queue_wait_seconds',
  routerPromptTokensTotal: 'llmgw_router_prompt_tokens_total',
  routerAffinityTotal: 'llmgw_router_affinity_total',
  routerEjectedReplicas: 'llmgw_router_ejected_replicas',
  routerReplicaEjectionsTotal: 'llmgw_router_replica_ejections_total',

  // --- replica warm-ups (label model) ---
  replicaWarmupPrefixesTotal: 'llmgw_replica_warmup_prefixes_total',
  replicaWarmupTokensTotal: 'llmgw_replica_warmup_tokens_total',
  replicaWarmupSeconds: 'llmgw_replica_warmup_seconds',
  replicaWarmupTotal: 'llmgw_replica_warmup_total',
  replicaWarmupRestoredTokensTotal: 'llmgw_replica_warmup_restored_tokens_total',

  // --- RPC groups (#40) ---
  rpcGroupHostBytes: 'llmgw_rpc_group_host_bytes',

  // --- per API key (label key: the key's name in access/keys.yaml, never its value) ---
  keyRequestsTotal: 'llmgw_key_requests_total',
  keyTokensTotal: 'llmgw_key_tokens_total',
} as const);

export type MetricName = (typeof MetricNames)[keyof typeof MetricNames];

/** Every llmgw metric name, sorted. */
export const METRIC_NAMES: readonly MetricName[] = Object.freeze(Object.values(MetricNames).sort());

/** The histograms among them (they are scraped as NAME_bucket, NAME_sum and NAME_count). */
export const HISTOGRAM_NAMES: readonly MetricName[] = Object.freeze([
  MetricNames.reconcileDurationSeconds,
  MetricNames.routerRequestDurationSeconds,
  MetricNames.routerTimeToFirstTokenSeconds,
  MetricNames.routerQueueWaitSeconds,
  MetricNames.replicaWarmupSeconds,
]);

/** Every phase a model can be in, for the one-hot llmgw_model_state{state}. */
export const MODEL_STATES = Object.freeze([
  'ready',
  'degraded',
  'starting',
  'failing',
  'parked',
  'unplaceable',
  'idle',
  'pending',
] as const);

/**
 * The metric a PromQL identifier refers to: NAME_bucket / NAME_sum / NAME_count of a histogram
 * map to NAME; anything else is returned as is.
 */
export function baseMetricName(identifier: string): string {
  const m = /^(.*)_(bucket|sum|count)$/.exec(identifier);
  if (m && m[1] !== undefined && (HISTOGRAM_NAMES as readonly string[]).includes(m[1])) return m[1];
  return identifier;
}
