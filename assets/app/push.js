// "Notify me on this device" (docs/web.md, issue 27): the inbox page and the scheduler page
// subscribe this browser to reminders by Web Push. The page registers the service worker
// (sw.js, which shows the notifications), asks for permission, subscribes with the
// scheduler's key (`GET /push/key`) and gives the subscription to the scheduler
// (`POST /trigger/push`). One subscription per device: the trigger's id is remembered in this
// origin's localStorage, so the page knows when this device already gets reminders.
import { ApiError, busy, el, showError } from './api.js';

const REMEMBERED = 'pigeonhole-push-trigger';

/** The id of the push trigger this browser subscribed with on this origin, or null. */
export function rememberedTrigger() {
  return localStorage.getItem(REMEMBERED);
}

function remember(id) {
  if (id) localStorage.setItem(REMEMBERED, id);
  else localStorage.removeItem(REMEMBERED);
}

/** Why this page cannot subscribe: 'insecure' (plain http), 'unsupported', or null when it can. */
export function pushSupport() {
  if (!window.isSecureContext) return 'insecure';
  if (!('serviceWorker' in navigator) || !('PushManager' in window) || !('Notification' in window)) return 'unsupported';
  return null;
}

/** The service worker's registration of this origin, or null. */
async function registration() {
  return (await navigator.serviceWorker.getRegistration('/app/')) || null;
}

/** This browser's push subscription on this origin, or null. */
async function subscription() {
  const reg = await registration();
  return reg ? reg.pushManager.getSubscription() : null;
}

/**
 * This device's push trigger is gone from the scheduler (deleted on the Triggers page):
 * forgets it here and ends the browser's subscription (best effort).
 */
export async function forgetThisDevice() {
  remember(null);
  if (pushSupport()) return;
  try {
    await (await subscription())?.unsubscribe();
  } catch (_) {
    // nothing more to undo
  }
}

/** base64url (with or without padding) to bytes. */
function bytesOf(base64url) {
  const base64 = base64url.replace(/-/g, '+').replace(/_/g, '/');
  const binary = atob(base64 + '='.repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

function sameBytes(a, b) {
  if (!a || !b) return false;
  const x = new Uint8Array(a);
  const y = new Uint8Array(b);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/** How long the browser's push service may take to subscribe before the page says so. */
const SUBSCRIBE_MS = 30000;

/** A promise that fails with `message` unless `promise` settles within `ms`. */
function within(promise, ms, message) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Notification permission, asked for when not yet given; throws the reason otherwise. */
async function permission() {
  const answer = await Notification.requestPermission();
  if (answer === 'granted') return;
  if (answer === 'denied') {
    throw new Error(
      'Notifications are blocked for this site. Allow them in the browser’s site settings (the icon beside the address, or the phone’s settings for an app on the home screen), then press the button again.',
    );
  }
  throw new Error('Notifications were not allowed: press the button again and choose “Allow”.');
}

/** The service worker of the pages, registered and active. */
async function worker() {
  try {
    await navigator.serviceWorker.register('/app/sw.js', { scope: '/app/' });
    return await within(navigator.serviceWorker.ready, SUBSCRIBE_MS, 'the service worker did not start');
  } catch (e) {
    throw new Error('The browser did not start the page’s service worker (' + e.message + ').');
  }
}

/**
 * A push subscription of this browser for `key` (the scheduler's): the existing one when it
 * is for that key and still good (`fresh` false), else a new one.
 */
async function subscribe(reg, key, fresh) {
  const existing = await reg.pushManager.getSubscription();
  if (existing && !fresh && sameBytes(existing.options?.applicationServerKey, key)) return existing;
  if (existing) await existing.unsubscribe().catch(() => {});
  try {
    return await within(
      reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }),
      SUBSCRIBE_MS,
      'its push service did not answer',
    );
  } catch (e) {
    throw new Error(
      'The browser refused to subscribe this page to its push service (' + e.message + '). Some browsers have no push service (e.g. Chromium builds without Google’s services): ntfy works there.',
    );
  }
}

/**
 * The "Reminders on this device" card in `section` (hidden until filled). `scheduler` calls
 * the scheduler of this server (`call(method, path, body)`; `origin` '' when this page is
 * the scheduler's own), `triggersHref` is the link to its Triggers page (the ntfy form).
 */
export function pushCard(section, scheduler, triggersHref) {
  const body = section.querySelector('.push-body');
  const help = () => el('a', { href: '/app/notifications' }, 'how to get HTTPS at home');
  const ntfy = () => el('a', { href: triggersHref }, 'an ntfy topic');

  async function render() {
    const why = pushSupport();
    if (why === 'insecure') {
      body.replaceChildren(
        el('p', { id: 'push-insecure' }, 'Notifications on this device need HTTPS: browsers allow them only for pages opened over HTTPS (or as localhost on the server itself), and this page came over plain http.'),
        el('p', {}, 'See ', help(), ', or get reminders on your phone through ', ntfy(), ' instead.'),
      );
      return;
    }
    if (why === 'unsupported') {
      body.replaceChildren(
        el('p', { id: 'push-unsupported' }, 'This browser cannot show notifications from a web page (it has no service workers or Push API here). On an iPhone or iPad, add this page to the home screen first (Share → Add to Home Screen) and open it from there.'),
        el('p', {}, 'Or get reminders through ', ntfy(), ' (', el('a', { href: '/app/notifications' }, 'every way'), ').'),
      );
      return;
    }
    const [triggers, current] = await Promise.all([scheduler.call('GET', '/trigger'), subscription()]);
    const id = rememberedTrigger();
    const mine = triggers.find((t) => t.uuid === id && t.info.typedTriggerInfoType === 'push');
    if (id && !mine) remember(null);
    const expired = Boolean(mine && mine.info.typedTriggerInfoValue.pushTriggerInfoExpired);
    if (current && mine && !expired) {
      const stop = el('button', { type: 'button', class: 'secondary', id: 'push-stop' }, 'Stop');
      stop.addEventListener('click', () => busy(stop, section, () => unsubscribe(mine.uuid)));
      body.replaceChildren(el('p', { class: 'notice', id: 'push-on' }, 'Reminders are pushed to this device.'), el('div', { class: 'actions' }, stop));
      return;
    }
    // an expired trigger (or one whose subscription this browser lost) is replaced
    const go = el('button', { type: 'button', id: 'push-subscribe' }, 'Notify me on this device');
    go.addEventListener('click', () => busy(go, section, () => subscribeHere(mine ? mine.uuid : null, expired)));
    const words = expired
      ? el('p', { class: 'warning', id: 'push-expired' }, 'This device’s subscription expired: its push service no longer takes it. Subscribe again to get reminders here.')
      : el('p', { class: 'muted' }, 'Each reminder as a notification on this phone or computer when it is due (', el('a', { href: '/app/notifications' }, 'other ways'), ').');
    const blocked =
      Notification.permission === 'denied'
        ? el('p', { class: 'warning', id: 'push-blocked' }, 'Notifications are blocked for this site: allow them in the browser’s site settings first.')
        : null;
    body.replaceChildren(words, blocked || '', el('div', { class: 'actions' }, go));
  }

  /**
   * Subscribes this device. `previous` is the id of its trigger that no longer works (expired,
   * or its subscription lost here): renewed when the endpoint is the same, else deleted once
   * the new one is stored; `fresh` asks the browser for a new subscription.
   */
  async function subscribeHere(previous, fresh) {
    await permission();
    const reg = await worker();
    const { publicKey } = await scheduler.call('GET', '/push/key');
    const sub = await subscribe(reg, bytesOf(publicKey), fresh);
    let id;
    try {
      id = await scheduler.call('POST', '/trigger/push', sub.toJSON());
    } catch (e) {
      // nothing half made: the browser's subscription goes again
      await sub.unsubscribe().catch(() => {});
      if (e instanceof ApiError && e.status === 429) {
        throw new Error(
          'This account already sends reminders to 20 devices, the most it can. Stop one you no longer use (“Stop” on that device, or “Delete” on the scheduler’s Triggers page), then try again.',
        );
      }
      throw new Error('The scheduler did not take this device: ' + e.message);
    }
    // a new subscription replaced the old one: its trigger goes
    if (previous && previous !== id) await scheduler.call('DELETE', '/trigger/delete/' + previous).catch(() => {});
    remember(id);
    await render();
    section.querySelector('#push-stop')?.focus();
  }

  async function unsubscribe(id) {
    await scheduler.call('DELETE', '/trigger/delete/' + id);
    await forgetThisDevice();
    await render();
    section.querySelector('#push-subscribe')?.focus();
  }

  section.hidden = false;
  render().catch((e) => showError(section, e.message));
}
