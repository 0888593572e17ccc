/**
 * Whether every router has stopped routing to a replica being drained (pure), and the port the
 * reconciler asks it through.
 *
 * A router routes from a snapshot: the leader's own router from the leader's snapshot in process
 * (it has the replica out as soon as the snapshot that says so is set), every HA standby's from the
 * published snapshot in etcd, which it hears of through a watch that may lag. Each published save
 * is known by its revision (the etcd revision of its head key: every watcher sees the same number
 * for the same save), and each standby's router writes the revision it routes from to etcd, on a
 * lease of its own (src/ha/router-revisions.ts). A drain's "nothing in flight" counts only once
 * every live router has applied a save at or after the first one that showed the replica out of
 * routing (`outAt`): before that, a lagging standby may still send it a request.
 */

/** A live router as etcd lists it: its instance id and the published revision it routes from (null: it says none). */
export interface RouterApplied {
  readonly id: string;
  readonly applied: number | null;
}

/** What the reconciler asks of the routers beyond its own (HA: src/ha/controller.ts). */
export interface RoutingAcks {
  /** The revision of the first published save that showed the replica out of routing; null: none seen yet. */
  outAt(model: string, replica: string): number | null;
  /** Every other live router and the revision it routes from; null when they cannot be read now. */
  routers(): Promise<readonly RouterApplied[] | null>;
}

/** The other routers as one look at a drain saw them (a lone controller has none: null). */
export interface RoutersSeen {
  readonly outAt: number | null;
  readonly routers: readonly RouterApplied[] | null;
}

/** Named in a drain's lines for a look that could not read the routers in etcd. */
export const ROUTERS_UNREADABLE = '(routers not readable in etcd)';
/** Named for this instance's own router while its snapshot still offers the replica. */
export const THIS_ROUTER = '(this instance)';

/**
 * The routers that may still send the replica a request: this instance's own while its snapshot
 * offers it, every other live router whose applied revision is below `outAt` (all of them while no
 * save showing it out has been seen; one with no revision counts as behind), and ROUTERS_UNREADABLE
 * when they could not be read. Empty: every router routes without it.
 */
export function routersBehind(localOut: boolean, seen: RoutersSeen | null): string[] {
  const behind = localOut ? [] : [THIS_ROUTER];
  if (seen === null) return behind;
  if (seen.routers === null) return [...behind, ROUTERS_UNREADABLE];
  for (const r of seen.routers) {
    if (seen.outAt === null || r.applied === null || r.applied < seen.outAt) behind.push(r.id);
  }
  return behind;
}
