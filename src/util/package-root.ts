import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The installed package's root (holding package.json and schemas/), from src/ or dist/src/. */
export const packageRoot: string = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'schemas'))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error('llmgw: package root (package.json + schemas/) not found');
    dir = up;
  }
})();
