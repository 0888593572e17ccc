/**
 * Every node operation (its script and the parser of its output), for the driver and for the
 * checks over all scripts (test/faults/shellcheck-scripts.test.ts renders every exported *Script).
 */
export * from './engine.js';
export * from './engine-artifact.js';
export * from './engine-build.js';
export * from './model-fetch.js';
export * from './observe.js';
export * from './prelude.js';
export * from './replica-inspect.js';
export * from './replica-log.js';
export * from './replica-start.js';
export * from './replica-stop.js';
export * from './rpc-worker.js';
export * from './sections.js';
