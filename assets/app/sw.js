// The service worker of the pages (docs/web.md), scope /app/: it shows a pushed reminder as a
// notification and opens the inbox when the notification is clicked. It handles nothing else
// (no fetch handler: the pages still need the server). Server text is only ever text here.

/** What a pushed message says: the scheduler's JSON (scheduler.md §7.6), or its text. */
function messageOf(data) {
  if (!data) return { title: 'Reminder', body: '' };
  let text = '';
  try {
    text = data.text();
    const message = JSON.parse(text);
    if (message && typeof message === 'object') return message;
  } catch (_) {
    // not JSON: the text itself is the reminder
  }
  return { title: 'Reminder', body: text };
}

self.addEventListener('push', (event) => {
  const message = messageOf(event.data);
  const title = typeof message.title === 'string' && message.title ? message.title : 'Reminder';
  const body = typeof message.body === 'string' ? message.body : '';
  const options = { body, data: message, icon: 'icon-192.png' };
  // one notification per reminder: a message sent again replaces its earlier copy
  if (typeof message.item === 'string' && message.item) options.tag = message.item;
  event.waitUntil(self.registration.showNotification(title, options));
});

/**
 * Where a click on a notification goes: the inbox pages (the reminder came back there, or is
 * about to). This worker's own `/app/` when it is the inbox's; from the scheduler's worker,
 * the inbox of this server (its public origin when the operator gave one, else this host at
 * the inbox's port), or this scheduler's Triggered page when the process runs no inbox.
 */
async function clickTarget() {
  const here = self.location.origin;
  let settings = null;
  try {
    const answer = await fetch('/app/config.json', { cache: 'no-store', credentials: 'omit' });
    settings = await answer.json();
  } catch (_) {
    settings = null;
  }
  if (!settings || settings.service === 'inbox') return here + '/app/';
  const inbox = settings.inbox;
  if (inbox && inbox.origin) return inbox.origin + '/app/';
  if (inbox && inbox.port) return self.location.protocol + '//' + self.location.hostname + ':' + inbox.port + '/app/';
  return here + '/app/triggered';
}

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  event.waitUntil(
    (async () => {
      const target = await clickTarget();
      // an open window of those pages comes to the front; else one is opened
      const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
      const open = windows.find((w) => w.url === target || w.url.startsWith(target + '?') || w.url.startsWith(target + '#'));
      if (open && 'focus' in open) return open.focus();
      return self.clients.openWindow(target);
    })(),
  );
});
