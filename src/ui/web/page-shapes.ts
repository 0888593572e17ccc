/**
 * The wire shapes the status page's script (app.ts) reads: GET /admin/v1/view and its stream
 * (src/ui/view.ts, src/ui/routes.ts), and the events of /admin/v1/events. Types only: nothing of
 * this file runs in the browser (app.ts imports it with `import type`, which the build erases).
 */
export interface Reason {
  code: string;
  message: string;
  hint: string;
}
export interface PageModel {
  name: string;
  phase: string;
  ready: string;
  detail: string;
  scaling: string;
  consecutiveFailures: number;
  reason: Reason | null;
  unplaceable: { code: string; reason: string; hint: string; needText: string | null; largestFreeText: string | null; nodesChecked: number; excludedBySelector: number; unknownNodes: number } | null;
  unpark: string | null;
  retry: boolean;
  memory: string | null;
  router: string | null;
  /** device: its place on devices ("Vulkan0 9/9 layers, 24.5 MiB reserved"); null or absent (an older controller): host only. */
  replicas: { id: string; node: string; port: string; phase: string; since: string; device?: string | null; group?: string | null }[];
  /** Its rollout (src/ui/rollout-view.ts); null without one (absent from an older controller). */
  rollout?: PageRollout | null;
}
export interface PageArm {
  requests: string;
  errors: string;
  errorRate: string;
  ttftP95: string;
  tpotP95: string;
  revision: string;
}
export interface PageRollout {
  phase: 'checking' | 'canary' | 'held' | 'rolled_back' | 'promoted';
  label: string;
  summary: string;
  since: string;
  step: string | null;
  until: string | null;
  judgedOn: string | null;
  arms: { stable: PageArm; canary: PageArm; verdict: 'pass' | 'fail' | 'inconclusive'; verdictText: string } | null;
  verdict: { code: string; message: string; hint: string | null } | null;
}
export interface Sized {
  bytes: number;
  text: string;
}
export interface PageNode {
  name: string;
  reachable: boolean;
  error: Reason | null;
  capacity: (Sized & { source: 'declared' | 'observed' }) | null;
  reserve: Sized;
  taken: Sized;
  free: Sized | null;
  replicas: { id: string; model: string; phase: string; bytes: number | null; text: string }[];
}
export interface PageView {
  at: string;
  status: {
    revision: string | null;
    spec: { valid: boolean };
    sync: { lastOk: string | null; error: Reason | null };
    stateError: Reason | null;
    lastPass: { startedAt: string; durationMs: number; result: 'ok' | 'error'; actions: number; error: Reason | null } | null;
    models: { total: number; desired: number; ready: number; byPhase: Record<string, number> };
    nodes: { total: number; reachable: number };
  };
  /** Key, text, and whether the line is a problem to act on (shown in red). */
  control: [string, string, boolean?][];
  rejected: { revision: string; problems: { where: string; message: string; code: string }[]; hint: string } | null;
  groups: { phase: string; blurb: string | null; models: PageModel[] }[];
  nodes: PageNode[];
  /** The page of the models the groups hold (src/ui/view-page.ts). */
  page?: PageInfo;
}
export interface PageInfo {
  page: number;
  size: number;
  pages: number;
  matched: number;
  phase: string | null;
  node: string | null;
  q: string | null;
}
/** What changed on the page since the frame before (SSE `event: patch`). */
export interface ViewPatch {
  at: string;
  status: PageView['status'];
  control: PageView['control'];
  rejected: PageView['rejected'];
  nodes?: PageNode[];
  page: PageInfo;
  order: string[];
  upsert: PageModel[];
  blurbs: Record<string, string>;
}
export interface FleetEvent {
  seq: number;
  at: string;
  kind: string;
  model: string | null;
  node: string | null;
  replica: string | null;
  code: string | null;
  message: string;
  hint: string | null;
}
