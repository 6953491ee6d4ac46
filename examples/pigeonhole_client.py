#!/usr/bin/env python3
"""A small Pigeonhole inbox client that works offline, with Python's standard library only.

It keeps a copy of your inbox in a JSON file. `add` and `done` work without the server;
`sync` reconciles the copy with the server in one request (POST /inbox/sync, inbox.md §5),
so notes taken on a train reach the inbox when you are back online, and items captured
elsewhere show up here.

    ./pigeonhole_client.py add buy milk      # offline: kept until the next sync
    ./pigeonhole_client.py sync              # one round trip both ways
    ./pigeonhole_client.py list
    ./pigeonhole_client.py done 3f2a         # by the first characters of its id

Credentials come from the environment, else from `pigeonhole setup`'s client settings
(~/.config/pigeonhole/client.toml): PIGEONHOLE_INBOX_URL, PIGEONHOLE_USERNAME and
PIGEONHOLE_INBOX_KEY (an access key with PermitSync). The copy lives in
PIGEONHOLE_OFFLINE_FILE (default ~/.local/share/pigeonhole/offline-inbox.json).
"""
from __future__ import annotations

import base64
import datetime
import json
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path


def settings() -> dict[str, str]:
    """URL, username and key: the environment first, then the client settings file."""
    path = os.environ.get("PIGEONHOLE_CLIENT_CONFIG") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "pigeonhole", "client.toml")
    saved: dict[str, str] = {}
    if os.path.exists(path):
        for line in Path(path).read_text().splitlines():
            m = re.fullmatch(r'([a-z-]+) = "(.*)"', line.strip())
            if m:
                saved[m.group(1)] = m.group(2)
    out = {
        "url": os.environ.get("PIGEONHOLE_INBOX_URL") or saved.get("inbox-url", ""),
        "username": os.environ.get("PIGEONHOLE_USERNAME") or saved.get("username", ""),
        "key": os.environ.get("PIGEONHOLE_INBOX_KEY") or saved.get("inbox-key", ""),
    }
    missing = [k for k, v in out.items() if not v]
    if missing:
        sys.exit(f"pigeonhole_client: no {', '.join(missing)}: run `pigeonhole setup` or set PIGEONHOLE_* variables")
    return out


def copy_path() -> Path:
    return Path(os.environ.get("PIGEONHOLE_OFFLINE_FILE")
                or os.path.expanduser("~/.local/share/pigeonhole/offline-inbox.json"))


def load() -> dict:
    """The offline copy: `added` (local key -> item), `synced` (uuid -> item), `deleted`."""
    path = copy_path()
    if path.exists():
        return json.loads(path.read_text())
    return {"added": {}, "synced": {}, "deleted": [], "next": 0}


def save(copy: dict) -> None:
    path = copy_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(copy, indent=1))
    os.replace(tmp, path)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def text_of(item: dict) -> str:
    data = base64.b64decode(item["contents"]["data"])
    if item["contents"]["type"] != "text":
        return f"[{item['contents']['type']}, {len(data)} bytes]"
    return data.decode("utf-8", errors="replace")


def sync(copy: dict) -> dict:
    """One POST /inbox/sync, merged as inbox.md §5.4 describes."""
    s = settings()
    body = json.dumps({"added": copy["added"], "synced": sorted(copy["synced"]),
                       "deleted": copy["deleted"]}).encode()
    request = urllib.request.Request(
        s["url"].rstrip("/") + "/inbox/sync", data=body, method="POST",
        headers={"Content-Type": "application/json", "Username": s["username"], "Access-Key": s["key"]})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as e:
        reason = e.read().decode(errors="replace")
        sys.exit(f"pigeonhole_client: sync failed: {e.code} {reason}")
    except urllib.error.URLError as e:
        sys.exit(f"pigeonhole_client: cannot reach {s['url']}: {e.reason}")
    for uuid, item in answer["server-added"].items():
        if uuid not in copy["synced"] and uuid not in copy["deleted"]:
            copy["synced"][uuid] = item
    for uuid in answer["server-deleted"]:
        copy["synced"].pop(uuid, None)
    copy["deleted"] = [u for u in copy["deleted"] if u not in answer["client-deleted"]]
    for key, uuid in answer["client-added"].items():
        if key in copy["added"]:
            copy["synced"][uuid] = copy["added"].pop(key)
    return copy


def ordered(copy: dict) -> list[tuple[str, dict]]:
    """Every item, oldest first: (id or local key, item)."""
    items = list(copy["synced"].items()) + [(f"local-{k}", v) for k, v in copy["added"].items()]
    return sorted(items, key=lambda kv: kv[1]["created"])


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("add", "sync", "list", "done"):
        print(__doc__.strip().split("\n\n")[2], file=sys.stderr)
        return 2
    command, args = argv[0], argv[1:]
    copy = load()
    if command == "add":
        text = " ".join(args) if args else sys.stdin.read().rstrip("\n")
        if not text:
            sys.exit("pigeonhole_client: nothing to add")
        key = str(copy["next"])
        copy["next"] += 1
        copy["added"][key] = {"contents": {"type": "text", "data": base64.b64encode(text.encode()).decode()},
                              "created": now()}
        print(f"added (offline, local-{key}); it reaches the server at the next sync")
    elif command == "sync":
        before = len(copy["synced"]) + len(copy["added"])
        copy = sync(copy)
        print(f"synced: {len(copy['synced'])} item(s) (was {before}), {len(copy['added'])} waiting")
    elif command == "list":
        for ident, item in ordered(copy):
            print(f"{ident[:14]:14}  {item['created'][:19]}  {text_of(item).splitlines()[0] if text_of(item) else ''}")
    elif command == "done":
        if len(args) != 1:
            sys.exit("pigeonhole_client: done ID (the first characters of an item's id)")
        matches = [i for i, _ in ordered(copy) if i.startswith(args[0])]
        if len(matches) != 1:
            sys.exit(f"pigeonhole_client: {len(matches)} items match {args[0]!r}")
        ident = matches[0]
        if ident.startswith("local-"):
            del copy["added"][ident[len("local-"):]]
        else:
            del copy["synced"][ident]
            copy["deleted"].append(ident)
        print("done (it leaves the server at the next sync)")
    save(copy)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
