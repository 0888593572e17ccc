/**
 * Fault 9: a force-push of the fleet branch that replays a commit carrying `Llmgw-Retry:`. The
 * rewritten history is applied as a new revision, but the replayed retry (same author, author time
 * and message, new commit id) does not unpark the model a second time; a new retry commit still does.
 * Real git http-backend, the git CLI (cherry-pick onto a new base, `push --force`), sshd, llama-server.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';

let fleet: TestFleet;
let ctl: TestController;
const model = (n: string) => ctl.reconciler.model(n)!;
const handled = (): number => ctl.logs.filter((l) => l.msg === 'retry handled' && l.model === 'kev').length;

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  delete files['models/huge.yaml'];
  await fleet.push(files, 'initial fleet');
  ctl = await fleet.startController();
});

after(async () => {
  await fleet?.cleanup();
});

describe('fault 9: a force-push replaying Llmgw-Retry trailers', () => {
  it('the rewritten history applies; the replayed retry does not unpark kev again; a new retry does', async () => {
    await ctl.until('kev parked', 90_000, () => model('kev').phase === 'parked');
    const op = fleet.operator;
    const beforeRetry = await op.head();
    const retryCommit = await fleet.push({}, 'retry kev\n\nLlmgw-Retry: kev\n');
    await ctl.until('the retry handled and kev parked again', 90_000, () => handled() === 1 && model('kev').phase === 'parked' && (ctl.starts.get('kev') ?? 0) >= 10);
    const starts = ctl.starts.get('kev') ?? 0;

    // rewrite: a new commit under the retry, the retry cherry-picked on top (new id, same content)
    await op.git(['reset', '-q', '--hard', beforeRetry]);
    await op.write({ 'fleet.yaml': `${fleet.baseFiles()['fleet.yaml']}# reworded history\n` });
    await op.commit('fleet: a comment, pushed under the retry');
    await op.git(['cherry-pick', '--allow-empty', '--keep-redundant-commits', retryCommit]);
    const rewritten = await op.head();
    assert.notEqual(rewritten, retryCommit);
    assert.equal(await op.git(['log', '-1', '--format=%B', rewritten]), await op.git(['log', '-1', '--format=%B', retryCommit]));
    await op.git(['-c', 'credential.helper=', 'push', '-q', '--force', fleet.git.authUrl('fleet.git'), 'HEAD:main']);

    await ctl.until('the rewritten head applied', 90_000, () => ctl.reconciler.snapshot().appliedRevision === rewritten);
    for (let i = 0; i < 5; i++) await ctl.reconciler.requestPass('test');
    assert.equal(model('kev').phase, 'parked', 'still parked');
    assert.equal(model('kev').consecutiveFailures, 5);
    assert.equal(ctl.starts.get('kev') ?? 0, starts, 'no start after the force-push');
    assert.equal(handled(), 1, 'the replayed trailer was not handled again');

    // a genuinely new retry still works
    await fleet.push({}, 'retry kev once more\n\nLlmgw-Retry: kev\n');
    await ctl.until('the new retry handled', 90_000, () => handled() === 2 && (ctl.starts.get('kev') ?? 0) > starts);

    const scan = new SecretsScan().secret('engine key', 'test-engine-key').secret('git token', fleet.git.token);
    scan.collect('controller log', ctl.logs.map((l) => JSON.stringify(l)).join('\n'));
    scan.collect('snapshot', JSON.stringify(ctl.reconciler.snapshot()));
    scan.collect('/metrics', (await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' })).body);
    scan.assertClean();
    recordFault({
      fault: '9 force-push replays retry trailers',
      injected: 'git push --force of main rewritten under a Llmgw-Retry commit (cherry-picked: new id, same author, date and message)',
      held: `the rewritten head applied; kev stayed parked (5 failures, no start, the trailer handled once); a new retry commit unparked it; ${scan.summary}`,
    });
  });
});
