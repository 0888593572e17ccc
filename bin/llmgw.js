#!/usr/bin/env node
// The llmgw command. The TypeScript sources are compiled to dist/ by `npm ci` (prepare) or `npm run build`.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const main = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(fileURLToPath(main))) {
  console.error('llmgw: not built yet; run `npm run build` (npm ci does it for you)');
  process.exit(2);
}
const { run } = await import(main.href);
process.exitCode = await run(process.argv.slice(2));
