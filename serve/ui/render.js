// Drawing results: tables, errors with their spans underlined, EXPLAIN trees, and the small
// DOM helpers every view shares.

/** Creates an element: `el('td', {class: 'num'}, 'text', child, …)`. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** Creates an SVG element: `svg('rect', {x: 1, …}, child, …)`. */
export function svg(tag, attrs = {}, ...children) {
  const n = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  n.append(...children);
  return n;
}

/** A value as the CLI's JSON renders it: lists joined, floats shortened for reading. */
export function show(v) {
  if (v === null || v === undefined) return 'NULL';
  if (Array.isArray(v)) return '[' + v.map((x) => (typeof x === 'string' ? JSON.stringify(x) : show(x))).join(', ') + ']';
  if (typeof v === 'number' && !Number.isInteger(v)) return fmt(v);
  return String(v);
}

/** A float with four significant digits (exact values stay in the cell's title). */
export function fmt(x) {
  if (x === null || x === undefined) return 'NULL';
  if (x === 0 || !Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  if (a >= 1e-3 && a < 1e6) return String(Number(x.toPrecision(4)));
  return x.toExponential(3);
}

/** A token as the page shows it: spaces as ·, control characters escaped. */
export function tokenText(t) {
  if (t === null || t === undefined) return '';
  return String(t).replaceAll(' ', '·').replace(/[\u0000-\u001f]/g, (c) => '\\x' + c.charCodeAt(0).toString(16).padStart(2, '0'));
}

/**
 * A result as a table. `links` maps a column name to a function of the row object giving
 * an href (the feature column of a WALK row opens the feature page).
 */
export function table(result, links = {}) {
  const head = el('tr', {}, result.columns.map((c) => el('th', { scope: 'col' }, c)));
  const body = result.rows.map((r) => {
    const obj = Object.fromEntries(result.columns.map((c, i) => [c, r[i]]));
    return el('tr', {}, r.map((v, i) => {
      const col = result.columns[i];
      const cls = v === null ? 'null' : typeof v === 'number' ? 'num' : undefined;
      const text = show(v);
      const href = links[col] && v !== null ? links[col](obj) : null;
      const content = href ? el('a', { href, 'data-link': true }, text) : text;
      return el('td', { class: cls, title: typeof v === 'number' ? String(v) : undefined, 'data-col': col }, content);
    }));
  });
  return el('div', { class: 'scroll' }, el('table', { class: 'result' }, el('thead', {}, head), el('tbody', {}, body)));
}

/** Byte offsets (the server's spans) as character offsets into `text`. */
function charOffset(text, byte) {
  const bytes = new TextEncoder().encode(text);
  return new TextDecoder().decode(bytes.slice(0, Math.max(0, Math.min(byte, bytes.length)))).length;
}

/** A failed statement: kind, code, message, the statement with its span underlined, help. */
export function errorBox(err) {
  const e = err.error || { kind: 'error', message: String(err.message || err) };
  const parts = [el('div', { class: 'title' }, `${e.kind || 'error'}${e.code ? ' ' + e.code : ''}: ${e.message}`)];
  const text = err.text;
  if (text && Array.isArray(e.span)) {
    const a = charOffset(text, e.span[0]);
    const b = Math.max(a + 1, charOffset(text, e.span[1]));
    parts.push(el('pre', { class: 'source' }, text.slice(0, a), el('mark', { title: e.message }, text.slice(a, b) || ' '), text.slice(b)));
  }
  for (const l of e.labels || []) parts.push(el('div', { class: 'muted' }, '· ' + l.message));
  for (const h of e.help || []) parts.push(el('div', { class: 'muted' }, 'help: ' + h));
  return el('div', { class: 'error', role: 'alert' }, parts);
}

/**
 * An operator tree (EXPLAIN PLAN / ANALYZE's `plan` lines) drawn as nested boxes; lines
 * after the root at its depth (the `effects:` note) are shown as notes below the tree.
 */
export function planTree(lines) {
  const root = { children: [], depth: -1 };
  const stack = [root];
  const notes = [];
  for (const line of lines) {
    const m = /^[\s│├└─┬┼|`\\-]*/u.exec(line);
    const depth = [...m[0]].length;
    const body = line.slice(m[0].length);
    if (depth === 0 && root.children.length) {
      notes.push(body);
      continue;
    }
    const node = { body, depth, children: [] };
    while (stack.length > 1 && stack[stack.length - 1].depth >= depth) stack.pop();
    stack[stack.length - 1].children.push(node);
    stack.push(node);
  }
  const draw = (n) => {
    const [op, ...rest] = n.body.split(/(?<=\S)\s{2,}|(?<=\S) (?=\[|\()/u);
    return el('li', {}, el('span', { class: 'node' }, op), rest.length ? el('span', { class: 'detail' }, rest.join(' ')) : null,
      n.children.length ? el('ul', {}, n.children.map(draw)) : null);
  };
  return el('div', { class: 'tree', role: 'tree' }, el('ul', {}, root.children.map(draw)),
    notes.map((n) => el('div', { class: 'muted' }, n)));
}

/** One result, drawn as what it is: a plan tree for EXPLAIN PLAN/ANALYZE, else a table. */
export function result(r, links) {
  const parts = [el('div', { class: 'statement' }, r.statement)];
  if (r.columns.length === 1 && r.columns[0] === 'plan') {
    parts.push(planTree(r.rows.map((x) => String(x[0]))));
  } else {
    parts.push(table(r, links));
  }
  parts.push(el('div', { class: 'muted' }, `${r.rows.length} row${r.rows.length === 1 ? '' : 's'}`));
  return el('section', { class: 'result-block' }, parts);
}

/** A progress bar with its line of text, updated from progress reports. */
export function progressBar() {
  const bar = el('progress', { max: 1, value: 0 });
  const label = el('span', { class: 'muted' });
  const node = el('div', { class: 'progress', role: 'status' }, bar, ' ', label);
  const update = (p, ms) => {
    if (p.total) {
      bar.max = p.total;
      bar.value = p.done;
    }
    const pct = p.total ? ` ${Math.floor((100 * p.done) / p.total)}%` : '';
    label.textContent = `${p.task}: ${p.done}${p.total ? ' / ' + p.total : ''}${pct} · ${(ms / 1000).toFixed(0)} s`;
  };
  return { node, update };
}

/** A floating tooltip shared by the charts. */
export const tip = {
  node: null,
  show(x, y, content) {
    if (!this.node) {
      this.node = el('div', { class: 'tip', role: 'tooltip' });
      document.body.append(this.node);
    }
    this.node.replaceChildren(content);
    this.node.style.display = 'block';
    this.node.style.left = Math.min(x + 12, innerWidth - 260) + 'px';
    this.node.style.top = y + 14 + 'px';
  },
  hide() {
    if (this.node) this.node.style.display = 'none';
  },
};

/** Replaces `node`'s content with a "running" line while `work` runs, then its outcome. */
export async function busy(node, label, work) {
  node.replaceChildren(el('div', { class: 'muted busy' }, label));
  try {
    const out = await work();
    node.replaceChildren(...[out].flat());
  } catch (e) {
    node.replaceChildren(errorBox(e));
  }
}
