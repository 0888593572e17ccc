/**
 * etcd over TLS at an IP address (`--etcd https://10.0.0.5:2379`) on Node 26: grpc-js (1.14, under
 * etcd3) passes the endpoint's host to tls.connect as `servername` even when it is an IP address.
 * RFC 6066 allows no IP address there; Node 24 and older dropped it with warning DEP0123, Node 26
 * throws ERR_INVALID_ARG_VALUE, so no connection is ever made. This drops an IP `servername`
 * before tls.connect, as Node 24 did: no SNI is sent, and the server's certificate is still checked
 * against the IP address (tls checks `host` when there is no `servername`).
 */
import { isIP } from 'node:net';
import tls from 'node:tls';

let installed = false;

/** Wraps tls.connect (the module object grpc-js calls through) once per process. */
export function dropIpServername(): void {
  if (installed) return;
  installed = true;
  const original = tls.connect;
  const wrapped = function (this: unknown, ...args: unknown[]): tls.TLSSocket {
    const o = args[0];
    if (o !== null && typeof o === 'object' && typeof (o as tls.ConnectionOptions).servername === 'string' && isIP((o as tls.ConnectionOptions).servername!) !== 0) {
      const rest = { ...(o as tls.ConnectionOptions) };
      delete rest.servername;
      args[0] = rest;
    }
    return (original as (...a: unknown[]) => tls.TLSSocket).apply(this, args);
  };
  (tls as { connect: unknown }).connect = wrapped;
}
