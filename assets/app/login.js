// Log in (and register, when this server takes new accounts): the token answered by
// POST /app/token is kept in this origin's localStorage.
import { busy, call, checkNewPassword, config, frame, onSubmit, setSiblingToken, setToken, sibling } from './api.js';

function next() {
  const wanted = new URLSearchParams(location.search).get('next') || '/app/';
  // only a page of this interface: never another site
  return wanted.startsWith('/app/') ? wanted : '/app/';
}

/**
 * Logs in here and, when this server runs the other service too, there with the same
 * username and password (its token kept for the link to it and for "Later…"); a refusal
 * there does not stop the login here.
 */
async function logIn(username, password) {
  const answer = await call('POST', '/app/token', { username, password }, { bearer: null });
  setToken(answer.token);
  const other = await sibling();
  if (other) {
    try {
      const theirs = await call('POST', '/app/token', { username, password }, { base: other.origin, bearer: null });
      setSiblingToken(theirs.token);
    } catch (_) {
      setSiblingToken(null);
    }
  }
  location.assign(next());
}

/** Registers here and, when this server runs the other service, there too (a name taken there is no failure here). */
async function register(name, password) {
  await call('POST', '/register', { name, password }, { bearer: null });
  const other = await sibling();
  if (other) {
    await call('POST', '/register', { name, password }, { base: other.origin, bearer: null }).catch(() => {});
  }
  await logIn(name, password);
}

/**
 * Arriving from the other service's link (`#handoff=<token for here>&back=<its token>`): the
 * fragment is dropped from the address at once, and the tokens are kept only when the person
 * confirms the account named (so another site cannot sign someone in to its account).
 */
async function handoff() {
  const params = new URLSearchParams(location.hash.slice(1));
  const mine = params.get('handoff');
  if (!mine) return;
  history.replaceState(null, '', location.pathname + location.search);
  let account;
  try {
    account = await call('GET', '/account', undefined, { bearer: mine, relogin: false });
  } catch (_) {
    return;
  }
  const other = await sibling();
  document.getElementById('handoff-who').textContent =
    'You are signed in as ' + account.username + (other ? ' on the ' + other.service + ' of this server' : '') + '.';
  document.getElementById('handoff-continue').textContent = 'Continue as ' + account.username;
  const section = document.getElementById('handoff-section');
  section.hidden = false;
  const go = document.getElementById('handoff-continue');
  go.addEventListener('click', () =>
    busy(go, section, async () => {
      setToken(mine);
      if (params.get('back')) setSiblingToken(params.get('back'));
      location.assign(next());
    }),
  );
  go.focus();
}

async function start() {
  frame('/app/login');
  const settings = await config().catch(() => ({ service: 'inbox', registration: true }));
  const service = settings.service === 'scheduler' ? 'scheduler' : 'inbox';
  document.getElementById('title').textContent = 'Log in to your ' + service;
  document.title = 'Log in to your ' + service + ' · Pigeonhole';
  onSubmit(document.getElementById('login'), (data) => logIn(data.get('username'), data.get('password')));
  handoff();
  if (settings.registration) {
    document.getElementById('register-section').hidden = false;
    onSubmit(document.getElementById('register'), async (data) => {
      checkNewPassword(data.get('password'), data.get('again'));
      await register(data.get('name'), data.get('password'));
    });
  }
}

start();
