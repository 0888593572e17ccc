/**
 * The fault suite's summary: each fault test appends one JSON line per fault (what was injected,
 * what held) to the file named by LLMGW_FAULT_REPORT, which scripts/run-tests.js sets per run and
 * prints after the test run. Only a test that got to its assertions records, so a line means held.
 */
import { appendFileSync } from 'node:fs';

export interface FaultLine {
  /** The fault's number in issue 17 and a short name, e.g. "1 engine key fails open". */
  readonly fault: string;
  readonly injected: string;
  readonly held: string;
}

export function recordFault(line: FaultLine): void {
  const file = process.env.LLMGW_FAULT_REPORT;
  if (!file) return;
  appendFileSync(file, `${JSON.stringify(line)}\n`);
}
