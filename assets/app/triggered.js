// Triggered items: when each came due, what each delivery did (in the server's words), a
// retry button for failed deliveries, delete one or all.
import { busy, call, contentText, deleteButton, el, frame, linkified, recurrenceText, requireLogin, showError, when } from './api.js';

/** The trigger of an attempt, or null when it was deleted since. */
function triggerOf(triggers, id) {
  return triggers.find((x) => x.uuid === id) || null;
}

/** Who an attempt went to, in words ("the inbox at …", "a@b.org", "the webhook at …"). */
function targetName(trigger) {
  if (!trigger) return 'a deleted trigger';
  const value = trigger.info.typedTriggerInfoValue || {};
  switch (trigger.info.typedTriggerInfoType) {
    case 'email':
      return value.emailTriggerInfoEmailAddress;
    case 'inbox':
      return 'inbox at ' + value.inboxTriggerInfoUrl;
    case 'push':
      return 'device (via ' + value.pushTriggerInfoHost + ')';
    case 'webhook':
      return 'webhook at ' + value.webhookTriggerInfoUrl;
    default:
      return 'trigger';
  }
}

/** `[delivered, words]` of one attempt, in the server's words for a failure. */
function outcome(attempt, triggers) {
  const [triggerId, result] = attempt.contents;
  const trigger = triggerOf(triggers, triggerId);
  const target = targetName(trigger);
  switch (result.tag) {
    case 'InboxAdditionSuccess':
      return [true, trigger ? 'Delivered to the ' + target : 'Delivered to an inbox since removed'];
    case 'EmailResultSent':
      return [true, trigger ? 'E-mailed to ' + target : 'E-mailed to an address since removed'];
    case 'PushResultSent':
      return [true, trigger ? 'Pushed to your ' + target : 'Pushed to a device since removed'];
    case 'WebhookResultSent':
      return [true, trigger ? 'Sent to the ' + target : 'Sent to a webhook since removed'];
    case 'PushResultError':
      return [false, 'Push failed' + (trigger ? ' (via ' + trigger.info.typedTriggerInfoValue.pushTriggerInfoHost + ')' : '') + ': ' + result.contents];
    case 'WebhookResultError':
      return [false, 'Failed for the ' + (trigger ? target : 'removed webhook') + ': ' + result.contents];
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
