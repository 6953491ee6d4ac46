// Settings of either service: the scheduler's time zone (IANA names), access keys (create
// with permissions, the secret shown once, delete), the password, deleting the account.
import { busy, call, config, el, frame, onSubmit, requireLogin, setToken, showError, when } from './api.js';

let service = 'inbox';

/** Minutes east of UTC of `zone` at `date`, from the browser's zone database. */
function offsetOf(zone, date) {
  const parts = new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'longOffset' }).formatToParts(date);
  const name = parts.find((p) => p.type === 'timeZoneName')?.value || 'GMT';
  const m = /GMT([+-])(\d{2}):?(\d{2})?/.exec(name);
  if (!m) return 0;
  const minutes = Number(m[2]) * 60 + Number(m[3] || 0);
  return m[1] === '-' ? -minutes : minutes;
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
  if (!select.dataset.ready) {
    select.dataset.ready = '1';
    onSubmit(document.getElementById('zone'), async (data) => {
      const name = data.get('zone');
      const now = new Date();
      let offset = 0;
      let summer = false;
      try {
        offset = offsetOf(name, now);
        const winter = Math.min(offsetOf(name, new Date(now.getFullYear(), 0, 1)), offsetOf(name, new Date(now.getFullYear(), 6, 1)));
        summer = offset > winter;
      } catch (_) {
        // a name the browser does not know: the server still uses it when it knows it
      }
      await call('PUT', '/account/settings', { timezone: { offset, name, summer } });
      await loadZone();
    });
  }
}

async function loadKeys() {
  const keys = await call('GET', '/access-key');
  const list = document.getElementById('keys');
  list.replaceChildren(
    ...keys.map((key) => {
      const del = el('button', { type: 'button', class: 'secondary', 'aria-label': 'Delete access key ' + key.name }, 'Delete');
      const row = el(
        'li',
        {},
        el(
          'div',
          { class: 'text' },
          el('strong', {}, key.name || '(no name)'),
          el('span', { class: 'meta' }, 'Created ' + when(key.created) + ' · ' + (key.permissions.join(', ') || 'no permissions')),
        ),
        del,
      );
      del.addEventListener('click', () =>
        busy(del, row, async () => {
          await call('DELETE', '/access-key/' + key.uuid);
          document.getElementById('new-key').hidden = true;
          await loadKeys();
        }),
      );
      return row;
    }),
  );
  if (keys.length === 0) list.replaceChildren(el('li', { class: 'muted' }, 'No access keys.'));
}

async function loadPermissions() {
  const permissions = await call('GET', '/permissions');
  const box = document.getElementById('key-permissions');
  const legend = box.querySelector('legend');
  const adding = service === 'inbox' ? 'PermitAdd' : 'PermitAddItem';
  box.replaceChildren(
    legend,
    ...permissions.map((p) =>
      el('label', { class: 'check' }, el('input', { type: 'checkbox', name: 'permission', value: p, checked: p === adding }), p),
    ),
  );
}

async function start() {
  if (!requireLogin()) return;
  frame('/app/settings');
  service = (await config()).service;
  const account = await call('GET', '/account');
  document.getElementById('who').textContent =
    'Logged in to the ' + service + ' as ' + account.username + ', registered ' + when(account.created) + '.';
  const section = document.querySelector('main');
  const tasks = [loadKeys(), loadPermissions()];
  if (service === 'scheduler') tasks.push(loadZone());
  await Promise.all(tasks).catch((e) => showError(section, e.message));

  onSubmit(document.getElementById('add-key'), async (data, form) => {
    const answer = await call('POST', '/access-key', {
      addAccessKeyName: data.get('name'),
      addAccessKeyPermissions: data.getAll('permission'),
    });
    document.getElementById('new-key-secret').textContent = answer.accessKeyCreatedKey;
    document.getElementById('new-key').hidden = false;
    form.reset();
    await loadPermissions();
    await loadKeys();
  });

  onSubmit(document.getElementById('password'), async (data, form) => {
    const path = service === 'scheduler' ? '/' : '/account';
    await call('POST', path, { 'old-passphrase': data.get('old'), 'new-passphrase': data.get('new') });
    // the change revokes this token too: log in again with the new password
    const answer = await call('POST', '/app/token', { username: account.username, password: data.get('new') }, { bearer: null });
    setToken(answer.token);
    form.reset();
    document.getElementById('password-done').textContent = 'The password was changed.';
  });

  onSubmit(document.getElementById('delete-account'), async () => {
    await call('DELETE', '/account');
    setToken(null);
    location.assign('/app/login');
  });
}

start();
