// The feature page (`/feature/L:F?corpus=…`): the feature's label tokens (what its down
// column writes), the tokens nearest its gate and up directions, and, once
// `ANALYZE FEATURES FROM "corpus"` has stored the corpus statistics, its top-activating
// contexts and activation histogram.

import { objects, quote, run, runWithProgress, sqlText } from './api.js';
import { el, errorBox, fmt, progressBar, svg, tip, tokenText } from './render.js';

const CORPUS = 'lql.corpus';

function tokens(list, id) {
  return el('div', { class: 'tokens', id }, (list || []).map((t) => el('span', { class: 'tok' }, tokenText(t))));
}

/** The histogram as bars over its bins (log-spaced magnitudes, negative bins on the left). */
function histogram(bins) {
  const W = 640, H = 180, pad = 24;
  const shown = bins.filter((b) => b.count > 0);
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img' });
  if (!shown.length) return el('div', { class: 'muted' }, 'no activations recorded');
  const max = Math.max(...shown.map((b) => b.count));
  const bw = (W - 2 * pad) / shown.length;
  shown.forEach((b, i) => {
    const h = (Math.log1p(b.count) / Math.log1p(max)) * (H - 2 * pad);
    const r = svg('rect', { x: pad + i * bw + 0.5, y: H - pad - h, width: Math.max(1, bw - 1), height: h, fill: b.hi <= 0 ? 'rgb(var(--neg))' : 'rgb(var(--heat))' });
    const label = `[${fmt(b.lo)}, ${fmt(b.hi)}): ${b.count}`;
    r.addEventListener('mouseenter', (e) => tip.show(e.clientX, e.clientY, el('div', {}, label)));
    r.addEventListener('mouseleave', () => tip.hide());
    chart.append(r);
  });
  chart.append(svg('text', { x: pad, y: H - 6, fill: 'currentColor', 'font-size': 11 },
    `${fmt(shown[0].lo)} … ${fmt(shown[shown.length - 1].hi)} (count on a log scale)`));
  return el('div', { class: 'histogram panel', id: 'histogram' }, chart);
}

function contexts(rows) {
  return el('div', { id: 'contexts' }, rows.map((c) => el('div', { class: 'panel context', dataset: { rank: c.rank, activation: c.activation } },
    el('span', { class: 'muted' }, `#${c.rank}  ${fmt(c.activation)}  `),
    c.before, el('mark', { title: `activation ${c.activation}` }, c.token), c.after)));
}

export function view(params, navigate, settings, id) {
  const m = /^(\d+):(\d+)$/.exec(id || '');
  const corpus = el('input', { type: 'text', id: 'corpus', value: params.get('corpus') || localStorage.getItem(CORPUS) || '', placeholder: 'corpus file (one document per line)', 'aria-label': 'corpus' });
  const which = el('input', { type: 'text', id: 'feature-id', value: id || '20:0', 'aria-label': 'layer:feature', size: 10 });
  const form = el('form', { class: 'row', onsubmit: (e) => {
    e.preventDefault();
    if (corpus.value) localStorage.setItem(CORPUS, corpus.value);
    navigate(`/feature/${which.value}${corpus.value ? '?corpus=' + encodeURIComponent(corpus.value) : ''}`);
  } }, which, corpus, el('button', { class: 'primary', type: 'submit' }, 'Open'));
  if (!m) return [el('h1', {}, 'Feature'), form, el('p', { class: 'muted' }, 'Name a feature as layer:feature, or open one from a WALK row in the console.')];
  const [layer, feature] = [Number(m[1]), Number(m[2])];
  const labels = el('div', { id: 'labels' }, el('div', { class: 'muted busy' }, 'reading'));
  const stats = el('div', { id: 'stats' });
  (async () => {
    // gate_tokens and up_tokens are hidden columns: named, never in SELECT *.
    const text = `SELECT top_token, c_score, down_tokens, gate_tokens, up_tokens FROM features WHERE layer = ${layer} AND feature = ${feature}`;
    try {
      const [r] = await run(text);
      const f = objects(r)[0];
      if (!f) throw { error: { kind: 'semantic', message: `layer ${layer} has no feature ${feature}` } };
      labels.replaceChildren(
        el('div', { class: 'statement' }, text),
        el('div', { class: 'grid2' },
          el('div', { class: 'panel' }, el('h2', {}, 'Writes (down projection)'), el('div', {}, 'label ', el('b', { id: 'top-token' }, tokenText(f.top_token)), el('span', { class: 'muted' }, `  c_score ${fmt(f.c_score)}`)), tokens(f.down_tokens, 'down-tokens')),
          el('div', { class: 'panel' }, el('h2', {}, 'Reads (gate direction)'), tokens(f.gate_tokens, 'gate-tokens'),
            el('h2', {}, 'Reads (up direction)'), tokens(f.up_tokens, 'up-tokens'))));
    } catch (e) {
      labels.replaceChildren(errorBox(e));
    }
    const c = params.get('corpus');
    if (!c) {
      stats.replaceChildren(el('p', { class: 'muted' }, 'Name a corpus to see this feature’s top-activating contexts and activation histogram.'));
      return;
    }
    const ctxText = `SELECT rank, activation, document, position, before, token, after FROM contexts WHERE corpus = ${sqlText(c)} AND layer = ${layer} AND feature = ${feature} ORDER BY rank`;
    const histText = `SELECT lo, hi, count FROM histograms WHERE corpus = ${sqlText(c)} AND layer = ${layer} AND feature = ${feature}`;
    try {
      const [ctx, hist] = await run(`${ctxText}; ${histText}`);
      stats.replaceChildren(
        el('h2', {}, 'Top-activating contexts'), el('div', { class: 'statement' }, ctxText), contexts(objects(ctx)),
        el('h2', {}, 'Activation histogram'), el('div', { class: 'statement' }, histText), histogram(objects(hist)));
      // When the page is whole (its time since navigation is what "opens in" means).
      performance.mark('lql:feature-ready');
    } catch (e) {
      const analyze = `ANALYZE FEATURES FROM ${quote(c)}`;
      const button = el('button', { id: 'analyze', disabled: settings.read_only }, `Run ${analyze}`);
      button.addEventListener('click', async () => {
        button.disabled = true;
        button.textContent = 'analyzing the corpus';
        const bar = progressBar();
        bar.node.id = 'analyze-progress';
        stats.append(bar.node);
        try {
          await runWithProgress(analyze, bar.update);
          navigate(location.pathname + location.search);
        } catch (err) {
          stats.append(errorBox(err));
        }
      });
      stats.replaceChildren(errorBox(e), button);
    }
  })();
  return [el('h1', {}, `Feature ${layer}:${feature}`), form, labels, stats];
}
