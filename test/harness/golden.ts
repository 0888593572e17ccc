/** Golden-file comparison; LLMGW_UPDATE_GOLDEN=1 rewrites the files instead. */
import { strict as assert } from 'node:assert';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { goldenDir } from './paths.js';

export function assertGolden(name: string, actual: string): void {
  const file = join(goldenDir, name);
  const text = actual.endsWith('\n') ? actual : `${actual}\n`;
  if (process.env.LLMGW_UPDATE_GOLDEN === '1' || !existsSync(file)) {
    if (process.env.CI && !existsSync(file)) assert.fail(`golden file ${name} is missing`);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, text);
    return;
  }
  assert.equal(text, readFileSync(file, 'utf8'), `output differs from test/golden/${name} (LLMGW_UPDATE_GOLDEN=1 to accept)`);
}
