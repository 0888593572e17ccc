/**
 * Node-side fencing: every node keeps one owner record, `<data dir>/.locks/owner`, and checks it in
 * the same script as the action it guards, under an exclusive flock of `.locks/owner.lock` (fd 7):
 *
 * - no record (or an unreadable one): the action's fence claims it;
 * - the same owner: an epoch below the record's is refused (NODE_FENCED: a newer leader of the same
 *   cluster has acted), else the record is renewed (epoch = the higher one, renewedAt = now) — unless
 *   the fence names that very record (its epoch and seq) as one to supersede: the leader judged its
 *   epoch above etcd's revision, not one this etcd made (a restore, a forgery; ownership.ts), and it
 *   is taken over like an expired one. Any write since the judgement changed seq, so a record a real
 *   newer leader wrote is never superseded;
 * - another owner whose record has expired (node clock: now - renewedAt > its ttl): taken over;
 * - another owner whose record holds: refused (NODE_OWNED).
 *
 * The record is one line, `1 <owner b64> <epoch> <renewedAt> <ttl> <label b64> <seq>`: owner and label
 * are free text and travel base64-encoded (inside shq quotes as well), so no value of theirs reaches
 * the shell as anything but data; seq counts the record's writes (a total order of the actions the
 * node accepted, recorded in each replica's state.json).
 *
 * This file holds the shell functions (spliced into the scripts of scripts.ts), the checks of a
 * Fence's values, and the parsing of what the scripts report back.
 */
import { LlmgwError } from '../errors/catalogue.js';
import type { Fence, NodeFenceView } from './driver.js';
import { shq } from './shell.js';

/** Exit code of a script whose fence check refused the action (the `llmgw-fence:` line on stderr says why). */
export const EXIT_FENCE_REFUSED = 77;
/** How long a script waits for the owner lock (seconds); holders keep it for a check or one launch. */
export const FENCE_LOCK_WAIT_SECONDS = 20;

const MAX_OWNER = 256;
const MAX_LABEL = 512;

/** Throws (a programming error, not a node's) unless the fence's values are fit to send. */
export function checkFence(f: Fence): Fence {
  if (typeof f.owner !== 'string' || f.owner === '' || f.owner.length > MAX_OWNER) throw new Error(`fence owner must be 1..${MAX_OWNER} characters, got ${JSON.stringify(f.owner)}`);
  if (typeof f.label !== 'string' || f.label.length > MAX_LABEL) throw new Error(`fence label must be at most ${MAX_LABEL} characters`);
  if (!Number.isSafeInteger(f.epoch) || f.epoch < 0) throw new Error(`fence epoch must be a non-negative integer, got ${f.epoch}`);
  if (!Number.isSafeInteger(f.ttlSeconds) || f.ttlSeconds < 1 || f.ttlSeconds > 1e9) throw new Error(`fence ttlSeconds must be an integer from 1, got ${f.ttlSeconds}`);
  const s = f.supersede;
  if (s !== undefined && (!Number.isSafeInteger(s.epoch) || s.epoch <= f.epoch || !Number.isSafeInteger(s.seq) || s.seq < 0)) {
    throw new Error(`fence supersede must name a record above the fence's epoch ${f.epoch} by its epoch and seq, got ${JSON.stringify(s)}`);
  }
  return f;
}

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');
const unb64 = (s: string): string => Buffer.from(s, 'base64').toString('utf8');

/**
 * The shell variables and functions of the fence, for a script acting (or looking) with `f`.
 * Functions:
 *   llmgw_fence_lock     take the owner lock (fd 7; children must not inherit it: `7>&-`)
 *   llmgw_fence_unlock   release it
 *   llmgw_fence_check M  under the lock: decide and (when mine) write the record; M = act or look.
 *                        A failed write (a full disk) is tolerated by a look, and by an action when
 *                        it was a renewal only (the record names this owner at this epoch already);
 *                        an action that had to claim, take over or raise the epoch fails then
 *   llmgw_fence_act      lock + check; refuse (exit EXIT_FENCE_REFUSED) unless mine; the lock stays held
 * After a check: fence_state (mine | other | newer-epoch), fence_line (what the driver parses), fence_seq,
 * fence_took (set when another owner's expired record, or a superseded one of ours, was taken over).
 */
export function fenceShell(dataDir: string, f: Fence): string {
  checkFence(f);
  return `fence_dir=${shq(`${dataDir}/.locks`)}
fo=${shq(b64(f.owner))}
fl=${shq(b64(f.label))}
fe=${int(f.epoch)}
ft=${int(f.ttlSeconds)}
fxe=${f.supersede ? int(f.supersede.epoch) : "''"}
fxq=${f.supersede ? int(f.supersede.seq) : "''"}
llmgw_uint() { case $1 in ''|*[!0-9]*) return 1;; esac; [ \${#1} -le 18 ]; }
llmgw_b64() { case $1 in ''|*[!A-Za-z0-9+/=]*) return 1;; esac; return 0; }
llmgw_fence_lock() {
  command -v flock >/dev/null 2>&1 || llmgw_fail NODE_COMMAND_FAILED "flock (util-linux) is not installed on the node; the owner record needs it"
  mkdir -p "$fence_dir" || exit 1
  exec 7>>"$fence_dir/owner.lock" || exit 1
  flock -w ${FENCE_LOCK_WAIT_SECONDS} 7 || llmgw_fail NODE_TIMEOUT "the node's owner lock was held for more than ${FENCE_LOCK_WAIT_SECONDS} s"
}
llmgw_fence_unlock() { exec 7>&-; }
llmgw_fence_check() {
  _now=$(date +%s)
  _v=; _o=; _e=; _t=; _l=; _b=; _q=
  if [ -f "$fence_dir/owner" ]; then read -r _v _o _e _t _l _b _q _rest <"$fence_dir/owner" || true; fi
  fence_took=
  _renew=0
  if [ "$_v" = 1 ] && llmgw_b64 "$_o" && llmgw_uint "$_e" && llmgw_uint "$_t" && llmgw_uint "$_l" && llmgw_b64 "$_b" && llmgw_uint "$_q"; then
    _ago=$((_now - _t))
    if [ "$_o" = "$fo" ]; then
      if [ "$fe" -lt "$_e" ]; then
        # a record the leader judged not made by this etcd, unchanged since (same epoch and seq): taken over
        if [ "$_e" = "$fxe" ] && [ "$_q" = "$fxq" ]; then fence_state=mine; fence_took="$_o $_e $_ago $_b"; else fence_state=newer-epoch; fi
      else fence_state=mine; [ "$fe" = "$_e" ] && _renew=1; fi
    elif [ "$_ago" -gt "$_l" ]; then
      fence_state=mine; fence_took="$_o $_e $_ago $_b"
    else
      fence_state=other
    fi
  else
    [ -f "$fence_dir/owner" ] && echo "the node's owner record is unreadable; claiming it" >&2
    fence_state=mine; _q=0; _ago=0
  fi
  if [ "$fence_state" = mine ]; then
    fence_seq=$((_q + 1))
    if ! { printf '1 %s %s %s %s %s %s\\n' "$fo" "$fe" "$_now" "$ft" "$fl" "$fence_seq" >"$fence_dir/owner.tmp" && mv -f "$fence_dir/owner.tmp" "$fence_dir/owner"; }; then
      rm -f "$fence_dir/owner.tmp" 2>/dev/null
      # a renewal only (the record names this owner at this epoch already) may fail, on a full disk
      # say; a claim, a take-over or a higher epoch must be on record before an action goes on
      if [ "$1" = act ] && [ $_renew = 0 ]; then
        _a=$(df -Pk "$fence_dir" 2>/dev/null | tail -n 1 | awk '{print $4}')
        case $_a in ''|*[!0-9]*) ;; *) [ "$_a" -lt 1024 ] && llmgw_fail NODE_DISK_FULL "no space left on the node's data dir for its owner record ($_a KiB free)";; esac
        llmgw_fail NODE_COMMAND_FAILED "could not write the node's owner record"
      fi
      echo "could not renew the node's owner record" >&2
    fi
    fence_line="mine $fo $fe 0 $ft $fl $fence_seq"
  else
    fence_seq=$_q
    fence_line="$fence_state $_o $_e $_ago $_l $_b $_q"
  fi
}
llmgw_fence_act() {
  llmgw_fence_lock
  llmgw_fence_check act
  if [ "$fence_state" != mine ]; then printf 'llmgw-fence: %s\\n' "$fence_line" >&2; exit ${EXIT_FENCE_REFUSED}; fi
  [ -z "$fence_took" ] || printf 'llmgw-fence-took: %s\\n' "$fence_took" >&2
}`;
}

/** What a fence check reported: the record after the check (or the one that refused). */
export interface FenceReport {
  readonly state: NodeFenceView['state'];
  readonly owner: string;
  readonly label: string;
  readonly epoch: number;
  readonly renewedAgoSeconds: number;
  readonly ttlSeconds: number;
  readonly seq: number;
}

/** Parses a fence_line: `<state> <owner b64> <epoch> <ago> <ttl> <label b64> <seq>`; null when it is not one. */
export function parseFenceLine(line: string): FenceReport | null {
  const m = /^(mine|other|newer-epoch) ([A-Za-z0-9+/=]+) (\d+) (-?\d+) (\d+) ([A-Za-z0-9+/=]+) (\d+)$/.exec(line.trim());
  if (!m) return null;
  return {
    state: m[1] as FenceReport['state'], owner: unb64(m[2]!), epoch: Number(m[3]), renewedAgoSeconds: Math.max(0, Number(m[4])),
    ttlSeconds: Number(m[5]), label: unb64(m[6]!), seq: Number(m[7]),
  };
}

/** The observation's fence view from the observe script's `fence` section (its lines). */
export function parseFenceSection(lines: readonly string[]): NodeFenceView | null {
  const r = parseFenceLine(lines[0] ?? '');
  if (r === null) return null;
  const took = /^took ([A-Za-z0-9+/=]+) (\d+) (-?\d+) ([A-Za-z0-9+/=]+)$/.exec((lines[1] ?? '').trim());
  return {
    state: r.state, owner: r.owner, label: r.label, epoch: r.epoch, renewedAgoSeconds: r.renewedAgoSeconds, ttlSeconds: r.ttlSeconds, seq: r.seq,
    ...(took ? { tookOverFrom: { owner: unb64(took[1]!), epoch: Number(took[2]), renewedAgoSeconds: Number(took[3]), label: unb64(took[4]!) } } : {}),
  };
}

/** The `llmgw-fence:` line of a refused script's stderr, if any. */
export function refusalOf(stderr: string): FenceReport | null {
  for (const l of stderr.split('\n').reverse()) {
    if (l.startsWith('llmgw-fence: ')) return parseFenceLine(l.slice('llmgw-fence: '.length));
  }
  return null;
}

/** NODE_OWNED / NODE_FENCED for an action the node refused: names the node, the record's owner, epoch and last renewal. */
export function fenceError(node: string, what: string, mine: Fence, r: FenceReport): LlmgwError {
  const who = r.label === '' ? `owner ${JSON.stringify(r.owner)}` : r.label;
  const left = Math.max(0, r.ttlSeconds - r.renewedAgoSeconds);
  const expiry = `its ownership expires ${r.ttlSeconds} s after its last renewal (in ${left} s without one)`;
  const detail = {
    node, what, owner: r.owner, label: r.label, epoch: r.epoch, renewedAgoSeconds: r.renewedAgoSeconds, ttlSeconds: r.ttlSeconds,
    myOwner: mine.owner, myEpoch: mine.epoch,
  };
  if (r.state === 'newer-epoch') {
    return new LlmgwError('NODE_FENCED', `node ${node}: ${what} refused: epoch ${mine.epoch} is superseded, ${who} acted on the node at epoch ${r.epoch} and renewed its ownership ${r.renewedAgoSeconds} s ago; ${expiry}`, detail);
  }
  return new LlmgwError('NODE_OWNED', `node ${node}: ${what} refused: the node is owned by ${who} (epoch ${r.epoch}), which renewed its ownership ${r.renewedAgoSeconds} s ago; ${expiry}`, detail);
}

function int(n: number): number {
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`expected a non-negative integer, got ${n}`);
  return n;
}
