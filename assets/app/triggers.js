// Triggers: the list (verify an e-mail address with the key of its e-mail, resend that
// e-mail, delete), add an inbox or an e-mail trigger, and — when this server also runs the
// inbox — one form that logs in to that inbox, makes it an access key that may only add
// items, and adds the trigger with it.
import { busy, call, config, deleteButton, deliversTo, el, frame, linkInbox, onSubmit, requireLogin, showError } from './api.js';

function row(trigger) {
  const value = trigger.info.typedTriggerInfoValue;
  const li = el('li', {});
  const label = trigger.info.typedTriggerInfoType === 'email'
    ? 'Delete the e-mail trigger ' + value.emailTriggerInfoEmailAddress
    : 'Delete the inbox trigger ' + value.inboxTriggerInfoUrl;
  const del = deleteButton('Delete', label, li, async () => {
    await call('DELETE', '/trigger/delete/' + trigger.uuid);
    await refresh();
  });
  if (trigger.info.typedTriggerInfoType === 'email') {
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
  } else {
    const url = value.inboxTriggerInfoUrl;
    li.append(el('div', { class: 'text' }, 'Inbox at ' + url), del);
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

async function start() {
  if (!requireLogin()) return;
  frame('/app/triggers');
  const settings = await config();
  if (settings.inbox) {
    localInbox = settings.inbox.url;
    // the inbox as this browser reaches it: same host, the inbox's port
    const inboxOrigin = location.protocol + '//' + location.hostname + ':' + settings.inbox.port;
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
