// The inbox: capture a note (Enter adds it), process the items one at a time, oldest first
// (done, keep for later, or later…), the whole list with "Later…" and delete buttons, and
// the count. Done and "Later…" can be undone for a few seconds (docs/web.md).
import {
  busy,
  call,
  deleteButton,
  deliveryWords,
  el,
  frame,
  fromBase64,
  linkInbox,
  linkified,
  listWords,
  onSubmit,
  requireLogin,
  setSiblingToken,
  shortDay,
  showError,
  sibling,
  siblingHref,
  siblingToken,
  toBase64,
  todayIn,
  when,
} from './api.js';
import { pushCard } from './push.js';

let items = [];
// the scheduler of this server ({service, origin}) when it runs one: "Later…" moves items there
let scheduler = null;

/** How long Done and "Later…" can be undone: the request is sent when this has passed. */
const UNDO_MS = 5000;

/**
 * Done and "Later…" waiting for their undo window to close, by item id: `{item, commit,
 * keepalive, line}`. Their items are not shown; `commit` is the request that makes the
 * action final (sent only when the window closes), `keepalive` the one request that may be
 * sent as the page goes away (Done's delete; none for "Later…", whose two requests in a row
 * a closing page cannot promise: the item then simply stays in the inbox).
 */
const pending = new Map();

/** A day (YYYY-MM-DD) `n` days after `day`. */
function addDays(day, n) {
  const [y, m, d] = day.split('-').map(Number);
  return new Date(Date.UTC(y, m - 1, d + n)).toISOString().slice(0, 10);
}

/** The hour now in `zone`. */
function hourIn(zone) {
  return Number(new Intl.DateTimeFormat('en-GB', { timeZone: zone, hour: '2-digit', hourCycle: 'h23' }).format(new Date()));
}

const AGAIN = 'The scheduler of this server did not take the sign-in: log out (Settings) and log in again.';

/** The options of `call` for the scheduler of this server, with the token kept at login. */
function schedulerOptions() {
  const bearer = siblingToken();
  if (!bearer) throw new Error(AGAIN);
  return { base: scheduler.origin, bearer };
}

/** Calls the scheduler of this server with the token kept at login. */
async function callScheduler(method, path, body) {
  try {
    return await call(method, path, body, schedulerOptions());
  } catch (e) {
    if (e.status === 401) {
      setSiblingToken(null);
      throw new Error(AGAIN);
    }
    throw e;
  }
}

/** The text of a text item, short enough for a line: “Buy milk”. */
function quoted(item) {
  const text = fromBase64(item.contents.data).replace(/\s+/g, ' ').trim();
  return '“' + (text.length > 40 ? text.slice(0, 39) + '…' : text) + '”';
}

/**
 * Where a due item comes back, from the scheduler's triggers: `{words, localInbox}`, words
 * as `deliveryWords` (empty when nothing brings it back), `localInbox` the URL the scheduler
 * reaches this server's inbox at (null when it does not know it).
 */
async function destination() {
  const [triggers, theirs] = await Promise.all([
    callScheduler('GET', '/trigger'),
    call('GET', '/app/config.json', undefined, { base: scheduler.origin }).catch(() => ({})),
  ]);
  const localInbox = theirs.inbox?.url || null;
  return { words: deliveryWords(triggers, localInbox), localInbox };
}

/** The account's username on this inbox (for the trigger that links the scheduler to it). */
let username = null;
async function myName() {
  username ??= (await call('GET', '/account')).username;
  return username;
}

/**
 * Moves a text item into the scheduler for `day` (and `time`, the account's zone): the
 * inbox item is deleted only once the scheduler answered that the new item is stored.
 */
async function moveToScheduler(item, day, time) {
  const content = fromBase64(item.contents.data);
  await callScheduler('POST', '/scheduler/item', { content, 'scheduled-day': day, 'scheduled-time': time, recurrence: null });
  await call('DELETE', '/inbox/item/' + item.id);
}

/** "comes back into this inbox tomorrow 09:00", or the warning that nothing brings it back. */
function comesBack(words, day, time, zone) {
  const at = shortDay(day, time, zone);
  return words.length ? 'comes back ' + listWords(words) + ' ' + at : 'is due ' + at + ' on the Triggered page only';
}

/** The "Later…" button of an item and its panel: where it comes back, presets (this evening, tomorrow, next week), a date. */
function laterControls(item, where) {
  if (!scheduler || item.contents.type !== 'text') return [];
  const open = el('button', { type: 'button', class: 'secondary later-open', 'aria-expanded': 'false' }, 'Later…');
  const panel = el('div', { class: 'later', hidden: true, role: 'group', 'aria-label': 'Schedule for later' });

  /** Fills the panel (again after linking the inbox). */
  async function fill() {
    const [settings, { words, localInbox }] = await Promise.all([callScheduler('GET', '/account/settings'), destination()]);
    const zone = settings.timezone.name;
    const today = todayIn(zone);
    const [y, m, d] = today.split('-').map(Number);
    const weekday = new Date(Date.UTC(y, m - 1, d)).getUTCDay();
    const presets = [];
    if (hourIn(zone) < 18) presets.push(['This evening', today, '18:00:00']);
    presets.push(['Tomorrow', addDays(today, 1), '09:00:00']);
    presets.push(['Next week', addDays(today, (8 - weekday) % 7 || 7), '09:00:00']);
    const choose = (day, time) => later(item, day, time, comesBack(words, day, time, zone));
    const buttons = presets.map(([label, day, time]) => {
      const b = el('button', { type: 'button', class: 'secondary later-preset' }, label, el('span', { class: 'preset-when' }, ' · ' + shortDay(day, time, zone)));
      b.addEventListener('click', () => choose(day, time));
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
      choose(data.get('day'), time);
    });
    let whereTo;
    if (words.length) {
      whereTo = el('p', { class: 'later-where' }, 'When it is due, it comes back ' + listWords(words) + ' (times in ' + zone + ').');
    } else {
      // nothing delivers due items: they would only be listed on the scheduler's Triggered page
      const triggersPage = el('a', { href: siblingHref(scheduler, '/app/triggers') }, "the scheduler's Triggers page");
      whereTo = el(
        'div',
        { class: 'later-where warning' },
        el('p', {}, 'Nothing brings it back when it is due: the scheduler has no trigger, so it would only be listed on its Triggered page. Link the scheduler to this inbox, or add an e-mail trigger on ', triggersPage, '.'),
      );
      if (localInbox) {
        const link = el('button', { type: 'button', class: 'link-inbox' }, 'Deliver reminders into this inbox');
        link.addEventListener('click', () =>
          busy(link, where, async () => {
            await linkInbox({}, schedulerOptions(), await myName(), localInbox);
            await fill();
            panel.querySelector('.later-preset')?.focus();
          }),
        );
        whereTo.append(el('div', { class: 'actions' }, link));
      }
    }
    panel.replaceChildren(
      whereTo,
      el('p', { class: 'muted' }, 'Into the scheduler; it leaves the inbox once it is stored there.'),
      el('div', { class: 'actions' }, ...buttons),
      pick,
    );
  }

  open.addEventListener('click', () =>
    busy(open, where, async () => {
      if (!panel.hidden) {
        panel.hidden = true;
        open.setAttribute('aria-expanded', 'false');
        return;
      }
      await fill();
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

/**
 * An item leaves the page at once, with "Undo" for UNDO_MS; then `commit` makes it final.
 * A failed commit brings the item back with the reason.
 */
function leave(item, words, commit, keepalive = null) {
  if (pending.has(item.id)) return;
  const undo = el('button', { type: 'button', class: 'secondary undo-button', 'aria-label': 'Undo: ' + words }, 'Undo');
  const line = el('div', { class: 'undo-line' }, el('span', {}, words), undo);
  const entry = { item, commit, keepalive, line, timer: null };
  undo.addEventListener('click', () => {
    if (entry.sending) return;
    clearTimeout(entry.timer);
    pending.delete(item.id);
    line.remove();
    showUndoBox();
    render();
    // the keyboard goes on where the item is back
    document.querySelector('#current-item button, #capture-text')?.focus();
  });
  entry.timer = setTimeout(() => finish(entry), UNDO_MS);
  pending.set(item.id, entry);
  document.getElementById('undo').append(line);
  showUndoBox();
  render();
  // the button that was pressed is gone: the keyboard goes on with the next item
  if (document.activeElement === document.body || !document.activeElement) document.querySelector('#current-item button, #capture-text')?.focus();
}

function showUndoBox() {
  const box = document.getElementById('undo');
  box.hidden = box.querySelector('.undo-line') === null;
}

/** The undo window closed: the action's request is sent (once). */
async function finish(entry) {
  if (entry.sending) return entry.sending;
  clearTimeout(entry.timer);
  const undo = entry.line.querySelector('button');
  undo.disabled = true;
  undo.setAttribute('aria-busy', 'true');
  entry.sending = (async () => {
    let failure = null;
    try {
      await entry.commit();
      // gone from the inbox: not drawn again while the list is read anew
      items = items.filter((i) => i.id !== entry.item.id);
    } catch (e) {
      failure = e;
    }
    pending.delete(entry.item.id);
    entry.line.remove();
    showUndoBox();
    render();
    if (failure) showError(document.getElementById('process'), quoted(entry.item) + ' is back in the inbox: ' + failure.message);
    await refresh(true).catch(() => {});
  })();
  return entry.sending;
}

/** Done: the item is deleted when the undo window closes (or, without a request in the way, as the page goes away). */
function done(item) {
  // deleted elsewhere meanwhile: as good as done
  const gone = (e) => {
    if (e.status !== 404) throw e;
  };
  const remove = (options) => call('DELETE', '/inbox/item/' + item.id, undefined, options).catch(gone);
  leave(item, quoted(item) + ' done.', () => remove({}), () => remove({ keepalive: true }));
}

/** "Later…": moved into the scheduler when the undo window closes. */
function later(item, day, time, comes) {
  leave(item, quoted(item) + ' ' + comes + '.', () => moveToScheduler(item, day, time));
}

/** The items shown: those without an action waiting in its undo window. */
function shownItems() {
  return items.filter((i) => !pending.has(i.id));
}

function renderProcess() {
  const body = document.getElementById('process-body');
  const all = shownItems();
  const waiting = all.filter((i) => !kept.has(i.id));
  if (all.length === 0) {
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
  const position = all.length - waiting.length + 1;
  const doneButton = el('button', { type: 'button' }, 'Done');
  const keep = el('button', { type: 'button', class: 'secondary' }, 'Keep for later');
  const card = el(
    'div',
    { id: 'current-item' },
    el('p', { class: 'muted' }, 'Item ' + position + ' of ' + all.length + ', added ' + when(item.created)),
    contentsNode(item, true),
    el('div', { class: 'actions' }, doneButton, keep),
  );
  const [laterOpen, laterPanel] = laterControls(item, card);
  if (laterOpen) card.querySelector('.actions').append(laterOpen);
  if (laterPanel) card.append(laterPanel);
  doneButton.addEventListener('click', () => done(item));
  keep.addEventListener('click', () => {
    kept.add(item.id);
    renderProcess();
  });
  body.replaceChildren(card);
}

function renderList() {
  const list = document.getElementById('items');
  const all = shownItems();
  list.replaceChildren(
    ...all.map((item) => {
      const row = el('li', {});
      const del = deleteButton('Delete', 'Delete item added ' + when(item.created), row, async () => {
        await call('DELETE', '/inbox/item/' + item.id);
        await refresh();
      });
      row.append(el('div', { class: 'text' }, contentsNode(item, false), el('span', { class: 'meta' }, when(item.created))), ...laterControls(item, row), del);
      return row;
    }),
  );
  if (all.length === 0) list.replaceChildren(el('li', { class: 'muted' }, 'Nothing here.'));
  document.getElementById('count').textContent = '(' + all.length + ')';
  document.title = 'Inbox (' + all.length + ') · Pigeonhole';
}

function render() {
  renderProcess();
  renderList();
}

let shown = null;

/**
 * Reads the items again and draws them when they changed (so the timer's refresh does not
 * move the keyboard focus away from an unchanged page); `force` draws them anyway.
 */
async function refresh(force = false) {
  const latest = await call('GET', '/inbox/items');
  const signature = latest.map((i) => i.id).join();
  if (signature === shown && !force) return;
  shown = signature;
  items = latest;
  for (const id of kept) if (!items.some((i) => i.id === id)) kept.delete(id);
  render();
}

/**
 * Leaving the page with actions in their undo window: a link of the page first makes them
 * final (then follows the link); a page that goes away otherwise (closed, reloaded) sends
 * Done's delete as it goes and leaves "Later…"'s item in the inbox.
 */
function finishBeforeLeaving() {
  document.addEventListener('click', (event) => {
    const link = event.target.closest('a[href]');
    if (!link || pending.size === 0 || link.target === '_blank' || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    Promise.all([...pending.values()].map(finish)).finally(() => location.assign(link.href));
  });
  addEventListener('pagehide', () => {
    for (const entry of pending.values()) if (entry.keepalive && !entry.sending) entry.keepalive().catch(() => {});
  });
}

async function start() {
  if (!requireLogin()) return;
  frame('/app/');
  scheduler = await sibling();
  // reminders come from the scheduler of this server: this device can ask for them
  if (scheduler) pushCard(document.getElementById('push'), { call: callScheduler }, siblingHref(scheduler, '/app/triggers#ntfy'));
  const form = document.getElementById('capture');
  const input = document.getElementById('capture-text');
  onSubmit(form, async (data) => {
    const text = data.get('text');
    await call('POST', '/inbox/item', { type: 'text', data: toBase64(text) });
    input.value = '';
    input.focus();
    await refresh();
  });
  finishBeforeLeaving();
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
