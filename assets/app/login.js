// Log in (and register, when this server takes new accounts): the token answered by
// POST /app/token is kept in this origin's localStorage.
import {
  browserZone,
  busy,
  call,
  checkNewPassword,
  config,
  el,
  frame,
  linkInbox,
  onSubmit,
  putZone,
  setSiblingToken,
  setToken,
  sibling,
  siblingHref,
  siblingToken,
} from './api.js';

function next() {
  const wanted = new URLSearchParams(location.search).get('next') || '/app/';
  // only a page of this interface: never another site
  return wanted.startsWith('/app/') ? wanted : '/app/';
}

/**
 * Logs in here and, when this server runs the other service too (`other`), there with the
 * same username and password (its token kept for the link to it and for "Later…"); a
 * refusal there does not stop the login here. Answers the refusal there, if any.
 */
async function signIn(username, password, other) {
  const answer = await call('POST', '/app/token', { username, password }, { bearer: null });
  setToken(answer.token);
  if (!other) return null;
  try {
    const theirs = await call('POST', '/app/token', { username, password }, { base: other.origin, bearer: null });
    setSiblingToken(theirs.token);
    return null;
  } catch (e) {
    setSiblingToken(null);
    return e;
  }
}

async function logIn(username, password) {
  await signIn(username, password, await sibling());
  location.assign(next());
}

/** A message as a sentence: with a full stop at the end. */
function sentence(message) {
  return /[.!?]$/.test(message) ? message : message + '.';
}

/**
 * Registers as `pigeonhole setup` does (spec decision 18): the account here and, when this
 * server runs the other service, there too; the scheduler's trigger into this server's
 * inbox with an inbox access key that may only add items; the browser's time zone for the
 * scheduler. Each step that fails is said, with how to finish it, and the page stays (a
 * registration that did everything goes on at once).
 */
async function register(name, password) {
  await call('POST', '/register', { name, password }, { bearer: null });
  const settings = await config();
  const other = await sibling();
  const here = settings.service === 'scheduler' ? 'scheduler' : 'inbox';
  const failed = [];
  let registeredThere = null;
  if (other) {
    // a name taken there is the same person's account when the password opens it (below)
    registeredThere = await call('POST', '/register', { name, password }, { base: other.origin, bearer: null }).then(
      () => null,
      (e) => e,
    );
  }
  const refusedThere = await signIn(name, password, other);
  if (other && refusedThere) {
    const there = 'The ' + other.service + ' of this server ';
    const why =
      registeredThere?.status === 409
        ? there + 'has an account named ' + name + ' already, and this password does not open it. '
        : there + 'did not make the account: ' + sentence((registeredThere || refusedThere).message) + ' ';
    failed.push([
      why,
      'So reminders are not linked to your inbox and the time zone is not set. If that account is yours, log in on ',
      el('a', { href: other.origin + '/app/login' }, 'the ' + other.service + "'s page"),
      ' with its password, then link the inbox on the scheduler\'s Triggers page.',
    ]);
  }
  // the scheduler's options for call(), when this browser is signed in there
  const scheduler = here === 'scheduler' ? {} : other && !refusedThere ? { base: other.origin, bearer: siblingToken() } : null;
  const page = (path) => (here === 'scheduler' ? path : siblingHref(other, path));
  if (scheduler && other && !refusedThere) {
    const inbox = here === 'inbox' ? {} : { base: other.origin, bearer: siblingToken() };
    try {
      const theirs = here === 'scheduler' ? settings : await call('GET', '/app/config.json', undefined, { base: other.origin });
      if (!theirs.inbox) throw new Error('the scheduler does not know the inbox of this server');
      await linkInbox(inbox, scheduler, name, theirs.inbox.url);
    } catch (e) {
      failed.push([
        'Reminders are not delivered into your inbox yet: ' + sentence(e.message) + ' ',
        'Link them on ',
        el('a', { href: page('/app/triggers') }, "the scheduler's Triggers page"),
        ' ("Deliver into the inbox of this server").',
      ]);
    }
  }
  const zone = browserZone();
  if (scheduler && zone) {
    try {
      await putZone(zone, scheduler);
    } catch (e) {
      failed.push([
        'The time zone was not set to ' + zone + ': ' + sentence(e.message) + ' Set it on ',
        el('a', { href: page('/app/settings') }, "the scheduler's Settings page"),
        '.',
      ]);
    }
  }
  if (failed.length === 0) {
    location.assign(next());
    return;
  }
  const box = document.getElementById('register-problems');
  box.replaceChildren(
    el('h2', { id: 'register-problems-title' }, 'Your account ' + name + ' is made, but not everything is set up'),
    ...failed.map((words) => el('p', {}, ...words)),
    el('div', { class: 'actions' }, el('a', { class: 'button', href: next(), id: 'register-continue' }, 'Continue')),
  );
  box.hidden = false;
  document.getElementById('register-section').hidden = true;
  document.getElementById('login').hidden = true;
  box.focus();
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
    // what registering does besides the account here (as `pigeonhole setup`)
    const other = await sibling();
    const zone = browserZone();
    const what = document.getElementById('register-what');
    if (other) {
      what.textContent =
        'One account for the inbox and the scheduler of this server: reminders come back into the inbox' +
        (zone ? ', in the time zone of this browser (' + zone + ').' : '.');
      what.hidden = false;
    }
    onSubmit(document.getElementById('register'), async (data) => {
      checkNewPassword(data.get('password'), data.get('again'));
      await register(data.get('name'), data.get('password'));
    });
  }
}

start();
