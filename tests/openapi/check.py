#!/usr/bin/env python3
"""Validates both OpenAPI documents and runs Schemathesis against a real server from them
(tests/openapi/run installs the tools and names the binary in PIGEONHOLE_BIN).

The server runs on free loopback ports with a fresh data directory and two admins.
On each service, for each run, an admin account registers, logs in (`POST /login`, the token of its
`JWT-Cookie`) and makes an access key with every permission it has; Schemathesis then runs
every operation of the document the service serves at `GET /openapi.json` twice: with
`Authorization: Bearer <token>`, then with `Username` + `Access-Key`. The checks: no 5xx
but the documented 503, every status documented, every body and content type as documented.
`DELETE /account` and `DELETE /admin/account/{id}` are left out: they end the run's
credentials (Schemathesis's stateful phase feeds the caller's own `uuid`, from
`GET /account` or `GET /admin/accounts`, into the admin deletion, and every operation run
after it then answers only 401); tests/api/inbox_api.rs, tests/api/scheduler_api.rs and the
conformance suite test both. Bounded: a few examples per
operation (MAX_EXAMPLES, default 10; PHASES)."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from openapi_spec_validator import validate
from openapi_spec_validator.validation import OpenAPIV31SpecValidator

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = os.environ.get("PIGEONHOLE_BIN", str(ROOT / "target" / "release" / "pigeonhole"))
MAX_EXAMPLES = os.environ.get("MAX_EXAMPLES", "10")
# fuzzing (MAX_EXAMPLES per operation) and stateful (the documents' links: a created item,
# key or trigger into the routes that use it); the coverage phase (about 30 cases per
# operation whatever MAX_EXAMPLES says) with PHASES=coverage,fuzzing,stateful
PHASES = os.environ.get("PHASES", "fuzzing,stateful")
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method, url, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def credentials(base, user):
    """Registers the admin `user`, logs in, makes an access key with every permission (an
    account of its own for each run: a run may change or revoke what it was given)."""
    status, _, text = request("POST", base + "/register", {"name": user, "password": "a passphrase"})
    assert status in (200, 204), (status, text)
    status, headers, text = request("POST", base + "/login", {"username": user, "password": "a passphrase"})
    assert status == 204, (status, text)
    cookie = {k.lower(): v for k, v in headers.items()}["set-cookie"]
    token = cookie.split(";")[0].split("=", 1)[1]
    bearer = {"Authorization": "Bearer " + token}
    status, _, text = request("GET", base + "/permissions", headers=bearer)
    assert status == 200, (status, text)
    key = {"addAccessKeyName": "schemathesis", "addAccessKeyPermissions": json.loads(text)}
    status, _, text = request("POST", base + "/access-key", key, headers=bearer)
    assert status == 200, (status, text)
    secret = json.loads(text)["accessKeyCreatedKey"]
    return token, secret


def main():
    for name in ("inbox", "scheduler"):
        document = json.loads((ROOT / "assets" / "openapi" / f"{name}.json").read_text())
        validate(document, cls=OpenAPIV31SpecValidator)
        print(f"{name}.json: a valid OpenAPI {document['openapi']} document, {sum(len(v) for v in document['paths'].values())} operations")
    inbox_port, scheduler_port = free_port(), free_port()
    data = tempfile.mkdtemp(prefix="pigeonhole-openapi-")
    server = subprocess.Popen(
        [BIN, "serve", "--data-dir", data, "--inbox-port", str(inbox_port),
         "--scheduler-port", str(scheduler_port), "--admin", "token-admin", "--admin", "key-admin"],
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(data, "server.log"), "w"),
    )
    failed = False
    try:
        bases = {
            "inbox": f"http://127.0.0.1:{inbox_port}",
            "scheduler": f"http://127.0.0.1:{scheduler_port}",
        }
        deadline = time.monotonic() + 30
        for base in bases.values():
            while True:
                try:
                    if request("GET", base + "/healthz")[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit(f"the server did not start (log: {data}/server.log)")
                time.sleep(0.1)
        started = time.monotonic()
        for name, base in bases.items():
            for label in ("token", "access key"):
                user = "token-admin" if label == "token" else "key-admin"
                token, secret = credentials(base, user)
                if label == "token":
                    headers = [f"Authorization: Bearer {token}"]
                else:
                    headers = [f"Username: {user}", f"Access-Key: {secret}"]
                print(f"\n=== {name} with a {label} ===", flush=True)
                command = ["schemathesis", "run", base + "/openapi.json", "--checks", CHECKS,
                           "--max-examples", MAX_EXAMPLES, "--phases", PHASES, "--request-timeout", "30",
                           "--exclude-operation-id", "deleteAccount",
                           "--exclude-operation-id", "adminDeleteAccount",
                           "--seed", "20", "--no-color", *sum((["-H", h] for h in headers), []),
                           *sys.argv[1:]]
                t = time.monotonic()
                if subprocess.run(command).returncode != 0:
                    failed = True
                print(f"--- {name} with a {label}: {time.monotonic() - t:.0f} s", flush=True)
        print(f"\nSchemathesis: {time.monotonic() - started:.0f} s in all")
        if server.poll() is not None:
            sys.exit(f"the server stopped (log: {data}/server.log)")
    finally:
        server.terminate()
        server.wait(timeout=30)
    if failed:
        sys.exit(f"Schemathesis found answers that contradict the documents (server log: {data}/server.log)")


if __name__ == "__main__":
    main()
