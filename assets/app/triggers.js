// Triggers: the list (verify an e-mail address with the key of its e-mail, resend that
// e-mail, delete), add an inbox or an e-mail trigger, and — when this server also runs the
// inbox — one form that logs in to that inbox, makes it an access key that may only add
// items, and adds the trigger with it.
import { busy, call, config, deleteButton, deliversTo, el, frame, linkInbox, onSubmit, requireLogin, showError, sibling } from './api.js';
import { forgetThisDevice, rememberedTrigger } from './push.js';

/** A trigger's line: what it is in words, its state, and the ask-once delete. */
function row(trigger) {
  const type = trigger.info.typedTriggerInfoType;
  const value = trigger.info.typedTriggerInfoValue || {};
  const li = el('li', {});
  const thisDevice = type === 'push' && trigger.uuid === rememberedTrigger();
  const labels = {
    email: 'Delete the e-mail trigger ' + value.emailTriggerInfoEmailAddress,
    inbox: 'Delete the inbox trigger ' + value.inboxTriggerInfoUrl,
    push: 'Delete the push trigger to ' + value.pushTriggerInfoHost + (thisDevice ? ' (this device)' : ''),
    webhook: 'Delete the webhook to ' + value.webhookTriggerInfoUrl,
  };
  const del = deleteButton('Delete', labels[type] || 'Delete this trigger', li, async () => {
    await call('DELETE', '/trigger/delete/' + trigger.uuid);
    // this device no longer gets reminders: its subscription ends too
    if (thisDevice) await forgetThisDevice();
    await refresh();
  });
  if (type === 'email') {
    const address = value.emailTriggerInfoEmailAddress;
    const verified = value.emailTriggerInfoVerified;
    li.append(el('div', { class: 'text' }, 'E-mail to ' + address, el('span', { class: 'meta' }, verified ? 'Verified' : 'Not verified yet')));
    if (!verified) {
      const resend = el('button', { type: 'button', class: 'secondary', 'aria-label': 'Resend the verification e-mail to ' + address }, 'Resend e-mail');
      resend.addEventListener('click', () =>
        busy(resend, li, async () => {
          await call('POST', '/trigger/email/resend/' + trigger.uuid);
          li.querySelector(':scope > .notice')?.remove();
          li.append(el('p', { class: 'notice', role: 'status' }, 'A new verification e-mail is on its way.'));
        }),
      );
      const keyId = 'verify-' + trigger.uuid;
      const form = el(
        'form',
        { class: 'verify' },
        el('label', { for: keyId }, 'Key from the e-mail to ' + address),
        el('div', { class: 'row' }, el('input', { id: keyId, name: 'key', type: 'text', autocomplete: 'off', spellcheck: 'false', required: true }), el('button', { type: 'submit' }, 'Verify')),
      );
      onSubmit(form, async (data) => {
        await call('POST', '/trigger/email/verify/' + trigger.uuid + '/' + encodeURIComponent(data.get('key').trim()));
        await refresh();
      });
      li.append(resend, del, form);
    } else {
      li.append(del);
    }
  } else if (type === 'push') {
    const state = value.pushTriggerInfoExpired
      ? el('span', { class: 'meta outcome-failed' }, 'Expired — subscribe again on that device')
      : el('span', { class: 'meta' }, thisDevice ? 'Notifications on this device' : 'Notifications on a phone or computer');
    li.append(el('div', { class: 'text' }, 'Push to ' + value.pushTriggerInfoHost, state), del);
  } else if (type === 'webhook') {
    const json = value.webhookTriggerInfoFormat === 'json';
    const words = (json ? 'Webhook to ' : 'ntfy/webhook to ') + value.webhookTriggerInfoUrl;
    li.append(el('div', { class: 'text' }, words, el('span', { class: 'meta' }, json ? 'Format: JSON (Gotify, chat bridges)' : 'Format: plain text (ntfy)')), del);
  } else if (type === 'inbox') {
    li.append(el('div', { class: 'text' }, 'Inbox at ' + value.inboxTriggerInfoUrl), del);
  } else {
    li.append(el('div', { class: 'text' }, 'A trigger of the kind “' + type + '”'), del);
  }
  return li;
}

let localInbox = null;

/** Whether a trigger already delivers into the inbox of this server. */
function deliversLocally(triggers) {
  return localInbox !== null && deliversTo(triggers, localInbox);
}

async function refresh() {
  const triggers = await call('GET', '/trigger');
  // the one-form local inbox is offered only while no trigger delivers there
  document.getElementById('local-section').hidden = localInbox === null || deliversLocally(triggers);
  const list = document.getElementById('triggers');
  list.replaceChildren(...triggers.map(row));
  if (triggers.length === 0) list.replaceChildren(el('li', { class: 'muted' }, 'No triggers yet: due items are only kept on the Triggered page.'));
}

/** Adds an inbox trigger; the server's refusal (`{"Left": reason}`) is an error. */
async function addInboxTrigger(url, username, key) {
  const answer = await call('POST', '/trigger/inbox', {
    addInboxTriggerUrl: url,
    addInboxTriggerUsername: username,
    addInboxTriggerAccessKey: key,
  });
  if (answer && answer.Left !== undefined) throw new Error(answer.Left);
  await refresh();
}

/** Adds a webhook trigger (an ntfy topic is one with the format `text`). */
async function addWebhook(url, format) {
  await call('POST', '/trigger/webhook', { addWebhookTriggerUrl: url, addWebhookTriggerFormat: format });
  await refresh();
}

/** An ntfy topic's URL as typed, checked: it names a topic (`https://ntfy.sh/<topic>`). */
function ntfyUrl(typed) {
  let url;
  try {
    url = new URL(typed.trim());
  } catch (_) {
    throw new Error('The ntfy address is a URL such as https://ntfy.sh/your-topic.');
  }
  if (!/^\/[^/]+\/?$/.test(url.pathname)) {
    throw new Error('The ntfy address names the topic after the server: https://ntfy.sh/your-topic (this one has ' + (url.pathname === '/' ? 'no topic' : 'the path ' + url.pathname) + ').');
  }
  return url.href;
}

/** A long random topic name: anyone who knows a topic can read it. */
function randomTopic() {
  const letters = 'abcdefghijkmnpqrstuvwxyz23456789';
  const bytes = crypto.getRandomValues(new Uint8Array(20));
  return 'pigeonhole-' + Array.from(bytes, (b) => letters[b % letters.length]).join('');
}

async function start() {
  if (!requireLogin()) return;
  frame('/app/triggers');
  const settings = await config();
  if (settings.inbox) {
    localInbox = settings.inbox.url;
    // the inbox as this browser reaches it (its public address, or this host at its port)
    const inboxOrigin = (await sibling()).origin;
    onSubmit(document.getElementById('local'), async (data, form) => {
      const username = data.get('username');
      const login = await call('POST', '/app/token', { username, password: data.get('password') }, { base: inboxOrigin });
      // never a second trigger into the same inbox (another tab may have added one)
      await linkInbox({ base: inboxOrigin, bearer: login.token }, {}, username, settings.inbox.url);
      form.reset();
      await refresh();
    });
  }
  onSubmit(document.getElementById('inbox'), async (data, form) => {
    await addInboxTrigger(data.get('url'), data.get('username'), data.get('key'));
    form.reset();
  });
  onSubmit(document.getElementById('ntfy'), async (data, form) => {
    await addWebhook(ntfyUrl(data.get('url')), 'text');
    form.reset();
  });
  document.getElementById('ntfy-random').addEventListener('click', () => {
    const field = document.getElementById('ntfy-url');
    field.value = 'https://ntfy.sh/' + randomTopic();
    field.focus();
  });
  onSubmit(document.getElementById('webhook'), async (data, form) => {
    await addWebhook(data.get('url').trim(), data.get('format'));
    form.reset();
  });
  onSubmit(document.getElementById('email'), async (data, form) => {
    await call('POST', '/trigger/email', { addEmailTrigger: data.get('address') });
    form.reset();
    await refresh();
  });
  try {
    await refresh();
  } catch (e) {
    showError(document.querySelector('main'), e.message);
  }
}

start();
