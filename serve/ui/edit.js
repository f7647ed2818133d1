// The edit panel: INSERT a fact into the tab's session, see INFER before and after on the
// prompt and its paraphrases, record edits into a patch file (BEGIN PATCH … SAVE PATCH) or
// remove them. Under `lql serve --read-only` it says why it cannot edit; without
// `--allow-writes` the server's refusal of the patch file is shown as it comes.

import { objects, quote, run } from './api.js';
import { el, errorBox, fmt, table, tokenText } from './render.js';

function field(id, label, value, attrs = {}) {
  const input = el('input', { type: 'text', id, value, 'aria-label': label, ...attrs });
  return [input, el('label', { for: id }, el('span', { class: 'muted' }, label), el('br'), input)];
}

/** INFER … TOP 3 over every prompt, as one result per prompt. */
async function inferAll(prompts) {
  return run(prompts.map((p) => `INFER ${quote(p)} TOP 3`).join('; '));
}

function comparison(prompts, before, after) {
  return el('table', { class: 'result', id: 'edit-compare' },
    el('thead', {}, el('tr', {}, el('th', {}, 'prompt'), el('th', {}, 'before'), el('th', {}, 'after'))),
    el('tbody', {}, prompts.map((p, i) => {
      const top = (r) => objects(r)[0];
      const b = top(before[i]);
      const a = after ? top(after[i]) : null;
      const cell = (x) => (x ? `${tokenText(x.token)}  ${fmt(x.prob)}` : '');
      return el('tr', { dataset: { prompt: p } }, el('td', {}, p), el('td', { class: 'before' }, cell(b)), el('td', { class: 'after' }, cell(a)));
    })));
}

export function view(params, navigate, settings) {
  const [entity, entityLabel] = field('entity', 'entity', params.get('entity') || 'Eiffel Tower');
  const [relation, relationLabel] = field('relation', 'relation', params.get('relation') || 'located in');
  const [target, targetLabel] = field('target', 'target', params.get('target') || 'Rome');
  const [prompt, promptLabel] = field('edit-prompt', 'prompt', params.get('prompt') || 'The Eiffel Tower is located in the city of');
  const paraphrases = el('textarea', { id: 'paraphrases', rows: 3, 'aria-label': 'paraphrases, one per line' });
  paraphrases.value = params.get('paraphrases') || 'The Eiffel Tower stands in\nTourists visit the Eiffel Tower in the city of';
  const [patchFile, patchLabel] = field('patch-file', 'patch file (under --allow-writes)', 'edits.lqlpatch');
  const out = el('div', { id: 'edit-result', 'aria-live': 'polite' });
  const edges = el('div', { id: 'edges' });
  const insert = el('button', { class: 'primary', id: 'insert' }, 'Insert');
  const begin = el('button', { id: 'begin' }, 'Record into the patch file');
  const save = el('button', { id: 'save' }, 'Save the patch file');
  const remove = el('button', { id: 'remove' }, 'Remove every patch');
  const buttons = [insert, begin, save, remove];
  const prompts = () => [prompt.value, ...paraphrases.value.split('\n').map((s) => s.trim()).filter(Boolean)];
  const showEdges = async () => {
    try {
      const [r, p] = await run('SELECT entity, relation, target, prompt, layer, feature, patch FROM edges; SHOW PATCHES');
      edges.replaceChildren(el('h2', {}, 'Edges in this session'), table(r), el('h2', {}, 'Patches'), table(p));
    } catch (e) {
      edges.replaceChildren(errorBox(e));
    }
  };
  const act = async (label, work) => {
    for (const b of buttons) b.disabled = true;
    out.replaceChildren(el('div', { class: 'muted busy' }, label));
    try {
      out.replaceChildren(...[await work()].flat());
    } catch (e) {
      out.replaceChildren(errorBox(e));
    } finally {
      for (const b of buttons) b.disabled = settings.read_only;
      showEdges();
    }
  };
  insert.addEventListener('click', () => act('inserting (an edit takes a few seconds)', async () => {
    const ps = prompts();
    const before = await inferAll(ps);
    const text = `INSERT INTO edges (entity, relation, target, prompt) VALUES (${[entity, relation, target, prompt].map((f) => quote(f.value)).join(', ')})`;
    const [done] = await run(text);
    const after = await inferAll(ps);
    return [el('div', { class: 'statement' }, text), el('div', {}, objects(done)[0]?.detail ?? ''), comparison(ps, before, after)];
  }));
  begin.addEventListener('click', () => act('starting', async () => {
    const text = `BEGIN PATCH ${quote(patchFile.value)}`;
    const [done] = await run(text);
    return [el('div', { class: 'statement' }, text), table(done)];
  }));
  save.addEventListener('click', () => act('saving', async () => {
    const [done] = await run('SAVE PATCH');
    return [el('div', { class: 'statement' }, 'SAVE PATCH'), table(done)];
  }));
  remove.addEventListener('click', () => act('removing', async () => {
    // Every patch of this tab's session: its edits, a recording, patch files it saved.
    const [patches] = await run('SHOW PATCHES');
    const mine = objects(patches);
    if (!mine.length) return el('div', { class: 'muted' }, 'no edits to remove');
    const text = mine.map((p) => `REMOVE PATCH ${quote(p.patch)}`).join('; ');
    const done = await run(text);
    return [el('div', { class: 'statement' }, text), ...done.map((r) => table(r))];
  }));
  const parts = [el('h1', {}, 'Edit')];
  if (settings.read_only) {
    parts.push(el('div', { class: 'notice', id: 'read-only' },
      'This server runs with --read-only: statements that edit the model are refused, so the edit panel is off. ' +
      'Restart lql serve without --read-only to edit in a session.'));
    for (const b of buttons) b.disabled = true;
  }
  parts.push(
    el('div', { class: 'grid2' },
      el('div', { class: 'panel' }, entityLabel, relationLabel, targetLabel, promptLabel,
        el('label', { for: 'paraphrases' }, el('span', { class: 'muted' }, 'paraphrases (one per line)'), paraphrases),
        el('div', { class: 'row' }, insert, remove)),
      el('div', { class: 'panel' }, patchLabel, el('div', { class: 'row' }, begin, save),
        el('div', { class: 'muted' }, 'Edits live in this tab’s session until removed. To keep them, record into a patch file first (BEGIN PATCH), insert, then save it (SAVE PATCH); the server can APPLY it later.'))),
    out, edges);
  showEdges();
  return parts;
}
