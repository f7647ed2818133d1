// The attention view: head scores per layer × head (previous-token, duplicate-token,
// induction, direct contribution) from the heads table, and one layer's patterns
// (query × key) per head from the attention table. `/attention?prompt=…&layer=…`.

import { objects, quote, run, sqlText } from './api.js';
import { busy, el, fmt, tip, tokenText } from './render.js';

const SCORES = ['contrib', 'prev_token', 'duplicate_token', 'induction'];

/** A layers × heads grid shaded by one score; a click opens that layer's patterns. */
function scoreGrid(heads, score, open) {
  const rows = heads.filter((h) => h.head !== null);
  const layers = [...new Set(rows.map((h) => h.layer))].sort((a, b) => a - b);
  const ids = [...new Set(rows.map((h) => h.head))].sort((a, b) => a - b);
  const at = new Map(rows.map((h) => [`${h.layer}/${h.head}`, h]));
  const max = Math.max(1e-9, ...rows.map((h) => Math.abs(h[score] ?? 0)));
  return el('table', { class: 'heat', id: 'head-scores' },
    el('thead', {}, el('tr', {}, el('th', {}, 'layer'), ids.map((i) => el('th', { scope: 'col' }, `h${i}`)))),
    el('tbody', {}, layers.map((l) => el('tr', {}, el('th', { scope: 'row' }, l), ids.map((i) => {
      const h = at.get(`${l}/${i}`);
      const v = h ? h[score] : null;
      const a = v === null || v === undefined ? 0 : Math.abs(v) / max;
      const say = `layer ${l} head ${i}: ${score} = ${v === null ? 'NULL' : fmt(v)}`;
      const cell = el('td', {
        class: 'cell', tabindex: 0, title: say,
        style: `background: rgba(${v < 0 ? 'var(--neg)' : 'var(--heat)'}, ${a.toFixed(3)})`,
        dataset: { layer: l, head: i, value: v ?? '' },
        onclick: () => open(l),
        onkeydown: (e) => { if (e.key === 'Enter') open(l); },
      }, v === null ? '' : fmt(v));
      return cell;
    })))));
}

/** One head's pattern on a canvas: rows are queries, columns keys, darker is more weight. */
function pattern(head, cells, tokens, n) {
  const canvas = el('canvas', { width: n, height: n, 'data-head': head });
  const ctx = canvas.getContext('2d');
  const color = getComputedStyle(document.documentElement).getPropertyValue('--heat').trim() || '35, 87, 198';
  ctx.fillStyle = getComputedStyle(document.body).backgroundColor;
  ctx.fillRect(0, 0, n, n);
  const grid = new Float32Array(n * n);
  for (const c of cells) {
    grid[c.query * n + c.key] = c.weight;
    ctx.fillStyle = `rgba(${color}, ${c.weight.toFixed(4)})`;
    ctx.fillRect(c.key, c.query, 1, 1);
  }
  canvas.addEventListener('mousemove', (e) => {
    const box = canvas.getBoundingClientRect();
    const k = Math.floor(((e.clientX - box.left) / box.width) * n);
    const q = Math.floor(((e.clientY - box.top) / box.height) * n);
    if (k < 0 || q < 0 || k >= n || q >= n) return;
    tip.show(e.clientX, e.clientY, el('div', {}, `head ${head}: ${q}:${tokenText(tokens[q])} → ${k}:${tokenText(tokens[k])}  ${k > q ? '(masked)' : fmt(grid[q * n + k])}`));
  });
  canvas.addEventListener('mouseleave', () => tip.hide());
  return el('figure', {}, canvas, el('figcaption', {}, `head ${head}`));
}

export function view(params, navigate) {
  const prompt = el('input', { type: 'text', id: 'prompt', value: params.get('prompt') || 'When Mary and John went to the store, John gave a drink to', 'aria-label': 'prompt' });
  const score = el('select', { id: 'score', 'aria-label': 'score' }, SCORES.map((s) => el('option', { value: s, selected: s === (params.get('score') || 'prev_token') }, s)));
  const out = el('div', { id: 'attention' });
  const url = (layer) => `/attention?prompt=${encodeURIComponent(prompt.value)}&score=${score.value}${layer !== undefined ? '&layer=' + layer : ''}`;
  const form = el('form', { class: 'row', onsubmit: (e) => { e.preventDefault(); navigate(url(params.get('layer') ?? undefined)); } },
    prompt, score, el('button', { class: 'primary', type: 'submit' }, 'Show'));
  const p = params.get('prompt');
  if (p) {
    busy(out, 'running', async () => {
      const layer = Number.parseInt(params.get('layer') ?? '0', 10);
      const headsText = `SELECT * FROM heads WHERE prompt = ${sqlText(p)}`;
      const patternText = `SELECT head, query, key, weight FROM attention WHERE prompt = ${sqlText(p)} AND layer = ${layer}`;
      const tokText = `TOKENIZE ${quote(p)}`;
      const [headsResult, patternResult, tokResult] = await run(`${headsText}; ${patternText}; ${tokText}`);
      const tokens = objects(tokResult).map((t) => t.token);
      const byHead = new Map();
      for (const c of objects(patternResult)) {
        if (!byHead.has(c.head)) byHead.set(c.head, []);
        byHead.get(c.head).push(c);
      }
      return [
        el('h2', {}, `Head scores: ${score.value}`),
        el('div', { class: 'statement' }, headsText),
        el('div', { class: 'muted' }, 'click a row to see that layer’s patterns'),
        el('div', { class: 'scroll' }, scoreGrid(objects(headsResult), score.value, (l) => navigate(url(l)))),
        el('h2', {}, `Layer ${layer} patterns`),
        el('div', { class: 'statement' }, patternText),
        el('div', { class: 'tokens' }, tokens.map((t, i) => el('span', { class: 'tok' }, `${i}:${tokenText(t)}`))),
        el('div', { class: 'heads', id: 'patterns' }, [...byHead.keys()].sort((a, b) => a - b).map((h) => pattern(h, byHead.get(h), tokens, tokens.length))),
      ];
    });
  }
  return [el('h1', {}, 'Attention'), form, out];
}
