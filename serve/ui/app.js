// The workbench's router: one page whose views are chosen by the path, so every view has a
// link that can be shared (`/feature/20:412`, `/trace?prompt=…`). Settings come from
// /ui/settings.json (the model's name, whether the server is read-only).

import * as attention from './attention.js';
import * as consoleView from './console.js';
import * as edit from './edit.js';
import * as feature from './feature.js';
import * as trace from './trace.js';
import { el, tip } from './render.js';

const VIEWS = [
  { path: '/', name: 'Console', view: consoleView.view },
  { path: '/feature', name: 'Feature', view: feature.view },
  { path: '/trace', name: 'Trace', view: trace.view },
  { path: '/attention', name: 'Attention', view: attention.view },
  { path: '/edit', name: 'Edit', view: edit.view },
];

let settings = { model: '', read_only: false };

function match(pathname) {
  if (pathname === '/' || pathname === '/console') return [VIEWS[0], null];
  for (const v of VIEWS.slice(1)) {
    if (pathname === v.path) return [v, null];
    if (pathname.startsWith(v.path + '/')) return [v, decodeURIComponent(pathname.slice(v.path.length + 1))];
  }
  return [null, null];
}

export function navigate(url) {
  history.pushState(null, '', url);
  render();
}

function render() {
  tip.hide();
  const [v, id] = match(location.pathname);
  for (const a of document.querySelectorAll('header nav a')) {
    if (a.getAttribute('href') === (v ? v.path : '')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const main = document.querySelector('main');
  if (!v) {
    main.replaceChildren(el('h1', {}, 'Not found'), el('p', {}, 'No view here; the console is at ', el('a', { href: '/', 'data-link': true }, '/'), '.'));
    return;
  }
  document.title = `${v.name} · LQL workbench`;
  main.replaceChildren(...[v.view(new URLSearchParams(location.search), navigate, settings, id)].flat());
  main.dataset.view = v.name.toLowerCase();
}

function theme(next) {
  const t = next || localStorage.getItem('lql.theme') || (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light');
  document.documentElement.dataset.theme = t;
  localStorage.setItem('lql.theme', t);
}

async function start() {
  theme();
  try {
    settings = await (await fetch('/ui/settings.json')).json();
  } catch (e) {
    // Without settings the views assume a writable server; the server still refuses what it must.
  }
  const toggle = el('button', { id: 'theme', title: 'light / dark (T)', 'aria-label': 'toggle theme', onclick: () => theme(document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark') }, '◐');
  document.querySelector('header').append(
    el('nav', { 'aria-label': 'views' }, VIEWS.map((v) => el('a', { href: v.path, 'data-link': true }, v.name))),
    el('span', { class: 'model', id: 'model' }, settings.model + (settings.read_only ? ' · read-only' : '')),
    toggle,
  );
  document.addEventListener('click', (e) => {
    const a = e.target.closest('a[data-link]');
    if (a && !e.ctrlKey && !e.metaKey && !e.shiftKey && a.origin === location.origin) {
      e.preventDefault();
      navigate(a.getAttribute('href'));
    }
  });
  document.addEventListener('keydown', (e) => {
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement?.tagName);
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    const n = Number.parseInt(e.key, 10);
    if (n >= 1 && n <= VIEWS.length) navigate(VIEWS[n - 1].path);
    else if (e.key === 't' || e.key === 'T') toggle.click();
    else if (e.key === '/') {
      e.preventDefault();
      document.querySelector('main input, main textarea')?.focus();
    }
  });
  addEventListener('popstate', render);
  render();
}

start();
