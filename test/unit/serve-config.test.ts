/** `llmgw serve` settings: the router's body limit is a size, and a bad one is refused, not ignored. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { UsageError } from '../../src/cli/args.js';
import { resolveConfig, type ConfigSources } from '../../src/serve/config.js';

const sources = (flags: ConfigSources['flags'], env: NodeJS.ProcessEnv = {}): ConfigSources => ({ flags: { fleet: '/srv/fleet', ...flags }, env, file: {}, cwd: '/tmp' });

describe('serve config: --body-limit', () => {
  test('bytes or a size with a unit; unset leaves the router default', () => {
    assert.equal(resolveConfig(sources({ bodyLimit: '1048576' })).router.bodyLimitBytes, 1048576);
    assert.equal(resolveConfig(sources({ bodyLimit: '16MiB' })).router.bodyLimitBytes, 16 * 2 ** 20);
    assert.equal(resolveConfig(sources({}, { LLMGW_BODY_LIMIT: '2KiB' })).router.bodyLimitBytes, 2048);
    assert.equal(resolveConfig(sources({})).router.bodyLimitBytes, null);
  });

  test('anything else is a usage error naming the setting (it used to turn the limit off)', () => {
    for (const bad of ['lots', '0', '-5', '12 parsecs']) {
      assert.throws(() => resolveConfig(sources({ bodyLimit: bad })), (e) => e instanceof UsageError && /--body-limit/.test(e.message) && e.message.includes(JSON.stringify(bad)), bad);
    }
  });
});
