// The scheduler: add an item for a day and (optional) time, with recurrence (every N days,
// every N months on a day), edit and delete it; the upcoming items, soonest first, in the
// account's time zone.
import { call, contentText, deleteButton, el, frame, linkified, offerZone, onSubmit, recurrenceText, requireLogin, shortDay, showError } from './api.js';
import { pushCard } from './push.js';

let editing = null;
// the scheduled time (HH:MM:SS) of the item being edited
let editedTime = null;

function dueText(contents, zone) {
  return shortDay(contents['scheduled-day'], contents['scheduled-time'], zone);
}

function showRepeatFields() {
  const repeat = document.getElementById('item-repeat').value;
  document.getElementById('repeat-fields').hidden = !repeat;
  document.getElementById('month-day-field').hidden = repeat !== 'months';
}

/**
 * The time of the form (minutes: HH:MM) as the server keeps it (HH:MM:SS). An edited item
 * keeps the seconds it had (made elsewhere) while its minute is not changed.
 */
function timeFrom(data) {
  const minute = data.get('time');
  if (!minute) return null;
  if (editedTime && editedTime.slice(0, 5) === minute) return editedTime;
  return minute.slice(0, 5) + ':00';
}

function contentsFrom(data) {
  const time = timeFrom(data);
  const every = Number(data.get('every') || 1);
  let recurrence = null;
  if (data.get('repeat') === 'days') {
    recurrence = { 'every-x-days': { days: every, 'time-of-day': time } };
  } else if (data.get('repeat') === 'months') {
    const day = data.get('monthDay');
    recurrence = { 'every-x-months': { months: every, day: day ? Number(day) : null, 'time-of-day': time } };
  }
  return { content: data.get('content'), 'scheduled-day': data.get('day'), 'scheduled-time': time, recurrence };
}

function stopEditing() {
  editing = null;
  editedTime = null;
  const form = document.getElementById('item');
  form.reset();
  document.getElementById('item-day').value = today();
  document.getElementById('item-title').textContent = 'Schedule an item';
  document.getElementById('item-submit').textContent = 'Schedule';
  document.getElementById('item-cancel').hidden = true;
  showRepeatFields();
}

function startEditing(item) {
  editing = item.id;
  const c = item.contents;
  document.getElementById('item-content').value = contentText(c.content);
  document.getElementById('item-day').value = c['scheduled-day'];
  // the field takes minutes
  editedTime = c['scheduled-time'] || null;
  document.getElementById('item-time').value = editedTime ? editedTime.slice(0, 5) : '';
  const days = c.recurrence?.['every-x-days'];
  const months = c.recurrence?.['every-x-months'];
  document.getElementById('item-repeat').value = days ? 'days' : months ? 'months' : '';
  document.getElementById('item-every').value = days?.days ?? months?.months ?? 1;
  document.getElementById('item-month-day').value = months?.day ?? '';
  document.getElementById('item-title').textContent = 'Edit the item';
  document.getElementById('item-submit').textContent = 'Save changes';
  document.getElementById('item-cancel').hidden = false;
  showRepeatFields();
  document.getElementById('item-content').focus();
}

function today() {
  const now = new Date();
  return now.getFullYear() + '-' + String(now.getMonth() + 1).padStart(2, '0') + '-' + String(now.getDate()).padStart(2, '0');
}

async function refresh() {
  const [items, settings] = await Promise.all([
    call('GET', '/scheduler/items?filter=onlyuntriggered'),
    call('GET', '/account/settings'),
  ]);
  const zone = settings.timezone.name;
  document.getElementById('zone').textContent = '(times in ' + zone + ')';
  offerZone(document.getElementById('zone-offer'), zone, refresh);
  items.sort((a, b) => {
    const key = (i) => i.contents['scheduled-day'] + 'T' + (i.contents['scheduled-time'] || '00:00:00');
    return key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0;
  });
  const list = document.getElementById('items');
  list.replaceChildren(
    ...items.map((item) => {
      const text = contentText(item.contents.content);
      const edit = el('button', { type: 'button', class: 'secondary', 'aria-label': 'Edit “' + text + '”' }, 'Edit');
      const row = el('li', {});
      const del = deleteButton('Delete', 'Delete “' + text + '”', row, async () => {
        await call('DELETE', '/scheduler/item/delete/' + item.id);
        if (editing === item.id) stopEditing();
        await refresh();
      });
      const repeat = recurrenceText(item.contents.recurrence);
      row.append(
        el('div', { class: 'text' }, linkified(text), el('span', { class: 'meta' }, dueText(item.contents, zone) + (repeat ? ' · ' + repeat : ''))),
        edit,
        del,
      );
      edit.addEventListener('click', () => startEditing(item));
      return row;
    }),
  );
  if (items.length === 0) list.replaceChildren(el('li', { class: 'muted' }, 'Nothing scheduled.'));
  document.getElementById('count').textContent = '(' + items.length + ')';
}

async function start() {
  if (!requireLogin()) return;
  frame('/app/');
  document.getElementById('item-repeat').addEventListener('change', showRepeatFields);
  document.getElementById('item-cancel').addEventListener('click', stopEditing);
  stopEditing();
  onSubmit(document.getElementById('item'), async (data) => {
    const contents = contentsFrom(data);
    if (editing) await call('POST', '/scheduler/item/info/' + editing, contents);
    else await call('POST', '/scheduler/item', contents);
    stopEditing();
    await refresh();
  });
  try {
    await refresh();
  } catch (e) {
    showError(document.querySelector('main'), e.message);
  }
  pushCard(document.getElementById('push'), { call }, '/app/triggers#ntfy');
}

start();
