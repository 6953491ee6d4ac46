// The share target of the installed app (manifest `share_target`, GET with title, text and
// url): the shared words are shown in the capture form and become one text item when the
// person saves them. Never saved by the page itself: any page anywhere can send a logged-in
// person to this address with words of its choosing (issue 18). Not logged in: the login
// page comes first and brings the reader back here.
import { call, el, frame, onSubmit, requireLogin, toBase64 } from './api.js';

function sharedText() {
  const params = new URLSearchParams(location.search);
  const parts = [];
  for (const name of ['title', 'text', 'url']) {
    const value = (params.get(name) || '').trim();
    // apps often repeat the link inside the text
    if (value && !parts.some((p) => p.includes(value))) parts.push(value);
  }
  return parts.join('\n');
}

async function save(text) {
  await call('POST', '/inbox/item', { type: 'text', data: toBase64(text) });
  const done = document.getElementById('share-done');
  done.replaceChildren('Saved to the inbox. ', el('a', { href: '/app/' }, 'Open the inbox'));
  document.getElementById('share').hidden = true;
}

async function start() {
  if (!requireLogin()) return;
  frame('');
  const form = document.getElementById('share');
  const text = sharedText();
  document.getElementById('share-text').value = text;
  onSubmit(form, (data) => save(data.get('text')));
  // waits for the person: the save button is ready for a tap (or Enter)
  document.getElementById(text ? 'share-save' : 'share-text').focus();
}

start();
