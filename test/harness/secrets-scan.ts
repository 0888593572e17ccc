/**
 * Secrets never show: every log line, status, metric and admin response a fault test collected is
 * scanned for every secret in play (engine key, router keys, admin token, webhook secret, download
 * tokens). A hit names the secret and where, never the value.
 */
import { strict as assert } from 'node:assert';

export interface Collected {
  readonly where: string;
  readonly text: string;
}

export class SecretsScan {
  private readonly secrets = new Map<string, string>();
  private readonly collected: Collected[] = [];

  /** A secret to look for (values shorter than 8 characters would match by chance and are refused). */
  secret(name: string, value: string): this {
    assert.ok(value.length >= 8, `secret ${name} is too short to scan for`);
    this.secrets.set(name, value);
    return this;
  }

  collect(where: string, text: string): void {
    this.collected.push({ where, text });
  }

  /** How much was scanned, for the fault report. */
  get summary(): string {
    const bytes = this.collected.reduce((n, c) => n + c.text.length, 0);
    return `${this.secrets.size} secrets absent from ${this.collected.length} collected texts (${bytes} bytes)`;
  }

  assertClean(): void {
    assert.ok(this.collected.length > 0, 'nothing was collected to scan');
    assert.ok(this.secrets.size > 0, 'no secrets to scan for');
    const hits: string[] = [];
    for (const [name, value] of this.secrets) {
      for (const c of this.collected) if (c.text.includes(value)) hits.push(`${name} in ${c.where}`);
    }
    assert.deepEqual(hits, [], `secrets found: ${hits.join(', ')}`);
  }
}
