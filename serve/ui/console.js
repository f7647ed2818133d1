// The console: statements in, results out as tables (EXPLAIN trees drawn), errors with their
// spans underlined. `/?q=…` opens it with a statement and runs it.

import { runWithProgress } from './api.js';
import { el, errorBox, progressBar, result } from './render.js';

const EXAMPLE = 'WALK "The capital of France is" TOP 3 LAYERS 20-22';

/** Links from result columns: any row with a layer and a feature opens that feature's page. */
export function featureLinks(columns) {
  if (!columns.includes('layer') || !columns.includes('feature')) return {};
  const href = (r) => (Number.isInteger(r.layer) && Number.isInteger(r.feature) ? `/feature/${r.layer}:${r.feature}` : null);
  return { feature: href };
}

export function view(params) {
  const input = el('textarea', { id: 'statements', rows: 5, spellcheck: 'false', 'aria-label': 'LQL statements' });
  input.value = params.get('q') || sessionStorage.getItem('lql.console') || EXAMPLE;
  const out = el('div', { id: 'results', 'aria-live': 'polite' });
  const button = el('button', { class: 'primary', id: 'run' }, 'Run');
  const go = async () => {
    const text = input.value;
    sessionStorage.setItem('lql.console', text);
    button.disabled = true;
    const bar = progressBar();
    out.replaceChildren(el('div', { class: 'muted busy' }, 'running'), bar.node);
    try {
      const results = await runWithProgress(text, bar.update);
      out.replaceChildren(...results.map((r) => result(r, featureLinks(r.columns))));
    } catch (e) {
      const done = (e.results || []).map((r) => result(r, featureLinks(r.columns)));
      out.replaceChildren(...done, errorBox(e));
    } finally {
      button.disabled = false;
    }
  };
  button.addEventListener('click', go);
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      go();
    }
  });
  if (params.get('q')) queueMicrotask(go);
  return [
    el('h1', {}, 'Console'),
    input,
    el('div', { class: 'row' }, button, el('span', { class: 'muted' }, 'Ctrl+Enter runs; results of WALK and SELECT … FROM features link to feature pages')),
    out,
  ];
}
