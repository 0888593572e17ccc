/**
 * The status page's files. The HTML and CSS are here as text; the script is src/ui/web/app.ts,
 * compiled by the same `tsc` build (tsconfig.web.json: the DOM's types) into dist/src/ui/web/app.js,
 * which ships in the package with the rest of dist/src. Nothing is fetched from anywhere else.
 */
import { readFileSync } from 'node:fs';

/** No inline script or style, nothing from another origin, no framing, no form posts. */
export const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>llmgw status</title>
<link rel="icon" href="/ui/icon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/ui/app.css">
<script type="module" src="/ui/app.js"></script>
</head>
<body>
<header class="top">
  <h1>llmgw</h1>
  <p id="conn" class="conn" role="status" aria-live="polite">connecting…</p>
</header>
<main>
  <section id="login" class="login" hidden aria-labelledby="login-title">
    <h2 id="login-title">Admin token</h2>
    <p>This controller asks for its admin token (the <code>admin-token</code> file in its state dir, or the one it was given).
      It is kept in this tab only and sent as a bearer header.</p>
    <form id="login-form" autocomplete="off">
      <label for="token">Token</label>
      <input id="token" name="token" type="password" required autocomplete="off" spellcheck="false">
      <button type="submit">Open</button>
      <p id="login-error" class="error" role="alert"></p>
    </form>
  </section>
  <div id="app" hidden>
    <section aria-labelledby="fleet-title">
      <h2 id="fleet-title">Fleet</h2>
      <dl id="fleet" class="facts"></dl>
      <div id="rejected"></div>
    </section>
    <section aria-labelledby="models-title">
      <h2 id="models-title">Models</h2>
      <p id="models-summary"></p>
      <form id="models-filter" class="filter" role="search">
        <label for="models-search">Find</label>
        <input id="models-search" type="search" placeholder="model name or alias" autocomplete="off">
        <label for="models-phase">Phase</label>
        <select id="models-phase"><option value="">all phases</option><option>parked</option><option>unplaceable</option><option>failing</option><option>starting</option><option>pending</option><option>degraded</option><option>ready</option><option>idle</option></select>
        <button id="models-prev" type="button">previous page</button>
        <button id="models-next" type="button">next page</button>
      </form>
      <p id="models-page" aria-live="polite"></p>
      <div id="groups"></div>
    </section>
    <section aria-labelledby="nodes-title">
      <h2 id="nodes-title">Nodes</h2>
      <p class="legend"><span class="swatch taken"></span> taken by llmgw replicas <span class="swatch reserve"></span> reserve (placement_reserve) <span class="swatch free"></span> free for placement</p>
      <div id="nodes"></div>
    </section>
    <section aria-labelledby="events-title">
      <h2 id="events-title">Events</h2>
      <form id="events-filter" class="filter">
        <label for="events-model">Model</label>
        <select id="events-model"><option value="">all models</option></select>
      </form>
      <ol id="events" class="events" aria-live="polite"></ol>
    </section>
  </div>
</main>
</body>
</html>
`;

const CSS = `:root { color-scheme: light dark; --fg: #1b1b1b; --bg: #fafafa; --muted: #5b5b5b; --line: #ccc;
  --bad: #b00020; --warn: #8a5a00; --ok: #1b6e20; --taken: #3b6ea5; --reserve: #888; --free: #d8e8d8; --card: #fff; }
@media (prefers-color-scheme: dark) { :root { --fg: #eee; --bg: #161616; --muted: #aaa; --line: #444; --bad: #ff7b8a;
  --warn: #f0b44a; --ok: #7fd483; --taken: #6aa0dc; --reserve: #777; --free: #2d4a2d; --card: #202020; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header.top { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: baseline; padding: .5rem 1rem; border-bottom: 1px solid var(--line); }
h1 { font-size: 1.2rem; margin: 0; }
h2 { font-size: 1.1rem; margin: 1.2rem 0 .4rem; }
h3 { font-size: 1rem; margin: 1rem 0 .3rem; }
main { padding: 0 1rem 2rem; max-width: 72rem; }
code, .mono { font-family: ui-monospace, monospace; font-size: .92em; overflow-wrap: anywhere; }
.conn { margin: 0; color: var(--muted); }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 0; }
.facts dt { font-weight: 600; }
.facts dd { margin: 0; overflow-wrap: anywhere; }
.bad { color: var(--bad); } .warn { color: var(--warn); } .ok { color: var(--ok); }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: .6rem .8rem; margin: .5rem 0; }
.card h4 { margin: 0 0 .3rem; font-size: 1rem; }
.tag { display: inline-block; border: 1px solid currentColor; border-radius: 4px; padding: 0 .35rem; font-size: .85em; font-weight: 600; margin-right: .4rem; }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: .1rem .8rem; margin: .3rem 0; }
.kv dt { color: var(--muted); } .kv dd { margin: 0; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; margin: .3rem 0; }
th, td { text-align: left; padding: .15rem .5rem .15rem 0; border-bottom: 1px solid var(--line); vertical-align: top; }
.table-wrap { overflow-x: auto; }
button { font: inherit; padding: .25rem .8rem; border-radius: 4px; border: 1px solid var(--fg); background: var(--card); color: var(--fg); cursor: pointer; }
button:focus-visible, input:focus-visible, select:focus-visible { outline: 3px solid var(--taken); outline-offset: 2px; }
button[disabled] { opacity: .6; cursor: progress; }
.bar { display: flex; height: 1.4rem; border: 1px solid var(--fg); border-radius: 3px; overflow: hidden; margin: .3rem 0; }
.bar span { display: block; height: 100%; }
.bar .taken, .swatch.taken { background: var(--taken); }
.bar .reserve, .swatch.reserve { background: repeating-linear-gradient(45deg, var(--reserve) 0 4px, transparent 4px 8px); }
.bar .free, .swatch.free { background: var(--free); }
.swatch { display: inline-block; width: 1em; height: 1em; border: 1px solid var(--fg); vertical-align: -.15em; margin-left: .6rem; }
.legend { color: var(--muted); font-size: .9em; }
.events { list-style: none; padding: 0; margin: 0; }
.events li { padding: .2rem 0; border-bottom: 1px solid var(--line); overflow-wrap: anywhere; }
.events time { color: var(--muted); font-variant-numeric: tabular-nums; margin-right: .5rem; }
.login { max-width: 30rem; }
.login input { font: inherit; padding: .3rem; width: 100%; margin: .3rem 0 .6rem; }
.error { color: var(--bad); }
.filter { display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; margin-bottom: .4rem; }
#models-search { min-width: 0; flex: 1 1 10rem; }
.rollout { border-top: 1px solid var(--line); margin-top: .4rem; padding-top: .3rem; }
.rollout h5 { margin: 0 0 .2rem; font-size: .95rem; }
.rollout p { margin: .2rem 0; }
.rollout .left { font-variant-numeric: tabular-nums; }
table.arms { width: auto; min-width: 22rem; }
table.arms td, table.arms th { padding-right: 1.5rem; }
table.arms td { font-variant-numeric: tabular-nums; }
@media (max-width: 40rem) { .facts, .kv { grid-template-columns: 1fr; } .facts dd, .kv dd { margin-bottom: .3rem; } main { padding: 0 .5rem 2rem; } }
`;

/** A plain mark for the tab (a browser asks for one; without it, /favicon.ico would be refused). */
const ICON = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#3b6ea5"/><path d="M4 4v8h3M9 4v8h3" stroke="#fff" stroke-width="2" fill="none"/></svg>\n';

export interface PageAssets {
  readonly html: string;
  readonly css: string;
  readonly js: string;
  /** The models' page and patches (src/ui/web/models-page.ts), a module app.js imports. */
  readonly modelsJs: string;
  /** A model's rollout on its card (src/ui/web/rollout-panel.ts), a module app.js imports. */
  readonly rolloutJs: string;
  readonly icon: string;
}

const MISSING_JS = `document.getElementById('conn').textContent = 'The status page script was not built: run npm run build in the llmgw package.';\n`;

let cached: PageAssets | null = null;

export function pageAssets(): PageAssets {
  if (cached) return cached;
  const built = (file: string): string | null => {
    try {
      return readFileSync(new URL(`./web/${file}`, import.meta.url), 'utf8').replace(/\n\/\/# sourceMappingURL=.*\n?$/, '\n');
    } catch {
      return null;
    }
  };
  const js = built('app.js');
  const modelsJs = built('models-page.js');
  const rolloutJs = built('rollout-panel.js');
  cached = js !== null && modelsJs !== null && rolloutJs !== null ? { html: HTML, css: CSS, js, modelsJs, rolloutJs, icon: ICON } : { html: HTML, css: CSS, js: MISSING_JS, modelsJs: '', rolloutJs: '', icon: ICON };
  return cached;
}
