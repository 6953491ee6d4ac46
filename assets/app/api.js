// What every page shares: the token (kept in this origin's localStorage, sent as
// `Authorization: Bearer`, never a cookie), calls to the service with the server's error
// words, buttons that show a request in flight, the navigation, and text helpers.
// Server text is only ever put into the page with textContent.

const TOKEN = 'pigeonhole-token';

export function token() {
  return localStorage.getItem(TOKEN);
}

export function setToken(value) {
  if (value) localStorage.setItem(TOKEN, value);
  else {
    localStorage.removeItem(TOKEN);
    localStorage.removeItem(SIBLING_TOKEN);
  }
}

// the token of the other service of this server (the same person's account there)
const SIBLING_TOKEN = 'pigeonhole-sibling-token';

export function siblingToken() {
  return localStorage.getItem(SIBLING_TOKEN);
}

export function setSiblingToken(value) {
  if (value) localStorage.setItem(SIBLING_TOKEN, value);
  else localStorage.removeItem(SIBLING_TOKEN);
}

/**
 * The other service of this server as this browser reaches it: its public origin when the
 * operator gave one (`--web-host`, `--inbox-web-host`: behind a proxy), else the same host
 * at its port. `{service, origin}`, or null when this process runs only one.
 */
export async function sibling() {
  let settings;
  try {
    settings = await config();
  } catch (_) {
    return null;
  }
  const other = settings.service === 'scheduler' ? settings.inbox : settings.scheduler;
  if (!other?.port) return null;
  return {
    service: settings.service === 'scheduler' ? 'inbox' : 'scheduler',
    origin: other.origin || location.protocol + '//' + location.hostname + ':' + other.port,
  };
}

/** A failed call: the HTTP status (0 when the server was not reached) and the server's words. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/**
 * Calls the service (or another origin with `base`) and answers the parsed JSON (null for an
 * empty body). A 401 of this service's own protected call means the token no longer works:
 * it is dropped and the login page opened, coming back here afterwards.
 */
export async function call(method, path, body, options = {}) {
  const { base = '', bearer = base ? undefined : token() } = options;
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (bearer) headers.Authorization = 'Bearer ' + bearer;
  let response;
  try {
    response = await fetch(base + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
      // a request that may outlive the page (sent as it goes away)
      keepalive: options.keepalive === true,
    });
  } catch (e) {
    throw new ApiError(0, 'The server could not be reached (' + e.message + ').');
  }
  const text = await response.text();
  if (!response.ok) {
    let message = '';
    try {
      message = JSON.parse(text).error;
    } catch (_) {
      // not JSON: say the status
    }
    if (response.status === 401 && !base && bearer && options.relogin !== false) {
      setToken(null);
      toLogin();
    }
    // one word on the pages: the server's "passphrase" is the person's password
    message = (message || '').replace(/passphrase/g, 'password');
    throw new ApiError(response.status, message || response.status + ' ' + response.statusText);
  }
  return text ? JSON.parse(text) : null;
}

/** This page's configuration from the server (`/app/config.json`), fetched once. */
let configPromise;
export function config() {
  configPromise ??= call('GET', '/app/config.json');
  return configPromise;
}

export function toLogin() {
  const here = location.pathname + location.search;
  location.assign('/app/login?next=' + encodeURIComponent(here));
}

/** Pages that need a login call this first: to the login page without a token. */
export function requireLogin() {
  if (!token()) {
    toLogin();
    return false;
  }
  return true;
}

/** Makes an element: `el('p', {class: 'x'}, 'text', child)`; strings become text nodes. */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

/** The error box of a form or section (made on first use), announced to screen readers. */
function errorBox(where) {
  let box = where.querySelector(':scope > .error');
  if (!box) {
    box = el('p', { class: 'error', role: 'alert', hidden: true, 'data-box': '' });
    where.append(box);
  }
  return box;
}

/** Shows `message` in the error box of `where`; every other error on the page goes (the newest replaces the earlier ones). */
export function showError(where, message) {
  for (const old of document.querySelectorAll('.error')) {
    if (old.parentElement !== where) {
      if (old.dataset.box === undefined) old.remove();
      else {
        old.textContent = '';
        old.hidden = true;
      }
    }
  }
  const box = errorBox(where);
  box.textContent = message;
  box.hidden = !message;
}

/**
 * Runs `work` for `button`: the button is disabled and busy while it runs, a failure is
 * shown next to `where` in the server's words. Answers the work's result, or undefined on a
 * failure.
 */
export async function busy(button, where, work) {
  if (button.disabled) return undefined;
  showError(where, '');
  button.disabled = true;
  button.setAttribute('aria-busy', 'true');
  where.setAttribute('aria-busy', 'true');
  try {
    return await work();
  } catch (e) {
    showError(where, e.message || String(e));
    return undefined;
  } finally {
    button.disabled = false;
    button.removeAttribute('aria-busy');
    where.removeAttribute('aria-busy');
  }
}

/** A form whose submission (a button or Enter) runs `work(formData)` as in `busy`. */
export function onSubmit(form, work) {
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const button = event.submitter || form.querySelector('button[type=submit], button:not([type])');
    busy(button, form, () => work(new FormData(form), form));
  });
}

/** The UTF-8 bytes of `text` in padded standard base64. */
export function toBase64(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** Base64 to text (UTF-8, with replacement characters for invalid bytes). */
export function fromBase64(data) {
  const binary = atob(data);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return new TextDecoder().decode(bytes);
}

/** The account's zone, or the browser's when the zone is not one the browser knows. */
function safeZone(zone) {
  try {
    if (zone) new Intl.DateTimeFormat('en-GB', { timeZone: zone });
    return zone || undefined;
  } catch (_) {
    return undefined;
  }
}

const DAY_NAMES = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
const MONTH_NAMES = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** Today's date (YYYY-MM-DD) in `zone` (the browser's without one). */
export function todayIn(zone) {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-GB', { timeZone: safeZone(zone), year: 'numeric', month: '2-digit', day: '2-digit' })
      .formatToParts(new Date())
      .map((p) => [p.type, p.value]),
  );
  return parts.year + '-' + parts.month + '-' + parts.day;
}

/**
 * A wall-clock day (YYYY-MM-DD) and optional time (HH:MM[:SS]) the short way a person reads
 * it, against today in `zone`: "today 14:05", "tomorrow 09:00", "Tue 3 Dec 09:00" (with the
 * year when it is not this year's).
 */
export function shortDay(day, time, zone) {
  const today = todayIn(zone);
  const [y, m, d] = day.split('-').map(Number);
  const date = new Date(Date.UTC(y, m - 1, d));
  const t = new Date(Date.UTC(...today.split('-').map((v, i) => Number(v) - (i === 1 ? 1 : 0))));
  const days = Math.round((date - t) / 86400000);
  let words;
  if (days === 0) words = 'today';
  else if (days === 1) words = 'tomorrow';
  else if (days === -1) words = 'yesterday';
  else {
    words = DAY_NAMES[date.getUTCDay()] + ' ' + d + ' ' + MONTH_NAMES[m - 1];
    if (String(y) !== today.slice(0, 4)) words += ' ' + y;
  }
  return time ? words + ' ' + time.slice(0, 5) : words;
}

/** A timestamp the short way, in `zone` (the browser's without one): "today 14:05". */
export function when(timestamp, zone) {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-GB', {
      timeZone: safeZone(zone),
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      hourCycle: 'h23',
    })
      .formatToParts(new Date(timestamp))
      .map((p) => [p.type, p.value]),
  );
  return shortDay(parts.year + '-' + parts.month + '-' + parts.day, parts.hour + ':' + parts.minute, zone);
}

/** The browser's own time zone (an IANA name), or null. */
export function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || null;
  } catch (_) {
    return null;
  }
}

/** Minutes east of UTC of `zone` at `date`, from the browser's zone database. */
export function offsetOf(zone, date) {
  const parts = new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'longOffset' }).formatToParts(date);
  const name = parts.find((p) => p.type === 'timeZoneName')?.value || 'GMT';
  const m = /GMT([+-])(\d{2}):?(\d{2})?/.exec(name);
  if (!m) return 0;
  const minutes = Number(m[2]) * 60 + Number(m[3] || 0);
  return m[1] === '-' ? -minutes : minutes;
}

/**
 * Sets the scheduler account's zone to `name` (its offset now, and whether that is summer
 * time); `options` as for `call` (the scheduler of this server from the inbox's pages).
 */
export async function putZone(name, options = {}) {
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
  await call('PUT', '/account/settings', { timezone: { offset, name, summer } }, options);
}

/**
 * While the account is on UTC and the browser is elsewhere: a one-click offer of the
 * browser's zone in `box` (hidden otherwise). `changed` runs after the zone was saved.
 */
export function offerZone(box, accountZone, changed) {
  const mine = browserZone();
  if (!mine || mine === 'UTC' || mine === 'Etc/UTC' || (accountZone && accountZone !== 'UTC')) {
    box.hidden = true;
    box.replaceChildren();
    return;
  }
  const use = el('button', { type: 'button', id: 'use-browser-zone' }, 'Use ' + mine);
  box.replaceChildren(el('p', {}, 'Times are in UTC. This browser is in ' + mine + '.'), el('div', { class: 'actions' }, use));
  box.hidden = false;
  use.addEventListener('click', () =>
    busy(use, box, async () => {
      await putZone(mine);
      box.hidden = true;
      await changed();
    }),
  );
}

/**
 * Text with its http and https links made clickable: text nodes and `a` elements made with
 * the DOM (never HTML), opening in a new tab without the opener or a referrer.
 */
export function linkified(text) {
  const fragment = document.createDocumentFragment();
  const pattern = /https?:\/\/[^\s<>"']+/gi;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    let href = match[0].replace(/[.,;:!?)\]]+$/, '');
    let url = null;
    try {
      url = new URL(href);
    } catch (_) {
      url = null;
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) continue;
    fragment.append(document.createTextNode(text.slice(last, match.index)));
    fragment.append(el('a', { href: url.href, rel: 'noopener noreferrer', target: '_blank' }, href));
    last = match.index + href.length;
  }
  fragment.append(document.createTextNode(text.slice(last)));
  return fragment;
}

/**
 * A delete button that asks once: the first click shows "Yes, delete" and "Cancel" in its
 * place; only "Yes, delete" runs `work` (as in `busy`, errors next to `where`).
 */
export function deleteButton(label, ariaLabel, where, work) {
  const ask = el('button', { type: 'button', class: 'secondary', 'aria-label': ariaLabel }, label);
  const yes = el('button', { type: 'button', class: 'danger confirm-yes' }, 'Yes, delete');
  const no = el('button', { type: 'button', class: 'secondary confirm-no' }, 'Cancel');
  const asking = el('span', { class: 'confirm', hidden: true, role: 'group', 'aria-label': 'Really ' + ariaLabel.toLowerCase() + '?' }, el('span', { class: 'confirm-question' }, 'Really delete?'), yes, no);
  const box = el('span', { class: 'delete-box' }, ask, asking);
  ask.addEventListener('click', () => {
    ask.hidden = true;
    asking.hidden = false;
    yes.focus();
  });
  no.addEventListener('click', () => {
    asking.hidden = true;
    ask.hidden = false;
    ask.focus();
  });
  yes.addEventListener('click', () => busy(yes, where, work));
  return box;
}

/**
 * Checks a new password typed twice: at least 8 characters, not only spaces, and the same
 * both times (the server refuses only an empty one). Throws the reason.
 */
export function checkNewPassword(password, again) {
  if (password !== '' && password.trim() === '') {
    throw new Error('The password needs a character other than spaces.');
  }
  const length = [...password].length;
  if (length < 8) {
    throw new Error('The password needs at least 8 characters (this one has ' + length + ').');
  }
  if (password !== again) throw new Error('The two passwords differ: type the same password twice.');
}

/**
 * The page frame: the navigation of this service (the current page marked), a link to the
 * other service when this server runs it, and "Log out".
 */
export async function frame(current) {
  const nav = document.getElementById('nav');
  if (!nav) return;
  let settings = { service: 'inbox' };
  try {
    settings = await config();
  } catch (_) {
    // the links of the inbox then
  }
  const brand = document.querySelector('header .brand');
  if (brand) brand.lastChild.textContent = settings.service === 'scheduler' ? 'Pigeonhole scheduler' : 'Pigeonhole inbox';
  const pages =
    settings.service === 'scheduler'
      ? [['/app/', 'Scheduled'], ['/app/triggered', 'Triggered'], ['/app/triggers', 'Triggers'], ['/app/settings', 'Settings']]
      : [['/app/', 'Inbox'], ['/app/settings', 'Settings']];
  const list = el('ul');
  for (const [href, label] of pages) {
    const link = el('a', { href }, label);
    if (href === current) link.setAttribute('aria-current', 'page');
    list.append(el('li', {}, link));
  }
  // the other service of this server: signed in there too when this origin holds its token
  const other = await sibling();
  if (other) {
    list.append(el('li', {}, el('a', { href: siblingHref(other, '/app/'), id: 'to-sibling' }, other.service === 'inbox' ? 'Inbox' : 'Scheduler')));
  }
  nav.replaceChildren(list);
}

/**
 * A link to `page` of the other service of this server (`other` from `sibling()`), signed in
 * there when this origin holds both tokens: its login page with the tokens in the fragment
 * ("Continue as <name>" there), then `page`.
 */
export function siblingHref(other, page) {
  const theirs = siblingToken();
  if (!theirs || !token()) return other.origin + page;
  const next = page === '/app/' ? '' : '?next=' + encodeURIComponent(page);
  return other.origin + '/app/login' + next + '#handoff=' + encodeURIComponent(theirs) + '&back=' + encodeURIComponent(token());
}

// One person, one account (spec decision 18): what the pages do on both services

/** The name of the inbox access key the scheduler's deliveries use (as `pigeonhole setup`). */
const DELIVERY_KEY_NAME = 'scheduler deliveries';

/** Whether two inbox URLs name the same inbox (the server keeps them normalised). */
function sameUrl(a, b) {
  return !!a && !!b && a.replace(/\/+$/, '').toLowerCase() === b.replace(/\/+$/, '').toLowerCase();
}

/** Whether one of the scheduler's `triggers` delivers into the inbox at `url`. */
export function deliversTo(triggers, url) {
  return triggers.some((t) => t.info.typedTriggerInfoType === 'inbox' && sameUrl(t.info.typedTriggerInfoValue.inboxTriggerInfoUrl, url));
}

/**
 * Where the scheduler's `triggers` bring a due item, in words ("into this inbox", "by e-mail
 * to a@b.org", …; `localInbox` is the URL the scheduler reaches this server's inbox at);
 * empty when nothing delivers it anywhere but the Triggered page. Unverified e-mail
 * addresses and expired push subscriptions deliver nothing.
 */
export function deliveryWords(triggers, localInbox) {
  const words = [];
  for (const t of triggers) {
    const value = t.info.typedTriggerInfoValue || {};
    switch (t.info.typedTriggerInfoType) {
      case 'inbox':
        words.push(sameUrl(value.inboxTriggerInfoUrl, localInbox) ? 'into this inbox' : 'into the inbox at ' + value.inboxTriggerInfoUrl);
        break;
      case 'email':
        if (value.emailTriggerInfoVerified) words.push('by e-mail to ' + value.emailTriggerInfoEmailAddress);
        break;
      case 'push':
        if (!value.pushTriggerInfoExpired) words.push('as a notification (' + value.pushTriggerInfoHost + ')');
        break;
      case 'webhook':
        words.push('to the webhook at ' + value.webhookTriggerInfoUrl);
        break;
      default:
        words.push('by its ' + t.info.typedTriggerInfoType + ' trigger');
    }
  }
  return [...new Set(words)];
}

/** "a", "a and b", "a, b and c". */
export function listWords(words) {
  return words.length < 2 ? words.join('') : words.slice(0, -1).join(', ') + ' and ' + words[words.length - 1];
}

/**
 * Links the scheduler to the inbox of this server as `pigeonhole setup` does: an inbox access
 * key that may only add items, and the scheduler's inbox trigger with it, delivering to `url`
 * (the inbox as the server reaches it: `inbox.url` of the scheduler's `/app/config.json`).
 * `inbox` and `scheduler` are the `{base, bearer}` options of `call` for each service.
 * Nothing is made when a trigger already delivers there; when the scheduler refuses the
 * trigger, the key made for it is deleted again (nothing is left half made).
 */
export async function linkInbox(inbox, scheduler, username, url) {
  if (deliversTo(await call('GET', '/trigger', undefined, scheduler), url)) return;
  const key = await call('POST', '/access-key', { addAccessKeyName: DELIVERY_KEY_NAME, addAccessKeyPermissions: ['PermitAdd'] }, inbox);
  try {
    const answer = await call(
      'POST',
      '/trigger/inbox',
      { addInboxTriggerUrl: url, addInboxTriggerUsername: username, addInboxTriggerAccessKey: key.accessKeyCreatedKey },
      scheduler,
    );
    if (answer && answer.Left !== undefined) throw new Error(answer.Left);
  } catch (e) {
    await call('DELETE', '/access-key/' + key.accessKeyCreatedUUID, undefined, inbox).catch(() => {});
    throw e;
  }
}

// Scheduled items

/** The text of a scheduled item's `content` (a string, or base64 bytes). */
export function contentText(content) {
  return typeof content === 'string' ? content : fromBase64(content.data);
}

/** "Every 3 days", "Every month on day 1", or nothing. */
export function recurrenceText(recurrence) {
  if (!recurrence) return '';
  const days = recurrence['every-x-days'];
  if (days) return days.days === 1 ? 'Every day' : 'Every ' + days.days + ' days';
  const months = recurrence['every-x-months'];
  if (!months) return '';
  const every = months.months === 1 ? 'Every month' : 'Every ' + months.months + ' months';
  return months.day ? every + ' on day ' + months.day : every;
}
