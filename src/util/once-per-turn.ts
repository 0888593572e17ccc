/**
 * `fn` run once at the next turn of the event loop (setImmediate), however many times the returned
 * function is called before then: a burst of requests in one turn costs one run.
 */
export function oncePerTurn(fn: () => void): () => void {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    setImmediate(() => {
      queued = false;
      fn();
    });
  };
}
