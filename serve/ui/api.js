// The workbench's one door to the server: every view runs LQL statements through
// POST /v1/lql, so everything it shows is a statement the user can copy and run.

const SESSION = 'lql.session';
const KEY = 'lql.apiKey';

/** The tab's X-LQL-Session id: its edits persist across its requests and reach no one else. */
export function sessionId() {
  let id = sessionStorage.getItem(SESSION);
  if (!id) {
    const bytes = crypto.getRandomValues(new Uint8Array(12));
    id = 'ui-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
    sessionStorage.setItem(SESSION, id);
  }
  return id;
}

/** A failed statement: the server's error object, with the statements text it points into. */
export class LqlError extends Error {
  constructor(error, text, status) {
    super(error.message);
    this.error = error;
    this.text = text;
    this.status = status;
  }
}

/** The headers of a request to /v1/lql: the tab's session and, once given, the API key. */
function lqlHeaders(extra = {}) {
  const headers = { ...extra, 'X-LQL-Session': sessionId() };
  const key = localStorage.getItem(KEY);
  if (key) headers.Authorization = 'Bearer ' + key;
  return headers;
}

/** Quotes a text as an LQL string literal. */
export function quote(s) {
  return '"' + String(s).replaceAll('\\', '\\\\').replaceAll('"', '\\"') + '"';
}

/** Quotes a text as a SQL string literal (SELECT's WHERE). */
export function sqlText(s) {
  return "'" + String(s).replaceAll("'", "''") + "'";
}

/**
 * Runs `text` (one or more statements) and resolves to its results, each
 * `{statement, columns, rows}`; rejects with an LqlError naming the failing statement.
 */
export async function run(text) {
  const response = await fetch('/v1/lql', {
    method: 'POST',
    headers: lqlHeaders({ 'Content-Type': 'application/json' }),
    body: JSON.stringify({ statements: text }),
  });
  let body;
  try {
    body = await response.json();
  } catch (e) {
    throw new LqlError({ kind: 'http', message: `HTTP ${response.status}: the answer is not JSON` }, text, response.status);
  }
  if (response.status === 401) {
    const entered = prompt('This server needs an API key:');
    if (entered) {
      localStorage.setItem(KEY, entered);
      return run(text);
    }
  }
  if (!response.ok || body.error) {
    const err = body.error || { kind: 'http', message: `HTTP ${response.status}` };
    const failure = new LqlError(typeof err === 'string' ? { kind: 'http', message: err } : err, text, response.status);
    failure.results = body.results || [];
    throw failure;
  }
  return body.results;
}

/** The tab session's last progress report (`{task, done, total, unit, finished}`) or null. */
export async function progress() {
  const r = await fetch('/v1/lql/progress', { headers: lqlHeaders() });
  return r.ok ? (await r.json()).progress : null;
}

/**
 * Runs `text` as `run` does, calling `onProgress(report)` with the session's progress
 * reports (polled twice a second) while it runs.
 */
export async function runWithProgress(text, onProgress) {
  let running = true;
  const started = Date.now();
  const poll = async () => {
    while (running) {
      await new Promise((r) => setTimeout(r, 500));
      if (!running) break;
      try {
        const p = await progress();
        // Reports left by an earlier statement are finished; this one's arrive fresh.
        if (p && !p.finished && running) onProgress(p, Date.now() - started);
      } catch (e) {
        // Progress is a courtesy: the statement's own answer says what happened.
      }
    }
  };
  poll();
  try {
    return await run(text);
  } finally {
    running = false;
  }
}

/** Runs one statement and returns its rows as objects keyed by column. */
export async function rows(text) {
  const [result] = await run(text);
  return objects(result);
}

/** A result's rows as objects keyed by column name. */
export function objects(result) {
  return result.rows.map((r) => Object.fromEntries(result.columns.map((c, i) => [c, r[i]])));
}

/** The server's /health (model name, slots). */
export async function health() {
  const r = await fetch('/health');
  return r.json();
}
