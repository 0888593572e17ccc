/** What the admin API's routes need from the controller: declared in the controller's folder (reconciler/controller-api.ts). */
export type { AdminBackend, RestartRequest, RetryOutcome, RolloutOverride, RolloutOverridden } from '../reconciler/controller-api.js';
