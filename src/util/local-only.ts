/**
 * "Auth off means this machine only" (#36, N7). With admin or router authentication turned off
 * (`serve --local`, `--no-admin-auth`, `--no-router-auth`) a request is served only when
 * - its `Host` names loopback (localhost, *.localhost, 127.0.0.0/8, ::1) or a host the operator
 *   configured (--allowed-hosts, and the listen address itself), so a DNS-rebound name
 *   (evil.example resolving to 127.0.0.1) gets nothing, and
 * - its `Origin`, when it sends one, is such a host too, so a web page the operator visits cannot
 *   post to the API (CSRF: a no-body POST …/retry needs no preflight).
 * Pure: the callers turn a refusal into their error envelope (FOREIGN_HOST / FOREIGN_ORIGIN).
 */
import type { IncomingHttpHeaders } from 'node:http';

export interface LocalOnly {
  /** Host names (lowercase, no port) accepted besides loopback. */
  readonly allowedHosts: readonly string[];
}

export interface ForeignRequest {
  readonly code: 'FOREIGN_HOST' | 'FOREIGN_ORIGIN';
  readonly message: string;
}

/** Whether `host` (a bare name or address, lowercase, IPv6 without brackets) is this machine's loopback. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase().replace(/\.$/, '');
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (h === '::1' || h === '0:0:0:0:0:0:0:1') return true;
  if (/^::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h)) return true;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** `host[:port]` / `[v6][:port]` → the bare lowercase host, or null when it is not of that form. */
export function hostOf(value: string): string | null {
  const v = value.trim().toLowerCase();
  const m = /^(?:\[([0-9a-f:.]+)\]|([a-z0-9._-]+))(?::(\d{1,5}))?$/.exec(v);
  if (!m) return null;
  return (m[1] ?? m[2] ?? '').replace(/\.$/, '') || null;
}

function accepted(host: string | null, o: LocalOnly): boolean {
  return host !== null && (isLoopbackHost(host) || o.allowedHosts.includes(host));
}

const show = (v: string): string => JSON.stringify(v.length > 200 ? `${v.slice(0, 200)}…` : v);

/** Why this request is refused (a foreign Host or Origin), or null when it may be served. */
export function foreignRequest(headers: IncomingHttpHeaders, o: LocalOnly): ForeignRequest | null {
  const host = headers.host;
  if (typeof host !== 'string' || !accepted(hostOf(host), o)) {
    return {
      code: 'FOREIGN_HOST',
      message: `Authentication is off, so only this machine is served: the Host ${typeof host === 'string' ? show(host) : '(none)'} is not loopback or an allowed host${o.allowedHosts.length ? ` (${o.allowedHosts.join(', ')})` : ''}.`,
    };
  }
  const origin = headers.origin;
  if (origin === undefined) return null;
  let originHost: string | null = null;
  if (typeof origin === 'string') {
    try {
      const u = new URL(origin);
      if (u.protocol === 'http:' || u.protocol === 'https:') originHost = hostOf(u.host);
    } catch {
      originHost = null;
    }
  }
  if (accepted(originHost, o)) return null;
  return { code: 'FOREIGN_ORIGIN', message: `Authentication is off, so only this machine is served: a request from the web page at ${show(String(origin))} is refused.` };
}

/** Whether a listen address is loopback only (an auth-off listener elsewhere needs forcing). */
export function isLoopbackListen(host: string): boolean {
  return isLoopbackHost(host);
}

/** The allowed hosts from a comma-separated setting (lowercase, ports and brackets dropped); null on a bad entry. */
export function parseAllowedHosts(text: string): { hosts: string[]; bad: string | null } {
  const hosts: string[] = [];
  for (const part of text.split(',').map((s) => s.trim()).filter((s) => s !== '')) {
    const h = hostOf(part);
    if (h === null) return { hosts, bad: part };
    if (!hosts.includes(h)) hosts.push(h);
  }
  return { hosts, bad: null };
}
