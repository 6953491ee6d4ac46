"""Web Push as another implementation sees it (issue 27, scheduler.md §6.4, §7.6): a push
service run by this test on loopback checks each message's VAPID JWT with `cryptography`
(ES256 under the key of `GET /push/key`, `aud` the endpoint's origin) and decrypts the body
with Mozilla's `http_ece` and the subscriber's own private key, as a browser would. It
answers 201, 410 (the subscription is gone: the trigger expires) or 429 then 201 (a retry
with the same Topic). No browser here: the server is the release binary of conftest."""

import base64
import json
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import http_ece
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

WAIT = 30  # seconds: an item due a minute ago, triggered, delivered (and retried)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def call(method, url, body=None, token=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text else None), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "null"), e.headers


def account(scheduler, name):
    """A new scheduler account's token."""
    status, _, _ = call("POST", scheduler + "/register", {"name": name, "password": name + "-password"})
    assert status in (200, 204), status
    status, _, headers = call("POST", scheduler + "/login", {"username": name, "password": name + "-password"})
    assert status == 204
    cookie = headers["Set-Cookie"]
    return cookie.split("JWT-Cookie=", 1)[1].split(";", 1)[0]


def due_a_minute_ago(content):
    t = datetime.now(timezone.utc) - timedelta(minutes=1)
    return {"content": content, "scheduled-day": t.strftime("%Y-%m-%d"), "scheduled-time": t.strftime("%H:%M:%S")}


class Subscriber:
    """A browser's side of a subscription: its P-256 key pair and auth secret."""

    def __init__(self):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.auth = bytes(range(16))

    def subscription(self, endpoint):
        point = self.key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {"endpoint": endpoint, "expirationTime": None, "keys": {"p256dh": b64url(point), "auth": b64url(self.auth)}}

    def decrypt(self, body):
        return json.loads(http_ece.decrypt(body, private_key=self.key, auth_secret=self.auth, version="aes128gcm"))


def verify_vapid(authorization, server_key, origin):
    """The JWT of `vapid t=…, k=…` verifies under `server_key` and names `origin`."""
    assert authorization.startswith("vapid t="), authorization
    token, key = authorization[len("vapid t="):].split(", k=")
    assert key == server_key
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(key))
    head, claims, signature = token.split(".")
    raw = unb64url(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    assert json.loads(unb64url(head)) == {"typ": "JWT", "alg": "ES256"}
    claims = json.loads(unb64url(claims))
    assert claims["aud"] == origin
    assert time.time() < claims["exp"] <= time.time() + 24 * 3600
    assert claims["sub"].startswith(("mailto:", "https://"))


class PushService:
    """An HTTP server on 127.0.0.1 answering the n-th message with `answers[n]` (the last
    one after that), keeping each message's headers and body."""

    def __init__(self, answers):
        self.messages = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                service.messages.append((self.headers, body))
                status, headers = answers[min(len(service.messages), len(answers)) - 1]
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_for(self, n):
        deadline = time.monotonic() + WAIT
        while len(self.messages) < n:
            assert time.monotonic() < deadline, f"{len(self.messages)} of {n} messages"
            time.sleep(0.05)  # poll until the message arrives
        return self.messages

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def push_service(request):
    services = []

    def start(answers):
        s = PushService(answers)
        services.append(s)
        return s

    yield start
    for s in services:
        s.close()


def attempts(scheduler, token, n):
    deadline = time.monotonic() + WAIT
    while True:
        _, items, _ = call("GET", scheduler + "/scheduler/items?filter=onlytriggered", token=token)
        done = [a for i in items for a in i["triggered"]["triggeredInfoTriggerTriggerAttempts"]]
        if len(done) >= n:
            return done
        assert time.monotonic() < deadline, f"{len(done)} of {n} attempts: {items}"
        time.sleep(0.1)  # poll until the delivery finished


def test_a_pushed_reminder_verifies_and_decrypts_elsewhere(server, push_service):
    scheduler = server["scheduler"]
    service = push_service([(201, {})])
    token = account(scheduler, "pusher")
    _, key, _ = call("GET", scheduler + "/push/key")
    phone = Subscriber()
    status, trigger, _ = call("POST", scheduler + "/trigger/push", phone.subscription(service.origin + "/wpush/1"), token)
    assert status == 200
    call("POST", scheduler + "/scheduler/item", due_a_minute_ago("Feed the cat 🐈"), token)
    headers, body = service.wait_for(1)[0]
    verify_vapid(headers["Authorization"], key["publicKey"], service.origin)
    assert headers["Content-Encoding"] == "aes128gcm"
    assert headers["TTL"] == "86400" and headers["Urgency"] == "high"
    message = phone.decrypt(body)
    assert message["title"] == "Reminder" and message["body"] == "Feed the cat 🐈"
    assert attempts(scheduler, token, 1) == [
        {"tag": "PushTriggerAttempt", "contents": [trigger, {"tag": "PushResultSent"}]}
    ]


def test_gone_expires_and_throttled_is_retried(server, push_service):
    scheduler = server["scheduler"]
    gone = push_service([(410, {})])
    busy = push_service([(429, {"Retry-After": "1"}), (201, {})])
    token = account(scheduler, "expiring")
    phone, tablet = Subscriber(), Subscriber()
    _, gone_trigger, _ = call("POST", scheduler + "/trigger/push", phone.subscription(gone.origin + "/p"), token)
    call("POST", scheduler + "/trigger/push", tablet.subscription(busy.origin + "/p"), token)
    call("POST", scheduler + "/scheduler/item", due_a_minute_ago("twice"), token)
    outcomes = {a["contents"][0]: a["contents"][1]["tag"] for a in attempts(scheduler, token, 2)}
    assert outcomes[gone_trigger] == "PushResultError"
    assert sorted(outcomes.values()) == ["PushResultError", "PushResultSent"]
    _, info, _ = call("GET", f"{scheduler}/trigger/info/{gone_trigger}", token=token)
    assert info["info"]["typedTriggerInfoValue"]["pushTriggerInfoExpired"] is True
    tried = busy.wait_for(2)
    assert tried[0][0]["Topic"] == tried[1][0]["Topic"]
    assert [tablet.decrypt(body)["body"] for _, body in tried] == ["twice", "twice"]
    assert len(gone.messages) == 1
