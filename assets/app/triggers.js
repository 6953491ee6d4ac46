// Triggers: the list (verify an e-mail address with the key of its e-mail, resend that
// e-mail, delete), add an inbox or an e-mail trigger, and — when this server also runs the
// inbox — one form that logs in to that inbox, makes it an access key that may only add
// items, and adds the trigger with it.
import { busy, call, config, el, frame, onSubmit, requireLogin } from './api.js';

function row(trigger) {
  const value = trigger.info.typedTriggerInfoValue;
  const del = el('button', { type: 'button', class: 'secondary' }, 'Delete');
  const li = el('li', {});
  if (trigger.info.typedTriggerInfoType === 'email') {
    const address = value.emailTriggerInfoEmailAddress;
    const verified = value.emailTriggerInfoVerified;
    del.setAttribute('aria-label', 'Delete the e-mail trigger ' + address);
    li.append(el('div', { class: 'text' }, 'E-mail to ' + address, el('span', { class: 'meta' }, verified ? 'Verified' : 'Not verified yet')));
    if (!verified) {
      const resend = el('button', { type: 'button', class: 'secondary', 'aria-label': 'Resend the verification e-mail to ' + address }, 'Resend e-mail');
      resend.addEventListener('click', () =>
        busy(resend, li, async () => {
          await call('POST', '/trigger/email/resend/' + trigger.uuid);
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
    del.setAttribute('aria-label', 'Delete the inbox trigger ' + url);
    li.append(el('div', { class: 'text' }, 'Inbox at ' + url), del);
  }
  del.addEventListener('click', () =>
    busy(del, li, async () => {
      await call('DELETE', '/trigger/delete/' + trigger.uuid);
      await refresh();
    }),
  );
  return li;
}

async function refresh() {
  const triggers = await call('GET', '/trigger');
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
    document.getElementById('local-section').hidden = false;
    // the inbox as this browser reaches it: same host, the inbox's port
    const inboxOrigin = location.protocol + '//' + location.hostname + ':' + settings.inbox.port;
    onSubmit(document.getElementById('local'), async (data, form) => {
      const username = data.get('username');
      const login = await call('POST', '/app/token', { username, password: data.get('password') }, { base: inboxOrigin });
      const key = await call(
        'POST',
        '/access-key',
        { addAccessKeyName: 'scheduler deliveries', addAccessKeyPermissions: ['PermitAdd'] },
        { base: inboxOrigin, bearer: login.token },
      );
      await addInboxTrigger(settings.inbox.url, username, key.accessKeyCreatedKey);
      form.reset();
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
    document.getElementById('triggers').replaceChildren(el('li', { class: 'error', role: 'alert' }, e.message));
  }
}

start();
