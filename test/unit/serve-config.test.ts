/** `llmgw serve` settings: the router's body limit is a size, and a bad one is refused, not ignored. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import { isUsageError } from '../../src/errors/catalogue.js';
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
      assert.throws(() => resolveConfig(sources({ bodyLimit: bad })), (e) => isUsageError(e) && /--body-limit/.test(e.message) && e.message.includes(JSON.stringify(bad)), bad);
    }
  });
});

describe('serve config: --etcd and the election timings', () => {
  test('without --etcd: one instance, and etcd-only settings are refused rather than ignored', () => {
    assert.equal(resolveConfig(sources({})).etcd, null);
    assert.throws(() => resolveConfig(sources({ leaseTtl: '20s' })), (e) => isUsageError(e) && /--lease-ttl needs --etcd/.test(e.message));
  });

  test('endpoints from flag or env; defaults in the range controller-runtime uses', () => {
    const c = resolveConfig(sources({ etcd: 'http://10.0.0.1:2379, http://10.0.0.2:2379' })).etcd!;
    assert.deepEqual(c.hosts, ['http://10.0.0.1:2379', 'http://10.0.0.2:2379']);
    assert.deepEqual([c.prefix, c.leaseTtlSeconds, c.renewDeadlineMs, c.retryPeriodMs, c.tls, c.auth], ['/llmgw', 15, 10_000, 2_000, null, null]);
    const e = resolveConfig(sources({}, { LLMGW_ETCD: 'https://etcd:2379', LLMGW_ETCD_PREFIX: '/fleets/prod/', LLMGW_ETCD_USER: 'llmgw', LLMGW_ETCD_PASSWORD_FILE: 'pw' })).etcd!;
    assert.equal(e.prefix, '/fleets/prod');
    assert.deepEqual(e.tls, { ca: null, cert: null, key: null }, 'https endpoints use TLS (the system CAs)');
    assert.deepEqual(e.auth, { username: 'llmgw', passwordFile: '/tmp/pw' });
  });

  test('bad values are usage errors that say what to give', () => {
    const bad: [ConfigSources['flags'], RegExp][] = [
      [{ etcd: 'etcd:2379' }, /--etcd takes endpoints/],
      [{ etcd: ' , ' }, /--etcd is empty/],
      [{ etcd: 'http://e:2379', etcdPrefix: 'llmgw' }, /--etcd-prefix must start with \//],
      [{ etcd: 'http://e:2379', etcdPrefix: `/${'x'.repeat(200)}` }, /at most 128 characters/],
      [{ etcd: 'http://e:2379', etcdCert: 'c.pem' }, /--etcd-cert-file and --etcd-key-file go together/],
      [{ etcd: 'http://e:2379', etcdUser: 'u' }, /--etcd-user and --etcd-password-file go together/],
      [{ etcd: 'http://e:2379', renewDeadline: '15s' }, /--renew-deadline .* must be below --lease-ttl/],
      [{ etcd: 'http://e:2379', retryPeriod: '10s' }, /--retry-period .* must be below --renew-deadline/],
      [{ etcd: 'http://e:2379', leaseTtl: '2500ms' }, /--lease-ttl must be whole seconds/],
    ];
    for (const [flags, re] of bad) assert.throws(() => resolveConfig(sources(flags)), (e) => isUsageError(e) && re.test(e.message), JSON.stringify(flags));
  });
});

describe('serve config: --shutdown-grace', () => {
  test('a duration from flag, env or file; 30 s by default', () => {
    assert.equal(resolveConfig(sources({})).shutdownGraceMs, 30_000);
    assert.equal(resolveConfig(sources({ shutdownGrace: '2m' })).shutdownGraceMs, 120_000);
    assert.equal(resolveConfig(sources({}, { LLMGW_SHUTDOWN_GRACE: '500ms' })).shutdownGraceMs, 500);
    assert.equal(resolveConfig({ ...sources({}), file: { shutdown_grace: '45s' } }).shutdownGraceMs, 45_000);
  });

  test('anything else is a usage error naming the setting', () => {
    for (const bad of ['soon', '0', '-1s']) {
      assert.throws(() => resolveConfig(sources({ shutdownGrace: bad })), (e) => isUsageError(e) && /--shutdown-grace/.test(e.message), bad);
    }
  });
});

describe('serve config: auth off means this machine only (#36, N7)', () => {
  test('a port with auth off listening beyond loopback is refused unless forced; --allowed-hosts is parsed', () => {
    const refused = (f: ConfigSources['flags'], env: NodeJS.ProcessEnv = {}): string => {
      try {
        resolveConfig(sources(f, env));
      } catch (e) {
        assert.ok(isUsageError(e), String(e));
        return (e as Error).message;
      }
      return 'accepted';
    };
    assert.match(refused({ noAdminAuth: true, adminListen: '0.0.0.0:8081' }), /admin API has authentication off .* 0\.0\.0\.0.*--unsafe-listen-without-auth/);
    assert.match(refused({ noRouterAuth: true, routerListen: '10.0.0.5:8080' }), /router has authentication off .* 10\.0\.0\.5/);
    assert.match(refused({}, { LLMGW_NO_ROUTER_AUTH: '1', LLMGW_ROUTER_LISTEN: '[::]:8080' }), /router has authentication off/);
    // loopback, auth on, or forced: accepted
    assert.equal(refused({ noAdminAuth: true, noRouterAuth: true }), 'accepted');
    assert.equal(refused({ noAdminAuth: true, adminListen: 'localhost:8081', routerListen: '0.0.0.0:8080' }), 'accepted');
    assert.equal(refused({ adminListen: '0.0.0.0:8081', routerListen: '0.0.0.0:8080' }), 'accepted');
    const forced = resolveConfig(sources({ noAdminAuth: true, adminListen: '0.0.0.0:8081', unsafeListenWithoutAuth: true }));
    assert.equal(forced.unsafeListenWithoutAuth, true);
    assert.deepEqual(resolveConfig(sources({ allowedHosts: 'LLM.lan, 10.0.0.5:8080' })).allowedHosts, ['llm.lan', '10.0.0.5']);
    assert.match(refused({ allowedHosts: 'http://llm.lan' }), /--allowed-hosts/);
  });
});
