/**
 * Just enough of a PromQL lexer to say which metrics an expression selects and which label names it
 * matches on each: strings, comments, durations and numbers are skipped; an identifier followed by
 * `(` is a function or aggregation; the parenthesised lists after by/without/on/ignoring/
 * group_left/group_right are label names, not metrics. Not a parser: it does not check syntax
 * (promtool does, in alerts-promtool.test.ts).
 */

/** One metric selector: the metric name and the label names its `{…}` matches on. */
export interface Selector {
  readonly metric: string;
  readonly labels: readonly string[];
}

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'inf', 'nan', 'atan2']);
/** Aggregation operators: `sum by (l) (…)` has no `(` right after the name. */
const AGGREGATIONS = new Set(['sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk', 'quantile', 'limitk', 'limit_ratio']);
const LABEL_LISTS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);

type Token = { kind: 'ident'; text: string } | { kind: 'punct'; text: string };

function tokens(expr: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  while (i < expr.length) {
    const c = expr[i]!;
    if (c === '"' || c === "'" || c === '`') {
      // a string (label values, regexes): skipped whole, escapes included
      i++;
      while (i < expr.length && expr[i] !== c) i += expr[i] === '\\' && c !== '`' ? 2 : 1;
      i++;
    } else if (c === '#') {
      while (i < expr.length && expr[i] !== '\n') i++;
    } else if (c === '[') {
      // a range or subquery duration: [5m], [1h:5m]
      while (i < expr.length && expr[i] !== ']') i++;
      i++;
    } else if (/[0-9.]/.test(c)) {
      // numbers and durations (offset 5m, 1e3, 0x1f)
      while (i < expr.length && /[0-9a-zA-Z._]/.test(expr[i]!)) i++;
    } else if (/[a-zA-Z_:]/.test(c)) {
      const start = i;
      while (i < expr.length && /[a-zA-Z0-9_:]/.test(expr[i]!)) i++;
      out.push({ kind: 'ident', text: expr.slice(start, i) });
    } else {
      if (!/\s/.test(c)) out.push({ kind: 'punct', text: c });
      i++;
    }
  }
  return out;
}

/** The metric selectors of a PromQL expression, in order. */
export function selectors(expr: string): Selector[] {
  const t = tokens(expr);
  const out: Selector[] = [];
  for (let i = 0; i < t.length; i++) {
    const tok = t[i]!;
    if (tok.kind === 'punct') {
      if (tok.text === '{') {
        // a selector with no name before it: {__name__="x"} (not used by llmgw; its labels are skipped)
        while (i < t.length && t[i]!.text !== '}') i++;
      }
      continue;
    }
    const next = t[i + 1];
    if (LABEL_LISTS.has(tok.text.toLowerCase()) && next?.text === '(') {
      while (i < t.length && t[i]!.text !== ')') i++;
      continue;
    }
    if (KEYWORDS.has(tok.text.toLowerCase()) || AGGREGATIONS.has(tok.text.toLowerCase())) continue;
    if (next?.text === '(') continue; // a function or aggregation
    const labels: string[] = [];
    if (next?.text === '{') {
      i += 2;
      // label matchers: name op "value" (the values were skipped as strings)
      let expectName = true;
      for (; i < t.length && t[i]!.text !== '}'; i++) {
        const m = t[i]!;
        if (m.kind === 'ident' && expectName) {
          labels.push(m.text);
          expectName = false;
        } else if (m.text === ',') expectName = true;
      }
    }
    out.push({ metric: tok.text, labels });
  }
  return out;
}

/** The PromQL inside a Go template (an alert annotation): the format strings of its `printf … | query` calls. */
export function templateQueries(template: string): string[] {
  return [...template.matchAll(/printf\s+(?:"((?:[^"\\]|\\.)*)"|`([^`]*)`)/g)].map((m) => (m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2]!).replace(/%q/g, '"x"'));
}
