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
  else localStorage.removeItem(TOKEN);
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
    box = el('p', { class: 'error', role: 'alert', hidden: true });
    where.append(box);
  }
  return box;
}

export function showError(where, message) {
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

/** A timestamp in the reader's own way of writing dates, in `zone` when it is given. */
export function when(timestamp, zone) {
  const date = new Date(timestamp);
  const options = { dateStyle: 'medium', timeStyle: 'short' };
  try {
    if (zone) return date.toLocaleString(undefined, { ...options, timeZone: zone });
  } catch (_) {
    // not a zone this browser knows: its own
  }
  return date.toLocaleString(undefined, options);
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
  if (token()) {
    const out = el('button', { type: 'button', class: 'link' }, 'Log out');
    out.addEventListener('click', () => {
      setToken(null);
      location.assign('/app/login');
    });
    list.append(el('li', {}, out));
  }
  nav.replaceChildren(list);
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
