/**
 * Whether this controller acts on the fleet at all this pass (the shell of ownership.ts): the nodes'
 * owner records decide it, and etcd's revision is read only when a node shows a newer epoch, after
 * the look that saw it. Keeps what the snapshot shows of it: why this controller does not act, and
 * the owner records it took over.
 */
import type { Logger } from 'pino';
import { reasonOf, type ReasonRef } from '../errors/catalogue.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import type { NodeFleet } from './node-fleet.js';
import { forgeriesShown, needsBound, ownershipOf, takenOver, type ShownForgery } from './ownership.js';
import type { ReconcilerOptions } from './reconciler-options.js';

export class Acting {
  /** Why this controller does not act on the fleet (a node owned by another controller, or a newer epoch), or null. */
  notActing: ReasonRef | null = null;
  /** Owner records above etcd's revision this leader took over, shown for a while (ownership.ts). */
  takeovers: ShownForgery[] = [];

  constructor(
    private readonly nodes: NodeFleet,
    private readonly o: Pick<ReconcilerOptions, 'epoch' | 'epochBound' | 'onDeposed'>,
    private readonly clock: () => number,
    private readonly requestPass: (trigger: string) => void,
  ) {}

  /** After a look: whether this controller acts on the fleet this pass. */
  async check(spec: FleetSpec, log: Logger): Promise<boolean> {
    const fences = this.nodes.fences(spec);
    const ownEpoch = this.o.epoch?.() ?? 0;
    let bound: number | null = null;
    if (needsBound(fences) && this.o.epochBound) {
      try {
        bound = await this.o.epochBound();
      } catch (e) {
        log.warn({ code: reasonOf(e).code, reason: reasonOf(e).message }, 'could not read etcd\'s revision: a newer epoch on a node counts as a newer leader');
      }
    }
    const o = ownershipOf(fences, ownEpoch, bound);
    const took = takenOver(fences, ownEpoch);
    for (const r of took) log.error({ code: r.code, reason: r.message }, 'took over a node whose owner record carried an epoch this etcd did not make');
    this.takeovers = forgeriesShown(this.takeovers, took, this.clock());
    this.nodes.supersede('supersede' in o ? o.supersede : []);
    const was = this.notActing;
    this.notActing = o.acting ? null : o.reason;
    if (o.acting) {
      if (was) log.info({ was: was.code }, 'acting on the fleet again: every node reached is ours');
      return true;
    }
    if (was?.message !== o.reason.message) {
      const msg = o.deposed ? 'a newer leader acts on the fleet: stepping down' : 'supersede' in o ? 'a node\'s owner record carries an epoch this etcd did not make: taking the node over' : 'not acting on the fleet: another controller owns it';
      log.error({ code: o.reason.code, reason: o.reason.message }, msg);
    }
    if (o.deposed) this.o.onDeposed?.(o.reason);
    // the next look takes the records over (they are named in this controller's fence from now): at
    // once the first time; when the last pass had named records too (rewritten since), at the next poll
    if ('supersede' in o && was?.code !== 'NODE_EPOCH_FORGED') this.requestPass('epoch-forged');
    return false;
  }
}
