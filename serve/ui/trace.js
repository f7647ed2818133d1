// The trace view: the logit lens as a layers × positions heat map (top token and its
// probability in each cell), and the per-layer attention and FFN contributions to one token
// as a waterfall. `/trace?prompt=…&token=…` links to it.

import { objects, quote, run } from './api.js';
import { busy, el, errorBox, fmt, svg, tip, tokenText } from './render.js';

/** The heat map: one row per stage (last layer on top, emb at the bottom), one column per position. */
function heatmap(lens, tokens, readout) {
  const positions = [...new Set(lens.map((r) => r.position))].sort((a, b) => a - b);
  const stages = [...new Set(lens.map((r) => r.layer))].sort((a, b) => (b ?? -1) - (a ?? -1));
  const at = new Map(lens.map((r) => [`${r.layer}/${r.position}`, r]));
  const head = el('tr', {}, el('th', {}, ''), positions.map((p) => el('th', { scope: 'col' }, `${p}:${tokenText(tokens[p] ?? '')}`)));
  const say = (r) => `layer ${r.layer ?? 'emb'} · position ${r.position} (${tokenText(tokens[r.position] ?? '')}) → ${tokenText(r.top_token)}  p=${fmt(r.top_prob)}`;
  const body = stages.map((layer) => el('tr', {}, el('th', { scope: 'row' }, layer ?? 'emb'), positions.map((p) => {
    const r = at.get(`${layer}/${p}`);
    if (!r) return el('td', { class: 'cell' });
    const cell = el('td', {
      class: 'cell', tabindex: 0,
      style: `background: rgba(var(--heat), ${Math.max(0.04, r.top_prob).toFixed(3)}); color: ${r.top_prob > 0.55 ? 'var(--accent-fg)' : 'inherit'}`,
      dataset: { layer: layer ?? 'emb', position: p, token: r.top_token, prob: r.top_prob },
    }, tokenText(r.top_token));
    const on = (e) => {
      readout.textContent = say(r);
      const box = cell.getBoundingClientRect();
      tip.show(e.clientX ?? box.right, e.clientY ?? box.bottom, el('div', {}, say(r)));
    };
    cell.addEventListener('mouseenter', on);
    cell.addEventListener('focus', on);
    cell.addEventListener('mouseleave', () => tip.hide());
    cell.addEventListener('blur', () => tip.hide());
    return cell;
  })));
  return el('div', { class: 'scroll' }, el('table', { class: 'heat', id: 'lens' }, el('thead', {}, head), el('tbody', {}, body)));
}

/** The waterfall: the embedding's contribution, then each layer's attention and FFN, as steps of the running logit. */
function waterfall(rows, token) {
  const steps = [];
  for (const r of rows) {
    if (r.layer === null) steps.push({ label: 'emb', value: r.contrib });
    else {
      steps.push({ label: `L${r.layer} attn`, value: r.attn_contrib, layer: r.layer, kind: 'attn' });
      steps.push({ label: `L${r.layer} ffn`, value: r.ffn_contrib, layer: r.layer, kind: 'ffn' });
    }
  }
  let total = 0;
  const spans = steps.map((s) => {
    const from = total;
    total += s.value;
    return { ...s, from, to: total };
  });
  const lo = Math.min(0, ...spans.map((s) => Math.min(s.from, s.to)));
  const hi = Math.max(0, ...spans.map((s) => Math.max(s.from, s.to)));
  const W = 900, H = 260, pad = 30, bw = (W - 2 * pad) / spans.length;
  const y = (v) => pad + ((hi - v) / (hi - lo || 1)) * (H - 2 * pad);
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `contributions to ${token}` });
  chart.append(svg('line', { x1: pad, x2: W - pad, y1: y(0), y2: y(0), stroke: 'currentColor', 'stroke-opacity': 0.3 }));
  spans.forEach((s, i) => {
    const top = y(Math.max(s.from, s.to));
    const rect = svg('rect', {
      x: pad + i * bw + 1, width: Math.max(1, bw - 2), y: top, height: Math.max(1, y(Math.min(s.from, s.to)) - top),
      fill: s.value >= 0 ? 'rgb(var(--heat))' : 'rgb(var(--neg))', 'fill-opacity': s.kind === 'attn' ? 0.6 : 1,
      'data-step': s.label, 'data-value': s.value,
    });
    const label = `${s.label}: ${s.value >= 0 ? '+' : ''}${fmt(s.value)} → ${fmt(s.to)}`;
    rect.append(svg('title', {}, label));
    rect.addEventListener('mouseenter', (e) => tip.show(e.clientX, e.clientY, el('div', {}, label)));
    rect.addEventListener('mouseleave', () => tip.hide());
    chart.append(rect);
  });
  chart.append(svg('text', { x: pad, y: 14, fill: 'currentColor', 'font-size': 12 }, `logit of ${tokenText(token)}: ${fmt(total)} (emb, then attention (light) and FFN per layer)`));
  return el('div', { class: 'waterfall panel' }, chart);
}

export function view(params, navigate) {
  const prompt = el('input', { type: 'text', id: 'prompt', value: params.get('prompt') || 'The capital of France is', 'aria-label': 'prompt' });
  const token = el('input', { type: 'text', id: 'token', value: params.get('token') || '', placeholder: 'token (default: the prediction)', 'aria-label': 'token' });
  const out = el('div', { id: 'trace' });
  const go = () => navigate(`/trace?prompt=${encodeURIComponent(prompt.value)}${token.value ? '&token=' + encodeURIComponent(token.value) : ''}`);
  const form = el('form', { class: 'row', onsubmit: (e) => { e.preventDefault(); go(); } },
    prompt, token, el('button', { class: 'primary', type: 'submit' }, 'Trace'));
  if (params.get('prompt')) {
    busy(out, 'tracing', async () => {
      const p = params.get('prompt');
      const [lensResult, tokResult] = await run(`TRACE ${quote(p)} POSITIONS ALL; TOKENIZE ${quote(p)}`);
      const lens = objects(lensResult);
      const tokens = {};
      for (const t of objects(tokResult)) tokens[t.position] = t.token;
      const last = Math.max(...lens.map((r) => r.position));
      const answer = params.get('token') || lens.find((r) => r.position === last && r.layer === Math.max(...lens.map((x) => x.layer ?? -1)))?.top_token;
      const readout = el('div', { class: 'hover-readout', id: 'readout', 'aria-live': 'polite' }, 'hover a cell');
      const parts = [
        el('h2', {}, 'Logit lens'),
        el('div', { class: 'statement' }, lensResult.statement),
        readout,
        heatmap(lens, tokens, readout),
      ];
      try {
        const forText = `TRACE ${quote(p)} FOR ${quote(answer)}`;
        const [contrib] = await run(forText);
        parts.push(el('h2', {}, `Contributions to ${tokenText(answer)}`), el('div', { class: 'statement' }, forText), waterfall(objects(contrib), answer));
      } catch (e) {
        parts.push(el('h2', {}, `Contributions to ${tokenText(answer)}`), errorBox(e));
      }
      return parts;
    });
  }
  return [el('h1', {}, 'Trace'), form, out];
}
