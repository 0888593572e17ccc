/**
 * Certificate expiry, read from disk at every scrape: a renewed file shows at once, without a
 * restart, and a file that cannot be read or parsed is its own series
 * (llmgw_certificate_read_errors{path} = 1) instead of a silent gap.
 */
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Gauge, type Registry } from 'prom-client';
import { MetricNames as N } from './names.js';

export type CertificateReading =
  | { readonly path: string; readonly ok: true; readonly expirySeconds: number }
  | { readonly path: string; readonly ok: false; readonly error: string };

const PEM_CERT_RE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

/**
 * The earliest expiry (unix seconds) among the certificates in a PEM file (a chain expires with its
 * first certificate to expire) or of a single DER certificate.
 */
export function certificateExpirySeconds(data: Buffer): number {
  const pems = data.toString('latin1').match(PEM_CERT_RE);
  const certs = pems ? pems.map((pem) => new X509Certificate(pem)) : [new X509Certificate(data)];
  let earliest = Infinity;
  for (const cert of certs) {
    const ms = Date.parse(cert.validTo);
    if (!Number.isFinite(ms)) throw new Error(`unparseable validTo: ${cert.validTo}`);
    earliest = Math.min(earliest, ms / 1000);
  }
  return earliest;
}

export async function readCertificate(path: string): Promise<CertificateReading> {
  try {
    return { path, ok: true, expirySeconds: certificateExpirySeconds(await readFile(path)) };
  } catch (err) {
    return { path, ok: false, error: err instanceof Error ? err.message : String(err) };
  }
}

/** Registers the certificate gauges; `paths` is called at every scrape. */
export function registerCertificateMetrics(registry: Registry, paths: () => readonly string[]): void {
  // Both gauges are collected in the same scrape: read the files once for both.
  let inFlight: Promise<readonly CertificateReading[]> | null = null;
  const readAll = (): Promise<readonly CertificateReading[]> => {
    if (!inFlight) {
      inFlight = (async () => {
        try {
          return await Promise.all([...new Set(paths())].map(readCertificate));
        } finally {
          inFlight = null;
        }
      })();
    }
    return inFlight;
  };

  new Gauge({
    name: N.certificateExpiryTimestampSeconds,
    help: 'When the certificate file expires (earliest notAfter in the file), read from disk at each scrape.',
    labelNames: ['path'],
    registers: [registry],
    async collect() {
      const readings = await readAll();
      this.reset();
      for (const r of readings) if (r.ok) this.set({ path: r.path }, r.expirySeconds);
    },
  });
  new Gauge({
    name: N.certificateReadErrors,
    help: '1 when the certificate file could not be read or parsed at this scrape, 0 when it could.',
    labelNames: ['path'],
    registers: [registry],
    async collect() {
      const readings = await readAll();
      this.reset();
      for (const r of readings) this.set({ path: r.path }, r.ok ? 0 : 1);
    },
  });
}
