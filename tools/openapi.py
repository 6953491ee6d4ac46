#!/usr/bin/env python3
"""Writes the OpenAPI 3.1 documents of both services: assets/openapi/inbox.json and
assets/openapi/scheduler.json (served at `GET /openapi.json`, docs/api.md).

The JSON files are generated from the tables below so that the shared parts (the error
shape, the security schemes, the statuses every route can answer) are written once. Run
`tools/openapi.py` after changing a table; `tools/openapi.py --check` fails when a committed
file differs from what it would write (tests/openapi/run runs it). The documents are kept
true by tests/openapi.rs (every route documented, nothing else) and by the Schemathesis run
of tests/openapi/run (every answer matches the document).
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "openapi"

ERROR = {"$ref": "#/components/schemas/Error"}
UUID = {"type": "string", "format": "uuid"}
ANY = {}

# What each error status means, for every route that can answer it.
REASONS = {
    400: "Bad input: malformed JSON, a missing or mistyped field, an invalid UUID in the path, a bad header value.",
    401: "No credentials, an invalid, expired or revoked token, wrong access-key headers, a missing permission, or a failed login.",
    402: "The free item limit is reached.",
    403: "A wrong old passphrase, or registration is closed.",
    404: "No such item, key, trigger or account, or one that belongs to another account.",
    409: "The username is taken.",
    413: "The request body is larger than the server's body limit.",
    415: "The route takes a JSON body and the request's Content-Type is not JSON.",
    429: "Too many requests: failed logins (with Retry-After), or too many at once from this address or account.",
    503: "The server cannot serve it now: the payment provider is unreachable, the disk is full or failing, or the server is shutting down.",
}


def error(status):
    return {
        "description": REASONS[status],
        "content": {"application/json": {"schema": ERROR}},
    }


def json_ok(schema, description="OK", status="200"):
    return {status: {"description": description, "content": {"application/json": {"schema": schema}}}}


def empty(status="200", description="Done: an empty body."):
    return {status: {"description": description}}


def html(status="200", description="An HTML page."):
    return {status: {"description": description, "content": {"text/html; charset=utf-8": {"schema": {"type": "string"}}}}}


def body(schema, required=True):
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def obj(required=(), **props):
    out = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


STRING = {"type": "string"}
CREDENTIALS = obj(("username", "password"), username=STRING, password=STRING)
REGISTRATION = obj(("name", "password"), name=STRING, password=STRING)
PASSPHRASE_CHANGE = obj(
    ("old-passphrase", "new-passphrase"),
    **{"old-passphrase": STRING, "new-passphrase": STRING},
)
ADD_ACCESS_KEY = obj(
    ("addAccessKeyName", "addAccessKeyPermissions"),
    addAccessKeyName=STRING,
    addAccessKeyPermissions={"type": "array", "items": STRING},
)
ACCESS_KEY_CREATED = obj(
    ("accessKeyCreatedKey", "accessKeyCreatedCreatedTimestamp", "accessKeyCreatedUUID"),
    accessKeyCreatedKey=STRING,
    accessKeyCreatedCreatedTimestamp=STRING,
    accessKeyCreatedUUID=STRING,
)
ACCESS_KEY_INFO = obj(
    ("uuid", "name", "created", "permissions"),
    uuid=STRING,
    name=STRING,
    created=STRING,
    permissions={"type": "array", "items": STRING},
)
TOKEN = obj(("token",), token=STRING)
HEALTH = obj(("status",), status=STRING)
STRINGS = {"type": "array", "items": STRING}
OBJECT = {"type": "object"}
OBJECTS = {"type": "array", "items": OBJECT}


def path_param(name, schema=UUID, description=None):
    out = {"name": name, "in": "path", "required": True, "schema": schema}
    if description:
        out["description"] = description
    return out


# The permissions each protected operation needs, by operationId: the one the route table
# names (`access` in src/*/routes.rs) first, then what the handler also reads or writes
# (`also_needs`). tests/openapi.rs checks them against those tables.
COMMON_PERMISSIONS = {
    "permissions": ("PermitGetPermissions",),
    "getAccount": ("PermitGetAccountInfo",),
    "addAccessKey": ("PermitPostAddAccessKey",),
    "listAccessKeys": ("PermitGetAccessKeys",),
    "getAccessKey": ("PermitGetAccessKey",),
    "deleteAccessKey": ("PermitDeleteAccessKey",),
    "changePassphrase": ("PermitPostChangePassphrase",),
    "deleteAccount": ("PermitDeleteAccount",),
    "sync": ("PermitSync",),
    "getItem": ("PermitGetItem",),
    "items": ("PermitGetItems",),
    "uuids": ("PermitGetItemUUIDs",),
    "adminStats": ("PermitAdminGetStats",),
    "adminAccounts": ("PermitAdminGetAccounts",),
    "adminDeleteAccount": ("PermitAdminDeleteAccount",),
}
INBOX_PERMISSIONS = COMMON_PERMISSIONS | {
    "exportAccount": ("PermitGetItems", "PermitGetAccessKeys", "PermitGetAccountInfo"),
    "importAccount": ("PermitAdd",),
    "changePassphraseOld": ("PermitPostChangePassphrase",),
    "addItem": ("PermitAdd",),
    "addText": ("PermitAdd",),
    "deleteItem": ("PermitDelete",),
    "showItem": ("PermitShow",),
    "size": ("PermitSize",),
}
SCHEDULER_PERMISSIONS = COMMON_PERMISSIONS | {
    "exportAccount": ("PermitGetItems", "PermitGetSettings", "PermitGetTriggers", "PermitGetAccessKeys", "PermitGetAccountInfo"),
    "importAccount": ("PermitAddItem", "PermitPutSettings", "PermitAddTrigger"),
    "getSettings": ("PermitGetSettings",),
    "putSettings": ("PermitPutSettings",),
    "addItem": ("PermitAddItem",),
    "editItem": ("PermitEditItem",),
    "deleteItem": ("PermitDeleteItem",),
    "deleteTriggereds": ("PermitDeleteTriggereds",),
    "retry": ("PermitRetry",),
    "triggers": ("PermitGetTriggers",),
    "getTrigger": ("PermitGetTriggers",),
    "deleteTrigger": ("PermitDeleteTrigger",),
    "addEmailTrigger": ("PermitAddTrigger",),
    "addInboxTrigger": ("PermitAddTrigger",),
    "verifyEmailTrigger": ("PermitVerifyTrigger",),
    "resendVerification": ("PermitResendVerification",),
}


class Doc:
    def __init__(self, title, description, permissions):
        self.paths = {}
        self.title = title
        self.description = description
        self.permissions = permissions

    def op(
        self,
        method,
        paths,
        op_id,
        summary,
        ok,
        *,
        auth=None,
        request=None,
        params=(),
        errors=(),
        tag=None,
        links=None,
    ):
        """`paths` is one path or a list of spellings answering alike (the first is the
        main one, the others are the originals' aliases). `auth` is None (public), "user"
        or "admin"."""
        if isinstance(paths, str):
            paths = [paths]
        statuses = {400, 413, 429, 503} | set(errors)
        if auth:
            statuses.add(401)
        if request is not None:
            statuses.add(415)
        if any(p["in"] == "path" for p in params):
            statuses.add(404)
        for i, path in enumerate(paths):
            o = {"operationId": op_id if i == 0 else f"{op_id}Alias{i}", "summary": summary}
            if tag:
                o["tags"] = [tag]
            if i > 0:
                o["description"] = f"The same as `{method.upper()} {paths[0]}` (the originals' spelling)."
            if params:
                o["parameters"] = list(params)
            if request is not None:
                o["requestBody"] = request
            responses = json.loads(json.dumps(ok))
            if links:
                # stateful testing follows these: the created id into the routes that use it
                responses["200"]["links"] = {
                    target[0].upper() + target[1:]: {"operationId": target, "parameters": {"id": expression}}
                    for target, expression in links.items()
                }
            for s in sorted(statuses):
                responses[str(s)] = error(s)
            o["responses"] = responses
            if auth:
                o["security"] = [{"bearer": []}, {"username": [], "accessKey": []}]
                o["x-permissions"] = list(self.permissions[op_id])
                if auth == "admin":
                    o["x-admin-only"] = True
                    o["description"] = (o.get("description", "") + " Only for accounts on the server's admin list.").strip()
            else:
                o["security"] = []
            self.paths.setdefault(path, {})[method] = o

    def document(self):
        return {
            "openapi": "3.1.0",
            "info": {"title": self.title, "version": "1", "description": self.description},
            "paths": self.paths,
            "components": {
                "schemas": {
                    "Error": {
                        "type": "object",
                        "required": ["error"],
                        "properties": {"error": {"type": "string", "minLength": 1}},
                        "description": "Every answer with a status of 400 or above.",
                    }
                },
                "securitySchemes": {
                    "bearer": {
                        "type": "http",
                        "scheme": "bearer",
                        "description": "The token of `POST /login` (its `JWT-Cookie` Set-Cookie header) or of `POST /app/token`.",
                    },
                    "username": {
                        "type": "apiKey",
                        "in": "header",
                        "name": "Username",
                        "description": "The account's username, with `Access-Key`.",
                    },
                    "accessKey": {
                        "type": "apiKey",
                        "in": "header",
                        "name": "Access-Key",
                        "description": "The secret of an access key (`POST /access-key`), with `Username`; carries the key's permissions.",
                    },
                },
            },
        }


def common(d, service):
    """The routes both services answer alike."""
    d.op("get", "/", "apiPage", "This page: what the service is, with a link to this document.", html())
    d.op("get", "/openapi.json", "openapi", "This OpenAPI document.", json_ok(OBJECT))
    d.op(
        "get",
        "/healthz",
        "health",
        "The process's health (docs/operations.md): 200 when it can serve, 503 when not.",
        json_ok(HEALTH) | {"503": {"description": "Unhealthy.", "content": {"application/json": {"schema": OBJECT}}}},
    )
    d.op(
        "post",
        "/register",
        "register",
        "Create an account.",
        empty("204") if service == "inbox" else empty("200"),
        request=body(REGISTRATION),
        errors=(403, 409),
    )
    d.op(
        "post",
        "/login",
        "login",
        "Log in: the token is in the `Set-Cookie: JWT-Cookie=<token>` header.",
        {
            "204": {
                "description": "Logged in.",
                "headers": {"Set-Cookie": {"schema": STRING, "description": "`JWT-Cookie=<token>; Path=/; HttpOnly; Secure; SameSite=Lax`"}},
            }
        },
        request=body(CREDENTIALS),
        errors=(401,),
    )
    d.op("get", "/pricing", "pricing", "The price of a subscription, or null when the server is free.", json_ok({"type": ["object", "null"]}))
    d.op("get", "/permissions", "permissions", "The caller's permission names.", json_ok(STRINGS), auth="user")
    d.op("get", "/account", "getAccount", "The caller's account.", json_ok(OBJECT), auth="user")
    d.op("get", "/account/export", "exportAccount", "The account as JSON (docs/backup.md).", json_ok(OBJECT), auth="user")
    d.op(
        "post",
        "/account/import",
        "importAccount",
        "Bring in an export (docs/moving-in.md), all or nothing.",
        json_ok(ANY),
        auth="user",
        request=body(OBJECT),
        errors=(402, 409),
    )
    d.op(
        "post",
        "/access-key",
        "addAccessKey",
        "Create an access key; the answer holds its secret, shown only once.",
        json_ok(ACCESS_KEY_CREATED),
        auth="user",
        request=body(ADD_ACCESS_KEY),
        links={t: "$response.body#/accessKeyCreatedUUID" for t in ("getAccessKey", "deleteAccessKey")},
    )
    d.op("get", "/access-key", "listAccessKeys", "The caller's access keys, oldest first, without secrets.", json_ok({"type": "array", "items": ACCESS_KEY_INFO}), auth="user")
    d.op("get", "/access-key/{id}", "getAccessKey", "One access key.", json_ok(ACCESS_KEY_INFO), auth="user", params=[path_param("id")])
    d.op("delete", "/access-key/{id}", "deleteAccessKey", "Delete an access key.", empty(), auth="user", params=[path_param("id")])
    d.op("get", "/admin/stats", "adminStats", "Statistics of the server.", json_ok(OBJECT), auth="admin")
    d.op("get", "/admin/accounts", "adminAccounts", "Every account.", json_ok(OBJECTS), auth="admin")
    d.op(
        "delete",
        "/admin/account/{id}",
        "adminDeleteAccount",
        "Delete an account.",
        empty("204") if service == "inbox" else empty("200"),
        auth="admin",
        params=[path_param("id")],
    )
    app_types = {
        t: {"schema": STRING}
        for t in (
            "text/html; charset=utf-8",
            "text/javascript; charset=utf-8",
            "text/css; charset=utf-8",
            "image/svg+xml",
            "image/png",
            "application/manifest+json",
        )
    }
    app_ok = {"200": {"description": "A page or file of the web interface (docs/web.md).", "content": app_types}}
    d.op("get", "/app", "appPage", "The web interface's main page.", app_ok, tag="web")
    d.op("get", "/app/{name}", "appFile", "A page or file of the web interface.", app_ok, params=[path_param("name", STRING)], tag="web")
    d.op("get", "/app/config.json", "appConfig", "What the web pages need to know of this server.", json_ok(OBJECT), tag="web")
    d.op("post", "/app/token", "appToken", "The web interface's login: the token as JSON.", json_ok(TOKEN), request=body(CREDENTIALS), errors=(401,), tag="web")


def inbox():
    d = Doc(
        "Pigeonhole inbox service",
        "The inbox (an Intray-compatible API): capture anything, process it later. "
        "Every `/inbox/...` path also answers as `/intray/...`. Errors are `{\"error\": \"...\"}`. "
        "Protected routes take a bearer token or the `Username` + `Access-Key` headers; "
        "the permissions a route needs are its `x-permissions`. `HEAD` answers as `GET`.",
        INBOX_PERMISSIONS,
    )
    common(d, "inbox")
    both = lambda p: [f"/inbox{p}", f"/intray{p}"]
    d.op("post", "/account", "changePassphraseOld", "Change the passphrase (the older path).", empty("204"), auth="user", request=body(PASSPHRASE_CHANGE), errors=(403,))
    d.op("post", "/account/change-passphrase", "changePassphrase", "Change the passphrase.", empty("204"), auth="user", request=body(PASSPHRASE_CHANGE), errors=(403,))
    d.op("delete", "/account", "deleteAccount", "Delete the caller's account.", empty("204"), auth="user")
    item = obj(("type", "data"), type={"type": "string", "enum": ["text", "image/jpeg", "image/png"]}, data={"type": "string", "description": "Padded standard base64."})
    idem = {"name": "Idempotency-Key", "in": "header", "required": False, "schema": STRING}
    d.op("post", both("/item"), "addItem", "Add an item; the answer is its UUID.", json_ok(UUID), auth="user", request=body(item), params=[idem], errors=(402,), links={t: "$response.body" for t in ("getItem", "deleteItem")})
    d.op(
        "post",
        both("/text"),
        "addText",
        "Add the body, whatever its type, as a text item; the answer is its UUID.",
        json_ok(UUID),
        auth="user",
        request={"required": True, "content": {"text/plain": {"schema": STRING}}},
        params=[idem],
        errors=(402,),
    )
    d.op("get", both("/item/{id}"), "getItem", "One item.", json_ok(OBJECT), auth="user", params=[path_param("id")])
    d.op("delete", both("/item/{id}"), "deleteItem", "Delete an item.", empty(), auth="user", params=[path_param("id")])
    d.op("get", both("/items"), "items", "Every item, oldest first.", json_ok(OBJECTS), auth="user")
    d.op("get", both("/uuids"), "uuids", "The UUIDs of the items.", json_ok(STRINGS), auth="user")
    d.op("get", both("/show-item"), "showItem", "The oldest item, or null.", json_ok({"type": ["object", "null"]}), auth="user")
    d.op("get", both("/size"), "size", "How many items.", json_ok({"type": "integer", "minimum": 0}), auth="user")
    d.op("post", both("/sync"), "sync", "Synchronise a client's items.", json_ok(OBJECT), auth="user", request=body(OBJECT), errors=(402,))
    return d.document()


def scheduler():
    d = Doc(
        "Pigeonhole scheduler service",
        "The scheduler (a Tickler-compatible API): items that come back at a time, into an "
        "inbox or by e-mail. Every `/scheduler/...` path also answers as `/tickler/...`, and "
        "`/trigger/inbox` as `/trigger/intray`. Errors are `{\"error\": \"...\"}`. Protected "
        "routes take a bearer token or the `Username` + `Access-Key` headers "
        "(docs/scheduler-access-keys.md) carrying the permissions of the route's `x-permissions`. "
        "`HEAD` answers as `GET`.",
        SCHEDULER_PERMISSIONS,
    )
    common(d, "scheduler")
    both = lambda p: [f"/scheduler{p}", f"/tickler{p}"]
    d.op("get", "/loopers", "loopers", "The status of the background workers.", json_ok(OBJECT))
    d.op("post", "/", "changePassphrase", "Change the passphrase.", empty("204"), auth="user", request=body(PASSPHRASE_CHANGE), errors=(403,))
    d.op("delete", "/account", "deleteAccount", "Delete the caller's account.", empty(), auth="user")
    d.op("get", "/account/settings", "getSettings", "The account's settings.", json_ok(OBJECT), auth="user")
    d.op("put", "/account/settings", "putSettings", "Replace the account's settings.", empty(), auth="user", request=body(OBJECT))
    d.op("post", both("/item"), "addItem", "Schedule an item; the answer is its UUID.", json_ok(UUID), auth="user", request=body(OBJECT), errors=(402,), links={t: "$response.body" for t in ("getItem", "editItem", "deleteItem")})
    d.op("get", both("/item/info/{id}"), "getItem", "One item.", json_ok(OBJECT), auth="user", params=[path_param("id")])
    d.op("post", both("/item/info/{id}"), "editItem", "Change an item that has not triggered.", empty(), auth="user", request=body(OBJECT), params=[path_param("id")])
    d.op("delete", both("/item/delete/{id}"), "deleteItem", "Delete an item.", empty(), auth="user", params=[path_param("id")])
    d.op("post", both("/item/delete-triggereds"), "deleteTriggereds", "Delete the items that have triggered.", empty(), auth="user")
    d.op("post", both("/item/retry"), "retry", "Retry the failed triggers of these items.", empty(), auth="user", request=body({"type": "array", "items": UUID}))
    d.op(
        "get",
        both("/items"),
        "items",
        "The items, by a filter.",
        json_ok(OBJECTS),
        auth="user",
        params=[{"name": "filter", "in": "query", "required": False, "schema": STRING}],
    )
    d.op("get", both("/uuids"), "uuids", "The UUIDs of the items.", json_ok(STRINGS), auth="user")
    d.op("post", "/sync", "sync", "Synchronise a client's items.", json_ok(OBJECT), auth="user", request=body(OBJECT), errors=(402,))
    d.op("get", "/trigger", "triggers", "The triggers.", json_ok(OBJECTS), auth="user")
    d.op("get", "/trigger/info/{id}", "getTrigger", "One trigger.", json_ok(OBJECT), auth="user", params=[path_param("id")])
    d.op("delete", "/trigger/delete/{id}", "deleteTrigger", "Delete a trigger.", empty(), auth="user", params=[path_param("id")])
    d.op(
        "post",
        "/trigger/email",
        "addEmailTrigger",
        "Add an e-mail trigger; a verification e-mail goes out. The answer is its UUID.",
        json_ok(UUID),
        auth="user",
        request=body(obj(("addEmailTrigger",), addEmailTrigger=STRING)),
        links={t: "$response.body" for t in ("getTrigger", "deleteTrigger", "resendVerification")},
    )
    key = path_param("key", STRING, "The verification key of the e-mail.")
    d.op("post", "/trigger/email/verify/{id}/{key}", "verifyEmailTrigger", "Verify an e-mail trigger.", empty(), auth="user", params=[path_param("id"), key])
    d.op("post", "/trigger/email/resend/{id}", "resendVerification", "Send the verification e-mail again.", empty(), auth="user", params=[path_param("id")])
    d.op(
        "get",
        "/verify-email/{id}/{key}",
        "verifyPage",
        "The page of the link in the verification e-mail (the key is the credential).",
        html() | html("400", "The link is not valid.") | html("404", "No such trigger."),
        params=[path_param("id", STRING), key],
    )
    d.op(
        "post",
        "/verify-email/{id}/{key}",
        "verifyByLink",
        "The button of the verification page.",
        html() | html("400", "The link is not valid.") | html("404", "No such trigger."),
        params=[path_param("id", STRING), key],
    )
    d.op(
        "post",
        ["/trigger/inbox", "/trigger/intray"],
        "addInboxTrigger",
        "Add an inbox trigger: `{\"Right\": <uuid>}`, or `{\"Left\": <reason>}` when the inbox refused.",
        json_ok(OBJECT),
        auth="user",
        request=body(
            obj(
                ("addInboxTriggerUrl", "addInboxTriggerUsername", "addInboxTriggerAccessKey"),
                addInboxTriggerUrl=STRING,
                addInboxTriggerUsername=STRING,
                addInboxTriggerAccessKey=STRING,
            )
        ),
    )
    return d.document()


def render(doc):
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, doc in (("inbox.json", inbox()), ("scheduler.json", scheduler())):
        path = OUT / name
        text = render(doc)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        sys.exit(f"out of date (run tools/openapi.py): {', '.join(stale)}")


if __name__ == "__main__":
    main()
