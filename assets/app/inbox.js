// The inbox: capture a note (Enter adds it), process the items one at a time, oldest first
// (done, or keep for later), the whole list with delete buttons, and the count.
import { busy, call, deleteButton, el, frame, fromBase64, linkified, onSubmit, requireLogin, showError, toBase64, when } from './api.js';

let items = [];
// ids kept for later in this visit: processing goes on with the next one
const kept = new Set();

function contentsNode(item, big) {
  const { type, data } = item.contents;
  if (type === 'image/png' || type === 'image/jpeg') {
    return el('img', { class: 'item-image', src: 'data:' + type + ';base64,' + data, alt: 'Image item' });
  }
  return el(big ? 'p' : 'span', { class: big ? 'item-text' : 'text' }, linkified(fromBase64(data)));
}

async function remove(item, button, where) {
  await busy(button, where, async () => {
    await call('DELETE', '/inbox/item/' + item.id);
    await refresh();
  });
}

function renderProcess() {
  const body = document.getElementById('process-body');
  const waiting = items.filter((i) => !kept.has(i.id));
  if (items.length === 0) {
    body.replaceChildren(el('p', { class: 'muted' }, 'The inbox is empty.'));
    return;
  }
  if (waiting.length === 0) {
    const again = el('button', { type: 'button', class: 'secondary' }, 'Start over');
    again.addEventListener('click', () => {
      kept.clear();
      renderProcess();
    });
    body.replaceChildren(el('p', { class: 'muted' }, 'Every item was looked at; the kept ones are still in the inbox.'), again);
    return;
  }
  const item = waiting[0];
  const position = items.length - waiting.length + 1;
  const done = el('button', { type: 'button' }, 'Done');
  const keep = el('button', { type: 'button', class: 'secondary' }, 'Keep for later');
  const card = el(
    'div',
    { id: 'current-item' },
    el('p', { class: 'muted' }, 'Item ' + position + ' of ' + items.length + ', added ' + when(item.created)),
    contentsNode(item, true),
    el('div', { class: 'actions' }, done, keep),
  );
  done.addEventListener('click', () => remove(item, done, card));
  keep.addEventListener('click', () => {
    kept.add(item.id);
    renderProcess();
  });
  body.replaceChildren(card);
}

function renderList() {
  const list = document.getElementById('items');
  list.replaceChildren(
    ...items.map((item) => {
      const row = el('li', {});
      const del = deleteButton('Delete', 'Delete item added ' + when(item.created), row, async () => {
        await call('DELETE', '/inbox/item/' + item.id);
        await refresh();
      });
      row.append(el('div', { class: 'text' }, contentsNode(item, false), el('span', { class: 'meta' }, when(item.created))), del);
      return row;
    }),
  );
  if (items.length === 0) list.replaceChildren(el('li', { class: 'muted' }, 'Nothing here.'));
  document.getElementById('count').textContent = '(' + items.length + ')';
  document.title = 'Inbox (' + items.length + ') · Pigeonhole';
}

let shown = null;

/**
 * Reads the items again and draws them when they changed (so the timer's refresh does not
 * move the keyboard focus away from an unchanged page).
 */
async function refresh() {
  const latest = await call('GET', '/inbox/items');
  const signature = latest.map((i) => i.id).join();
  if (signature === shown) return;
  shown = signature;
  items = latest;
  for (const id of kept) if (!items.some((i) => i.id === id)) kept.delete(id);
  renderProcess();
  renderList();
}

async function start() {
  if (!requireLogin()) return;
  frame('/app/');
  const form = document.getElementById('capture');
  const input = document.getElementById('capture-text');
  onSubmit(form, async (data) => {
    const text = data.get('text');
    await call('POST', '/inbox/item', { type: 'text', data: toBase64(text) });
    input.value = '';
    input.focus();
    await refresh();
  });
  const section = document.getElementById('process');
  try {
    await refresh();
  } catch (e) {
    showError(section, e.message);
  }
  // items delivered by the scheduler or added elsewhere show up while the page is open
  setInterval(() => {
    if (document.visibilityState === 'visible') refresh().catch(() => {});
  }, 5000);
}

start();
