// Triggered items: when each came due, what each delivery did (in the server's words), a
// retry button for failed deliveries, delete one or all.
import { busy, call, contentText, deleteButton, el, frame, linkified, recurrenceText, requireLogin, showError, when } from './api.js';

function triggerName(triggers, id) {
  const t = triggers.find((x) => x.uuid === id);
  if (!t) return 'a deleted trigger';
  const value = t.info.typedTriggerInfoValue;
  return t.info.typedTriggerInfoType === 'email' ? value.emailTriggerInfoEmailAddress : 'inbox at ' + value.inboxTriggerInfoUrl;
}

function outcome(attempt, triggers) {
  const [triggerId, result] = attempt.contents;
  const target = triggerName(triggers, triggerId);
  switch (result.tag) {
    case 'InboxAdditionSuccess':
      return [true, 'Delivered to the ' + target];
    case 'EmailResultSent':
      return [true, 'E-mailed to ' + target];
    case 'InboxAdditionFailure':
    case 'EmailResultError':
      return [false, 'Failed for ' + target + ': ' + result.contents];
    default:
      return [false, result.tag + ' for ' + target];
  }
}

let shown = null;

async function refresh() {
  const [items, triggers, settings] = await Promise.all([
    call('GET', '/scheduler/items?filter=onlytriggered'),
    call('GET', '/trigger'),
    call('GET', '/account/settings'),
  ]);
  // the timer's refresh draws only a change (the keyboard focus stays where it is)
  const signature = JSON.stringify([items, triggers, settings]);
  if (signature === shown) return;
  shown = signature;
  const zone = settings.timezone.name;
  items.sort((a, b) => (a.triggered.triggeredInfoTriggered < b.triggered.triggeredInfoTriggered ? 1 : -1));
  const list = document.getElementById('items');
  list.replaceChildren(
    ...items.map((item) => {
      const text = contentText(item.contents.content);
      const attempts = item.triggered.triggeredInfoTriggerTriggerAttempts;
      const outcomes = attempts.map((a) => outcome(a, triggers));
      const failed = outcomes.some(([ok]) => !ok);
      const repeat = recurrenceText(item.contents.recurrence);
      const retry = failed ? el('button', { type: 'button', 'aria-label': 'Retry “' + text + '”' }, 'Retry') : null;
      const row = el('li', {});
      const del = deleteButton('Delete', 'Delete “' + text + '”', row, async () => {
        await call('DELETE', '/scheduler/item/delete/' + item.id);
        await refresh();
      });
      const results = el(
        'ul',
        { class: 'meta' },
        ...outcomes.map(([ok, words]) => el('li', { class: ok ? 'outcome-ok' : 'outcome-failed' }, words)),
      );
      if (outcomes.length === 0) results.append(el('li', { class: 'muted' }, 'No delivery finished yet.'));
      row.append(
        el(
          'div',
          { class: 'text' },
          linkified(text),
          el('span', { class: 'meta' }, 'Came due ' + when(item.triggered.triggeredInfoTriggered, zone) + (repeat ? ' · ' + repeat : '')),
          results,
        ),
        // the Retry button only for a failed delivery (append writes a null as the text "null")
        ...(retry ? [retry] : []),
        del,
      );
      retry?.addEventListener('click', () =>
        busy(retry, row, async () => {
          await call('POST', '/scheduler/item/retry', [item.id]);
          await refresh();
        }),
      );
      return row;
    }),
  );
  if (items.length === 0) list.replaceChildren(el('li', { class: 'muted' }, 'Nothing has come due yet.'));
  document.getElementById('count').textContent = '(' + items.length + ')';
}

async function start() {
  if (!requireLogin()) return;
  frame('/app/triggered');
  const all = document.getElementById('delete-all');
  const box = all.parentElement;
  all.replaceWith(
    deleteButton('Delete all triggered items', 'Delete all triggered items', box, async () => {
      await call('POST', '/scheduler/item/delete-triggereds');
      await refresh();
    }),
  );
  box.querySelector('button').id = 'delete-all';
  try {
    await refresh();
  } catch (e) {
    showError(document.querySelector('main'), e.message);
  }
  setInterval(() => {
    if (document.visibilityState === 'visible') refresh().catch(() => {});
  }, 5000);
}

start();
