// The inbox: capture a note (Enter adds it), process the items one at a time, oldest first
// (done, or keep for later), the whole list with delete buttons, and the count.
import {
  busy,
  call,
  deleteButton,
  el,
  frame,
  fromBase64,
  linkified,
  onSubmit,
  requireLogin,
  setSiblingToken,
  showError,
  sibling,
  siblingToken,
  toBase64,
  todayIn,
  when,
} from './api.js';

let items = [];
// the scheduler of this server ({service, origin}) when it runs one: "Later…" moves items there
let scheduler = null;

/** A day (YYYY-MM-DD) `n` days after `day`. */
function addDays(day, n) {
  const [y, m, d] = day.split('-').map(Number);
  return new Date(Date.UTC(y, m - 1, d + n)).toISOString().slice(0, 10);
}

/** The hour now in `zone`. */
function hourIn(zone) {
  return Number(new Intl.DateTimeFormat('en-GB', { timeZone: zone, hour: '2-digit', hourCycle: 'h23' }).format(new Date()));
}

/** Calls the scheduler of this server with the token kept at login. */
async function callScheduler(method, path, body) {
  const bearer = siblingToken();
  const again = 'The scheduler of this server did not take the sign-in: log out (Settings) and log in again.';
  if (!bearer) throw new Error(again);
  try {
    return await call(method, path, body, { base: scheduler.origin, bearer });
  } catch (e) {
    if (e.status === 401) {
      setSiblingToken(null);
      throw new Error(again);
    }
    throw e;
  }
}

/**
 * Moves a text item into the scheduler for `day` (and `time`, the account's zone): the
 * inbox item is deleted only once the scheduler answered that the new item is stored.
 */
async function defer(item, day, time) {
  const content = fromBase64(item.contents.data);
  await callScheduler('POST', '/scheduler/item', { content, 'scheduled-day': day, 'scheduled-time': time, recurrence: null });
  await call('DELETE', '/inbox/item/' + item.id);
  await refresh();
}

/** The "Later…" button of an item and its panel of presets (this evening, tomorrow, next week, a date). */
function laterControls(item, where) {
  if (!scheduler || item.contents.type !== 'text') return [];
  const open = el('button', { type: 'button', class: 'secondary later-open', 'aria-expanded': 'false' }, 'Later…');
  const panel = el('div', { class: 'later', hidden: true, role: 'group', 'aria-label': 'Schedule for later' });
  open.addEventListener('click', () =>
    busy(open, where, async () => {
      if (!panel.hidden) {
        panel.hidden = true;
        open.setAttribute('aria-expanded', 'false');
        return;
      }
      const settings = await callScheduler('GET', '/account/settings');
      const zone = settings.timezone.name;
      const today = todayIn(zone);
      const [y, m, d] = today.split('-').map(Number);
      const weekday = new Date(Date.UTC(y, m - 1, d)).getUTCDay();
      const presets = [];
      if (hourIn(zone) < 18) presets.push(['This evening', today, '18:00:00']);
      presets.push(['Tomorrow', addDays(today, 1), '09:00:00']);
      presets.push(['Next week', addDays(today, (8 - weekday) % 7 || 7), '09:00:00']);
      const buttons = presets.map(([label, day, time]) => {
        const b = el('button', { type: 'button', class: 'secondary later-preset' }, label);
        b.addEventListener('click', () => busy(b, where, () => defer(item, day, time)));
        return b;
      });
      const dayId = 'later-day-' + item.id;
      const timeId = 'later-time-' + item.id;
      const pick = el(
        'form',
        { class: 'later-pick' },
        el(
          'div',
          { class: 'fields two' },
          el('div', {}, el('label', { for: dayId }, 'Pick a date'), el('input', { id: dayId, name: 'day', type: 'date', required: true, min: today, value: addDays(today, 1) })),
          el('div', {}, el('label', { for: timeId }, 'Time'), el('input', { id: timeId, name: 'time', type: 'time', step: '60', value: '09:00' })),
        ),
        el('div', { class: 'actions' }, el('button', { type: 'submit' }, 'Schedule')),
      );
      pick.addEventListener('submit', (event) => {
        event.preventDefault();
        const data = new FormData(pick);
        const time = data.get('time') ? data.get('time').slice(0, 5) + ':00' : null;
        busy(event.submitter || pick.querySelector('button'), where, () => defer(item, data.get('day'), time));
      });
      panel.replaceChildren(
        el('p', { class: 'muted' }, 'Into the scheduler (' + zone + '); it leaves the inbox once it is stored there.'),
        el('div', { class: 'actions' }, ...buttons),
        pick,
      );
      panel.hidden = false;
      open.setAttribute('aria-expanded', 'true');
    }),
  );
  return [open, panel];
}
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
  const [laterOpen, laterPanel] = laterControls(item, card);
  if (laterOpen) card.querySelector('.actions').append(laterOpen);
  if (laterPanel) card.append(laterPanel);
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
      row.append(el('div', { class: 'text' }, contentsNode(item, false), el('span', { class: 'meta' }, when(item.created))), ...laterControls(item, row), del);
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
  scheduler = await sibling();
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
