// Settings of either service: the scheduler's time zone (IANA names), access keys (create
// with permissions, the secret shown once, delete), the password and deleting the account —
// on both services of this server at once (spec decision 18: one person, one account).
import {
  call,
  checkNewPassword,
  config,
  deleteButton,
  el,
  frame,
  offerZone,
  onSubmit,
  putZone,
  requireLogin,
  setSiblingToken,
  setToken,
  showError,
  sibling,
  siblingToken,
  when,
} from './api.js';

let service = 'inbox';
// the other service of this server ({service, origin}), or null
let other = null;

/** The path of the password change on `name`'s service (the originals' paths). */
function passwordPath(name) {
  return name === 'scheduler' ? '/' : '/account';
}

/**
 * After the password changed here: the other service's account of the same name has the new
 * one too. The server changes it itself when the old password opens it (spec decision 18),
 * which revokes the tokens there; when the token kept for it still works, this server did
 * not, and the page changes it with the same old password. Answers the new token there, or
 * throws why the password there stayed.
 */
async function changeThere(username, oldPassword, newPassword) {
  const theirs = siblingToken();
  const there = { base: other.origin };
  const unchanged = theirs && (await call('GET', '/account', undefined, { ...there, bearer: theirs }).then(() => true, () => false));
  if (unchanged) {
    await call('POST', passwordPath(other.service), { 'old-passphrase': oldPassword, 'new-passphrase': newPassword }, { ...there, bearer: theirs });
  }
  try {
    return (await call('POST', '/app/token', { username, password: newPassword }, { ...there, bearer: null })).token;
  } catch (e) {
    if (e.status !== 401) throw e;
    throw new Error('it has no account ' + username + ', or one with another password (log in there to change it).');
  }
}

/**
 * Before the account is deleted here: the other service's account (the same person's) is
 * deleted first, with the token kept for it; when that token no longer works nothing is
 * deleted (the person logs in again, so both go together).
 */
async function deleteThere(username) {
  const theirs = siblingToken();
  if (!other || !theirs) return;
  const there = { base: other.origin, bearer: theirs };
  let account;
  try {
    account = await call('GET', '/account', undefined, there);
  } catch (e) {
    if (e.status === 401) setSiblingToken(null);
    throw new Error(
      'The ' + other.service + ' of this server did not take the sign-in (' + e.message + '), so its account cannot be deleted with this one. ' +
        'Nothing was deleted: log out, log in again and delete again.',
    );
  }
  if (account.username !== username) throw new Error('The ' + other.service + ' of this server is signed in as ' + account.username + ': nothing was deleted.');
  await call('DELETE', '/account', undefined, there);
}

async function loadZone() {
  const section = document.getElementById('zone-section');
  section.hidden = false;
  const select = document.getElementById('zone-name');
  const current = (await call('GET', '/account/settings')).timezone;
  let names = [];
  try {
    names = Intl.supportedValuesOf('timeZone');
  } catch (_) {
    names = [];
  }
  if (!names.includes('UTC')) names = ['UTC', ...names];
  if (current.name && !names.includes(current.name)) names = [current.name, ...names];
  select.replaceChildren(...names.map((n) => el('option', { value: n }, n)));
  select.value = current.name;
  const minutes = current.offset;
  const sign = minutes < 0 ? '−' : '+';
  const abs = Math.abs(minutes);
  document.getElementById('zone-current').textContent =
    'Now: ' + current.name + ' (UTC' + sign + String(Math.floor(abs / 60)).padStart(2, '0') + ':' + String(abs % 60).padStart(2, '0') + ')';
  offerZone(document.getElementById('zone-offer'), current.name, loadZone);
  if (!select.dataset.ready) {
    select.dataset.ready = '1';
    onSubmit(document.getElementById('zone'), async (data) => {
      await putZone(data.get('zone'));
      await loadZone();
    });
  }
}

async function loadKeys() {
  const keys = await call('GET', '/access-key');
  const list = document.getElementById('keys');
  list.replaceChildren(
    ...keys.map((key) => {
      const row = el('li', {});
      const del = deleteButton('Delete', 'Delete access key ' + key.name, row, async () => {
        await call('DELETE', '/access-key/' + key.uuid);
        document.getElementById('new-key').hidden = true;
        await loadKeys();
      });
      row.append(
        el(
          'div',
          { class: 'text' },
          el('strong', {}, key.name || '(no name)'),
          el('span', { class: 'meta' }, 'Created ' + when(key.created) + ' · ' + (key.permissions.join(', ') || 'no permissions')),
        ),
        del,
      );
      return row;
    }),
  );
  if (keys.length === 0) list.replaceChildren(el('li', { class: 'muted' }, 'No access keys.'));
}

let permissions = [];

/** The permissions of a preset: capture only, read only, everything (custom: the boxes). */
function presetPermissions(preset) {
  const adding = service === 'inbox' ? 'PermitAdd' : 'PermitAddItem';
  if (preset === 'capture') return permissions.filter((p) => p === adding);
  if (preset === 'read') return permissions.filter((p) => /^Permit(Get|Show|Size)/.test(p));
  if (preset === 'everything') return [...permissions];
  return [...document.querySelectorAll('#key-permissions input:checked')].map((i) => i.value);
}

/** The boxes follow the preset; they are shown (to change) only for "Custom…". */
function showPreset() {
  const preset = document.getElementById('key-preset').value;
  const box = document.getElementById('key-permissions');
  box.hidden = preset !== 'custom';
  if (preset !== 'custom') {
    const chosen = presetPermissions(preset);
    for (const input of box.querySelectorAll('input')) input.checked = chosen.includes(input.value);
  }
}

async function loadPermissions() {
  permissions = await call('GET', '/permissions');
  const box = document.getElementById('key-permissions');
  const legend = box.querySelector('legend');
  box.replaceChildren(
    legend,
    ...permissions.map((p) => el('label', { class: 'check' }, el('input', { type: 'checkbox', name: 'permission', value: p }), p)),
  );
  showPreset();
}

async function copySecret() {
  const secret = document.getElementById('new-key-secret').textContent;
  const done = document.getElementById('copy-done');
  try {
    await navigator.clipboard.writeText(secret);
  } catch (_) {
    // no clipboard API (plain HTTP on another host): copy the selection
    const range = document.createRange();
    range.selectNodeContents(document.getElementById('new-key-secret'));
    const selection = getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    if (!document.execCommand('copy')) {
      done.textContent = 'Selected: copy it with the keyboard or the menu.';
      return;
    }
  }
  done.textContent = 'Copied.';
}

async function start() {
  if (!requireLogin()) return;
  frame('/app/settings');
  service = (await config()).service;
  other = await sibling();
  const account = await call('GET', '/account');
  document.getElementById('who').textContent =
    'Logged in to the ' + service + ' as ' + account.username + ', registered ' + when(account.created) + '.';
  const both = other && siblingToken();
  document.getElementById('delete-words').textContent = both
    ? 'Delete the account ' + account.username + ' on the inbox and the scheduler of this server, and everything in them, for good'
    : 'Delete this account and everything in it, for good';
  const hint = document.getElementById('password-hint');
  hint.textContent = both ? 'The password of ' + account.username + ' changes on the inbox and the scheduler of this server.' : '';
  hint.hidden = !both;
  const section = document.querySelector('main');
  const tasks = [loadKeys(), loadPermissions()];
  if (service === 'scheduler') tasks.push(loadZone());
  await Promise.all(tasks).catch((e) => showError(section, e.message));

  document.getElementById('log-out').addEventListener('click', () => {
    setToken(null);
    location.assign('/app/login');
  });
  document.getElementById('key-preset').addEventListener('change', showPreset);
  document.getElementById('copy-key').addEventListener('click', copySecret);
  onSubmit(document.getElementById('add-key'), async (data, form) => {
    document.getElementById('new-key').hidden = true;
    const answer = await call('POST', '/access-key', {
      addAccessKeyName: data.get('name'),
      addAccessKeyPermissions: presetPermissions(data.get('preset')),
    });
    document.getElementById('new-key-secret').textContent = answer.accessKeyCreatedKey;
    document.getElementById('copy-done').textContent = '';
    document.getElementById('new-key').hidden = false;
    form.reset();
    await loadPermissions();
    await loadKeys();
  });

  onSubmit(document.getElementById('password'), async (data, form) => {
    document.getElementById('password-done').textContent = '';
    checkNewPassword(data.get('new'), data.get('again'));
    await call('POST', passwordPath(service), { 'old-passphrase': data.get('old'), 'new-passphrase': data.get('new') });
    // the change revokes this token too: log in again with the new password
    const answer = await call('POST', '/app/token', { username: account.username, password: data.get('new') }, { bearer: null });
    setToken(answer.token);
    form.reset();
    const done = document.getElementById('password-done');
    if (!other) {
      done.textContent = 'The password was changed.';
      return;
    }
    try {
      setSiblingToken(await changeThere(account.username, data.get('old'), data.get('new')));
      done.textContent = 'The password was changed on the inbox and the scheduler of this server.';
    } catch (e) {
      done.textContent = 'The password was changed on the ' + service + '.';
      throw new Error('The ' + other.service + ' of this server kept its password: ' + e.message);
    }
  });

  onSubmit(document.getElementById('delete-account'), async () => {
    await deleteThere(account.username);
    await call('DELETE', '/account');
    setToken(null);
    location.assign('/app/login');
  });
}

start();
