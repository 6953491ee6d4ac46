// The help page "Reminders on your phone" (plain text; the script only draws the navigation
// and, on the inbox, points the links to the Triggers page at the scheduler of this server).
import { config, frame, sibling, siblingHref } from './api.js';

async function start() {
  frame('/app/notifications');
  let settings = null;
  try {
    settings = await config();
  } catch (_) {
    return;
  }
  if (settings.service !== 'inbox') return;
  const scheduler = await sibling();
  for (const link of document.querySelectorAll('a.to-triggers')) {
    // without a scheduler here the words stay, without a link to nowhere
    if (scheduler) link.href = siblingHref(scheduler, link.getAttribute('href'));
    else link.replaceWith(document.createTextNode(link.textContent));
  }
}

start();
