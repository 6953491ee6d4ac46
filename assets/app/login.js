// Log in (and register, when this server takes new accounts): the token answered by
// POST /app/token is kept in this origin's localStorage.
import { call, checkNewPassword, config, frame, onSubmit, setToken } from './api.js';

function next() {
  const wanted = new URLSearchParams(location.search).get('next') || '/app/';
  // only a page of this interface: never another site
  return wanted.startsWith('/app/') ? wanted : '/app/';
}

async function logIn(username, password) {
  const answer = await call('POST', '/app/token', { username, password }, { bearer: null });
  setToken(answer.token);
  location.assign(next());
}

async function start() {
  frame('/app/login');
  const settings = await config().catch(() => ({ service: 'inbox', registration: true }));
  const service = settings.service === 'scheduler' ? 'scheduler' : 'inbox';
  document.getElementById('title').textContent = 'Log in to your ' + service;
  document.title = 'Log in to your ' + service + ' · Pigeonhole';
  onSubmit(document.getElementById('login'), (data) => logIn(data.get('username'), data.get('password')));
  if (settings.registration) {
    document.getElementById('register-section').hidden = false;
    onSubmit(document.getElementById('register'), async (data) => {
      checkNewPassword(data.get('password'), data.get('again'));
      await call('POST', '/register', { name: data.get('name'), password: data.get('password') }, { bearer: null });
      await logIn(data.get('name'), data.get('password'));
    });
  }
}

start();
