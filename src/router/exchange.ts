/**
 * One proxied request, from its headers to its response's close: `Exchange`, made once in
 * `RouterCore.handle()` (core.ts) and handed whole to `route`, `proxy`, `dispatch`, the slot queues
 * and the call to a replica (proxy.ts). What arrives is set once (the response, the key, the times);
 * what the body says is filled in by `route` (the model, the affinity key, the canary side); what the
 * answer says (the replica, the tokens, the reason) is filled in on the way back and read at the
 * close by key-usage.ts, which records the usage and ends the limits' ticket.
 *
 * One object per request, with every field set in the constructor (one shape): it replaces the
 * usage record that hung on the response and the half-made request a queue held.
 */
import type { ServerResponse } from 'node:http';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import type { TokenUsage } from '../metrics/ports.js';
import type { CompiledSpec, KeyGrant } from './auth.js';
import type { Split } from './canary.js';
import type { Ticket } from './limits.js';
import { NO_TOKENS } from './usage.js';

const NO_BODY = Buffer.alloc(0);

/** What key-usage.ts records at the response's close: the key, the model, and what the answer said. */
export interface ExchangeUsage {
  readonly res: ServerResponse;
  /** performance.now() at the request's arrival. */
  readonly t0: number;
  /** The API key's name ('' with auth off). */
  readonly keyName: string;
  model: string;
  /** The replica that answered ('' until one did). */
  replica: string;
  /** The catalogue code the router answered with ('' for the replica's own answer). */
  reason: string;
  tokens: TokenUsage;
  /** The request ended before its response did; `tokens` are what was seen (usage.ts earlyUsageOf). */
  early: boolean;
  /** The key's limits' hold, ended at the close with the tokens (null: the key has no limits). */
  ticket: Ticket | null;
}

export class Exchange implements ExchangeUsage {
  readonly keyName: string;
  /** The request path (an allowed POST /v1/… path, api-paths.ts). */
  readonly path: string;
  model = '';
  /** The model's spec (set by `route`, with `model`). */
  spec: ModelSpec | null = null;
  /** The request body's bytes, forwarded as they came. */
  body: Buffer = NO_BODY;
  /**
   * The request's affinity key (affinity.ts), read from the parsed body once, at arrival: a request
   * waiting for activation or in the queue holds only its bytes (counted by maxBufferedBytes), never
   * the parsed object, which can be many times their size.
   */
  key: number | null = null;
  /** Slots per replica: the profile's parallel (Infinity when the spec has no such profile). */
  slots = Infinity;
  /** Its side of the model's canary step, read at arrival (canary.ts); null outside one. */
  split: Split | null = null;
  /** Its key is not trusted: the prompt-cache figures are taken out of the response (redact.ts). */
  redact = false;
  // what the answer said, read at the close (ExchangeUsage above)
  replica = '';
  reason = '';
  tokens: TokenUsage = NO_TOKENS;
  early = false;
  ticket: Ticket | null = null;

  constructor(
    readonly res: ServerResponse,
    readonly t0: number,
    /** The fleet spec the request was admitted under (its compiled form), and what its key may use. */
    readonly fleetSpec: FleetSpec,
    readonly compiled: CompiledSpec,
    readonly grant: KeyGrant,
    path: string,
  ) {
    this.keyName = grant.name;
    this.path = path;
  }
}
