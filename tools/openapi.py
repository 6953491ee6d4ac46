#!/usr/bin/env python3
"""Writes the OpenAPI 3.1 documents of both services: assets/openapi/inbox.json and
assets/openapi/scheduler.json (served at `GET /openapi.json`, docs/api.md).

The JSON files are generated from the tables below so that the shared parts (the error
shape, the security schemes, the statuses every route can answer) are written once. Run
`tools/openapi.py` after changing a table; `tools/openapi.py --check` fails when a committed
file differs from what it would write (tests/openapi/run runs it). The documents are kept
true by tests/api/openapi.rs (every route documented, nothing else) and by the Schemathesis run
of tests/openapi/run (every answer matches the document).
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "openapi"
REFERENCE = ROOT / "docs" / "api"

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


def text(description):
    return {"type": "string", "description": description}


USERNAME = text(
    "3 to 64 characters, each `-`, `_`, or a letter or digit up to U+00FF (`A–Z`, `a–z`, `0–9`, "
    "the Latin-1 letters); compared exactly, case and all."
)
PASSWORD = text("Any non-empty string; all of it counts.")
CREDENTIALS = obj(("username", "password"), username=USERNAME, password=PASSWORD)
REGISTRATION = obj(("name", "password"), name=USERNAME, password=PASSWORD)
PASSPHRASE_CHANGE = obj(
    ("old-passphrase", "new-passphrase"),
    **{"old-passphrase": text("The current password."), "new-passphrase": PASSWORD},
)
PERMISSION_NAMES = {"type": "array", "items": STRING, "description": "Permission names (see the routes table)."}
ADD_ACCESS_KEY = obj(
    ("addAccessKeyName", "addAccessKeyPermissions"),
    addAccessKeyName=text("Any name, for you to recognise it (need not be unique)."),
    addAccessKeyPermissions={
        "type": "array",
        "items": STRING,
        "description": "The key's permissions: each must be one the caller's own credentials carry (else 401); "
        "an unknown name is 400. May be empty.",
    },
)
ACCESS_KEY_CREATED = obj(
    ("accessKeyCreatedKey", "accessKeyCreatedCreatedTimestamp", "accessKeyCreatedUUID"),
    accessKeyCreatedKey=text("The secret, 32 lower-case hex characters, shown only here: send it as `Access-Key`."),
    accessKeyCreatedCreatedTimestamp=text("When the key was made."),
    accessKeyCreatedUUID=text("The key's id."),
)
ACCESS_KEY_INFO = obj(
    ("uuid", "name", "created", "permissions"),
    uuid=STRING,
    name=STRING,
    created=STRING,
    permissions=PERMISSION_NAMES,
)
TOKEN = obj(("token",), token=STRING)
HEALTH = obj(("status",), status=STRING)
STRINGS = {"type": "array", "items": STRING}
OBJECT = {"type": "object"}
OBJECTS = {"type": "array", "items": OBJECT}


def ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema):
    return {"anyOf": [schema, {"type": "null"}]}


def strict(required, **props):
    """An answer's object: exactly these keys, all present."""
    return {"type": "object", "required": list(required), "properties": props}


COUNT = {"type": "integer", "minimum": 0}
TIMESTAMP = {
    "type": "string",
    "description": "An instant in UTC, `YYYY-MM-DDTHH:MM:SS[.F]Z` (up to 9 fraction digits). "
    "On input any RFC 3339 time with `Z` or `±HH:MM`.",
}
# Shapes both services use, by name (components.schemas).
SHARED_SCHEMAS = {
    "Timestamp": TIMESTAMP,
    "PaymentStatus": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"type": "string", "enum": ["no-payment-necessary", "paid", "not-paid"]},
            "until": {"type": "string", "description": "`paid`: paid up to this instant."},
            "items-left": {"type": "integer", "description": "`not-paid`: how many more items are free (can be 0 or negative)."},
        },
        "description": "`{\"status\":\"no-payment-necessary\"}`, `{\"status\":\"paid\",\"until\":<ts>}` or `{\"status\":\"not-paid\",\"items-left\":<n>}`.",
    },
    "Pricing": nullable(
        strict(
            ("plan", "price", "currency", "trial-period", "publishable-key", "max-items-free"),
            plan=STRING,
            price={"type": "integer", "description": "In the currency's smallest unit."},
            currency=STRING,
            **{
                "trial-period": {"type": ["integer", "null"], "description": "Days."},
                "publishable-key": STRING,
                "max-items-free": COUNT,
            },
        )
    ),
    "ActiveUsers": strict(("daily", "weekly", "monthly", "yearly"), daily=COUNT, weekly=COUNT, monthly=COUNT, yearly=COUNT),
}


def path_param(name, schema=UUID, description=None):
    out = {"name": name, "in": "path", "required": True, "schema": schema}
    if description:
        out["description"] = description
    return out


# The permissions each protected operation needs, by operationId: the one the route table
# names (the row's access in src/shell/routes.rs, src/*/routes.rs) first, then what the
# handler also reads or writes (its `.and(&[...])`). tests/api/openapi.rs checks them against
# those tables.
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
    "addPushTrigger": ("PermitAddTrigger",),
    "addWebhookTrigger": ("PermitAddTrigger",),
    "verifyEmailTrigger": ("PermitVerifyTrigger",),
    "resendVerification": ("PermitResendVerification",),
}


class Doc:
    def __init__(self, title, description, permissions, schemas):
        self.paths = {}
        self.schemas = SHARED_SCHEMAS | schemas
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
                    },
                    **self.schemas,
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
    d.op("get", "/pricing", "pricing", "The price of a subscription, or null when the server is free.", json_ok(ref("Pricing")))
    d.op("get", "/permissions", "permissions", "The caller's permission names.", json_ok(STRINGS), auth="user")
    d.op("get", "/account", "getAccount", "The caller's account.", json_ok(ref("AccountInfo")), auth="user")
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
    d.op("get", "/admin/stats", "adminStats", "Statistics of the server.", json_ok(ref("AdminStats")), auth="admin")
    d.op(
        "get",
        "/admin/accounts",
        "adminAccounts",
        "Every account: the latest login first, those that never logged in last.",
        json_ok({"type": "array", "items": ref("AccountInfo")}),
        auth="admin",
    )
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


INBOX_SCHEMAS = {
    "Contents": {
        "type": "object",
        "required": ["type", "data"],
        "properties": {
            "type": {"type": "string", "enum": ["text", "image/jpeg", "image/png"]},
            "data": {"type": "string", "description": "The bytes in padded standard base64."},
        },
    },
    "Item": strict(("id", "contents", "created"), id=UUID, contents=ref("Contents"), created=ref("Timestamp")),
    "AccountInfo": strict(
        ("uuid", "username", "created", "last-login", "admin", "count", "status"),
        uuid=UUID,
        username=STRING,
        created=ref("Timestamp"),
        admin={"type": "boolean"},
        count=COUNT,
        status=ref("PaymentStatus"),
        **{"last-login": {"type": ["string", "null"], "description": "The latest successful login; null before the first."}},
    ),
    "AdminStats": strict(
        ("accounts", "items", "active-users", "subscribed-users"),
        accounts=COUNT,
        items=COUNT,
        **{"active-users": ref("ActiveUsers"), "subscribed-users": COUNT},
    ),
    "SyncRequest": {
        "type": "object",
        "properties": {
            "added": {
                "type": "object",
                "description": "Items the client made, by a key of the client's choice.",
                "additionalProperties": obj(("contents", "created"), contents=ref("Contents"), created=ref("Timestamp")),
            },
            "synced": {"type": "array", "items": UUID, "description": "The ids the client has."},
            "deleted": {"type": "array", "items": UUID, "description": "The ids the client deleted."},
        },
    },
    "SyncResponse": strict(
        ("client-added", "client-deleted", "server-added", "server-deleted"),
        **{
            "client-added": {"type": "object", "additionalProperties": UUID, "description": "The id given to each added item, by the client's key."},
            "client-deleted": {"type": "array", "items": UUID},
            "server-added": {
                "type": "object",
                "additionalProperties": strict(("contents", "created"), contents=ref("Contents"), created=ref("Timestamp")),
                "description": "Items the client does not have yet, by id.",
            },
            "server-deleted": {"type": "array", "items": UUID, "description": "Ids the client has that are gone."},
        },
    ),
}


def inbox():
    d = Doc(
        "Pigeonhole inbox service",
        "The inbox (an Intray-compatible API): capture anything, process it later. "
        "Every `/inbox/...` path also answers as `/intray/...`. Errors are `{\"error\": \"...\"}`. "
        "Protected routes take a bearer token or the `Username` + `Access-Key` headers; "
        "the permissions a route needs are its `x-permissions`. `HEAD` answers as `GET`.",
        INBOX_PERMISSIONS,
        INBOX_SCHEMAS,
    )
    common(d, "inbox")
    both = lambda p: [f"/inbox{p}", f"/intray{p}"]
    d.op("post", "/account", "changePassphraseOld", "Change the passphrase (the older path).", empty("204"), auth="user", request=body(PASSPHRASE_CHANGE), errors=(403,))
    d.op("post", "/account/change-passphrase", "changePassphrase", "Change the passphrase.", empty("204"), auth="user", request=body(PASSPHRASE_CHANGE), errors=(403,))
    d.op("delete", "/account", "deleteAccount", "Delete the caller's account.", empty("204"), auth="user")
    item = ref("Contents")
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
    d.op("get", both("/item/{id}"), "getItem", "One item.", json_ok(ref("Item")), auth="user", params=[path_param("id")])
    d.op("delete", both("/item/{id}"), "deleteItem", "Delete an item.", empty(), auth="user", params=[path_param("id")])
    d.op("get", both("/items"), "items", "Every item, oldest first.", json_ok({"type": "array", "items": ref("Item")}), auth="user")
    d.op("get", both("/uuids"), "uuids", "The UUIDs of the items.", json_ok(STRINGS), auth="user")
    d.op("get", both("/show-item"), "showItem", "The oldest item, or null.", json_ok(nullable(ref("Item"))), auth="user")
    d.op("get", both("/size"), "size", "How many items.", json_ok({"type": "integer", "minimum": 0}), auth="user")
    d.op("post", both("/sync"), "sync", "Synchronise a client's items.", json_ok(ref("SyncResponse")), auth="user", request=body(ref("SyncRequest")), errors=(402,))
    return d.document()


DAY = {"type": "string", "description": "`YYYY-MM-DD`, a real calendar date."}
TIME_OF_DAY = {
    "type": ["string", "null"],
    "description": "`HH:MM`, `HH:MM:SS` or `HH:MM:SS.f…` (two digits each); answered as `HH:MM:SS[.F]`; null = none.",
}
RECURRENCE = {
    "description": "Exactly one of `every-x-days` and `every-x-months`.",
    "oneOf": [
        obj(
            ("every-x-days",),
            **{"every-x-days": obj(("days",), days={"type": "integer", "minimum": 1, "maximum": 4294967295}, **{"time-of-day": TIME_OF_DAY})},
        ),
        obj(
            ("every-x-months",),
            **{
                "every-x-months": obj(
                    ("months",),
                    months={"type": "integer", "minimum": 1, "maximum": 4294967295},
                    day={"type": ["integer", "null"], "minimum": 1, "maximum": 31},
                    **{"time-of-day": TIME_OF_DAY},
                )
            },
        ),
    ],
}
TICKLE_CONTENT = {
    "description": "A text: a JSON string, or `{\"type\": \"text\", \"data\": <base64>}` for bytes that are not UTF-8.",
    "anyOf": [STRING, obj(("type", "data"), type={"const": "text"}, data=STRING)],
}
SCHEDULER_SCHEMAS = {
    "Recurrence": RECURRENCE,
    "Tickle": obj(
        ("content", "scheduled-day"),
        content=TICKLE_CONTENT,
        **{
            "scheduled-day": DAY,
            "scheduled-time": TIME_OF_DAY,
            "recurrence": nullable(ref("Recurrence")),
        },
    ),
    "TriggerAttempt": strict(
        ("tag", "contents"),
        tag={"type": "string", "enum": ["InboxTriggerAttempt", "EmailTriggerAttempt", "PushTriggerAttempt", "WebhookTriggerAttempt"]},
        contents={
            "type": "array",
            "description": "`[<trigger uuid>, {\"tag\": InboxAdditionSuccess (contents: the new inbox item's uuid) | InboxAdditionFailure (contents: the reason) | EmailResultSent | EmailResultError (contents: the reason) | PushResultSent | PushResultError (contents: the reason) | WebhookResultSent | WebhookResultError (contents: the reason)}]`",
        },
    ),
    "Triggered": strict(
        ("triggeredInfoTriggered", "triggeredInfoTriggerTriggerAttempts"),
        triggeredInfoTriggered=ref("Timestamp"),
        triggeredInfoTriggerTriggerAttempts={"type": "array", "items": ref("TriggerAttempt"), "description": "Finished deliveries: inbox ones first, then e-mail, push and webhook ones."},
    ),
    "Item": strict(
        ("id", "contents", "created", "triggered"),
        id=UUID,
        contents=ref("Tickle"),
        created=ref("Timestamp"),
        triggered=nullable(ref("Triggered")),
    ),
    "Trigger": strict(
        ("uuid", "info"),
        uuid=UUID,
        info=strict(
            ("typedTriggerInfoType", "typedTriggerInfoValue"),
            typedTriggerInfoType={"type": "string", "enum": ["email", "inbox", "push", "webhook"]},
            typedTriggerInfoValue={
                "type": "object",
                "description": "`{\"emailTriggerInfoEmailAddress\": <address>, \"emailTriggerInfoVerified\": <bool>}`, `{\"inboxTriggerInfoUrl\": <url>}`, `{\"pushTriggerInfoHost\": <host>, \"pushTriggerInfoExpired\": <bool>}` or `{\"webhookTriggerInfoUrl\": <url, its query shown as ?…>, \"webhookTriggerInfoFormat\": \"text\" | \"json\"}`; an inbox trigger's username and key, a push subscription's endpoint and keys and a webhook's query are never shown.",
            },
        ),
    ),
    "Settings": obj(
        ("timezone",),
        timezone=obj(
            ("offset", "name", "summer"),
            offset={"type": "integer", "minimum": -1439, "maximum": 1439, "description": "Minutes east of UTC."},
            name={"type": "string", "description": "An IANA name (`Europe/Zurich`) makes the zone's daylight saving rules apply; any other text leaves `offset` in charge."},
            summer={"type": "boolean", "description": "Informative only."},
        ),
    ),
    "AccountInfo": strict(
        ("uuid", "username", "created", "last-login", "admin", "scheduler-item-count", "triggered-item-count", "status"),
        uuid=UUID,
        username=STRING,
        created=ref("Timestamp"),
        admin={"type": "boolean"},
        status=ref("PaymentStatus"),
        **{
            "last-login": {"type": ["string", "null"]},
            "scheduler-item-count": COUNT,
            "triggered-item-count": COUNT,
        },
    ),
    "AdminStats": strict(
        ("users", "subscribers", "scheduler-items", "triggered-items", "active-users"),
        users=COUNT,
        subscribers=COUNT,
        **{"scheduler-items": COUNT, "triggered-items": COUNT, "active-users": ref("ActiveUsers")},
    ),
    "SyncRequest": obj(
        ("syncRequestTickles",),
        syncRequestTickles={
            "type": "object",
            "description": "`added` {client key: {contents, created}}, `synced` {uuid: server time}, "
            "`changed` {uuid: {value: {contents, created}, time}}, `deleted` {uuid: server time}; each optional.",
        },
    ),
    "SyncResponse": strict(
        ("syncResponseTickles",),
        syncResponseTickles={
            "type": "object",
            "description": "Only the parts with something to say, of `client-added`, `client-changed`, `client-deleted`, "
            "`server-added`, `server-changed`, `server-deleted`, `conflict`, `conflict-client-deleted`, `conflict-server-deleted`.",
        },
    ),
    "Looper": strict(
        ("looperInfoStatus", "looperInfoPeriod", "looperInfoRetryDelay", "looperInfoRetryAmount"),
        looperInfoStatus=obj(("tag",), tag={"type": "string", "enum": ["LooperStatusRunning", "LooperStatusDisabled", "LooperStatusErrored"]}),
        looperInfoPeriod={"type": ["integer", "null"], "description": "Seconds."},
        looperInfoRetryDelay={"type": ["integer", "null"], "description": "Microseconds."},
        looperInfoRetryAmount={"type": ["integer", "null"]},
    ),
}


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
        SCHEDULER_SCHEMAS,
    )
    common(d, "scheduler")
    both = lambda p: [f"/scheduler{p}", f"/tickler{p}"]
    d.op("get", "/loopers", "loopers", "The status of the ten background workers, by name.", json_ok({"type": "object", "additionalProperties": ref("Looper")}))
    d.op("post", "/", "changePassphrase", "Change the passphrase.", empty("204"), auth="user", request=body(PASSPHRASE_CHANGE), errors=(403,))
    d.op("delete", "/account", "deleteAccount", "Delete the caller's account.", empty(), auth="user")
    d.op("get", "/account/settings", "getSettings", "The account's settings: its time zone.", json_ok(ref("Settings")), auth="user")
    d.op("put", "/account/settings", "putSettings", "Replace the account's settings.", empty(), auth="user", request=body(ref("Settings")))
    d.op("post", both("/item"), "addItem", "Schedule an item; the answer is its UUID.", json_ok(UUID), auth="user", request=body(ref("Tickle")), errors=(402,), links={t: "$response.body" for t in ("getItem", "editItem", "deleteItem")})
    d.op("get", both("/item/info/{id}"), "getItem", "One item, scheduled or triggered.", json_ok(ref("Item")), auth="user", params=[path_param("id")])
    d.op("post", both("/item/info/{id}"), "editItem", "Change an item that has not triggered.", empty(), auth="user", request=body(ref("Tickle")), params=[path_param("id")])
    d.op("delete", both("/item/delete/{id}"), "deleteItem", "Delete an item.", empty(), auth="user", params=[path_param("id")])
    d.op("post", both("/item/delete-triggereds"), "deleteTriggereds", "Delete the items that have triggered.", empty(), auth="user")
    d.op("post", both("/item/retry"), "retry", "Retry the failed triggers of these items.", empty(), auth="user", request=body({"type": "array", "items": UUID}))
    d.op(
        "get",
        both("/items"),
        "items",
        "The items: scheduled ones, then triggered ones; `filter` is `onlyuntriggered` or `onlytriggered` for one kind.",
        json_ok({"type": "array", "items": ref("Item")}),
        auth="user",
        params=[{"name": "filter", "in": "query", "required": False, "schema": STRING}],
    )
    d.op("get", both("/uuids"), "uuids", "The UUIDs of the items.", json_ok(STRINGS), auth="user")
    d.op("post", "/sync", "sync", "Synchronise a client's scheduled items.", json_ok(ref("SyncResponse")), auth="user", request=body(ref("SyncRequest")), errors=(402,))
    d.op("get", "/trigger", "triggers", "The triggers.", json_ok({"type": "array", "items": ref("Trigger")}), auth="user")
    d.op("get", "/trigger/info/{id}", "getTrigger", "One trigger.", json_ok(ref("Trigger")), auth="user", params=[path_param("id")])
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
    d.op(
        "get",
        "/push/key",
        "pushKey",
        "The server's Web Push application server key (VAPID): base64url of the uncompressed P-256 point, for `pushManager.subscribe({applicationServerKey})`.",
        json_ok(strict(("publicKey",), publicKey=STRING)),
    )
    d.op(
        "post",
        "/trigger/push",
        "addPushTrigger",
        "Add a push trigger from a browser's `PushSubscription.toJSON()` (an https endpoint; the same endpoint again renews its trigger); the answer is its UUID. At most 20 per account (429).",
        json_ok(UUID),
        auth="user",
        request=body(
            obj(
                ("endpoint", "keys"),
                endpoint=STRING,
                expirationTime=ANY,
                keys=obj(("p256dh", "auth"), p256dh=STRING, auth=STRING),
            )
        ),
        links={t: "$response.body" for t in ("getTrigger", "deleteTrigger")},
    )
    d.op(
        "post",
        "/trigger/webhook",
        "addWebhookTrigger",
        "Add a webhook trigger (`text`: ntfy; `json`: Gotify and chat bridges); the answer is its UUID.",
        json_ok(UUID),
        auth="user",
        request=body(
            obj(
                ("addWebhookTriggerUrl",),
                addWebhookTriggerUrl=STRING,
                addWebhookTriggerFormat={"type": "string", "enum": ["text", "json"]},
            )
        ),
        links={t: "$response.body" for t in ("getTrigger", "deleteTrigger")},
    )
    return d.document()


def type_of(schema):
    """A schema as a short type in words, with links to the named shapes."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(type_of(s) for s in schema.get("anyOf", schema.get("oneOf")))
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    t = schema.get("type")
    if isinstance(t, list):
        return " or ".join(type_of({**schema, "type": x}) for x in t)
    if t == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if t == "object" and "additionalProperties" in schema:
        return f"object of {type_of(schema['additionalProperties'])}"
    if t == "string" and schema.get("format") == "uuid":
        return "UUID"
    if t == "string" and "enum" in schema:
        return " \\| ".join(f"`{json.dumps(e)}`" for e in schema["enum"])
    if t == "integer" and ("minimum" in schema or "maximum" in schema):
        lo, hi = schema.get("minimum", "…"), schema.get("maximum", "…")
        return f"integer ({lo} to {hi})"
    return t or "any JSON"


def fields(schema):
    """The rows of an object's field table, or None."""
    props = schema.get("properties")
    if not props:
        return None
    required = set(schema.get("required", ()))
    rows = ["| Field | Type | Required | Meaning |", "|---|---|---|---|"]
    for name, sub in props.items():
        meaning = sub.get("description", "")
        if sub.get("properties") and "$ref" not in sub:
            inner = ", ".join(f"`{k}` ({type_of(v)})" for k, v in sub["properties"].items())
            meaning = (meaning + " " if meaning else "") + f"An object: {inner}."
        meaning = meaning.replace("|", "\\|")
        rows.append(f"| `{name}` | {type_of(sub)} | {'yes' if name in required else 'no'} | {meaning} |")
    return rows


def markdown(doc, name, json_path):
    """The reference of one service in prose, from its document: docs/api/<name>.md."""
    out = [
        f"# {doc['info']['title']}: the reference",
        "",
        f"<!-- written by tools/openapi.py from {json_path}: edit the tables there, not this file -->",
        "",
        doc["info"]["description"],
        "",
        f"The same in OpenAPI 3.1: [{json_path}](../../{json_path}), served at `GET /openapi.json`. "
        "How to read both, and how to call a protected route: [the API overview](../api.md).",
        "",
        "## Routes",
        "",
        "| Method | Path | Permissions | What it does |",
        "|---|---|---|---|",
    ]
    ops = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if "Alias" in op["operationId"]:
                continue
            ops.append((path, method, op))
    aliases = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if "Alias" in op["operationId"]:
                aliases.setdefault(op["operationId"].split("Alias")[0], []).append(path)

    def permissions(op):
        if not op["security"]:
            return "public"
        names = ", ".join(f"`{p}`" for p in op["x-permissions"])
        return names + (" (admins only)" if op.get("x-admin-only") else "")

    for path, method, op in ops:
        anchor = op["operationId"].lower()
        out.append(f"| {method.upper()} | [`{path}`](#{anchor}) | {permissions(op)} | {op['summary']} |")
    out += ["", "## Each route", ""]
    for path, method, op in ops:
        out += [f"<a id=\"{op['operationId'].lower()}\"></a>", f"### `{method.upper()} {path}`", ""]
        out += [op["summary"], ""]
        if op["operationId"] in aliases:
            out += ["Also answered at " + ", ".join(f"`{a}`" for a in aliases[op["operationId"]]) + ".", ""]
        if op.get("description"):
            out += [op["description"], ""]
        if op["security"]:
            out.append(f"- **Credentials**: a bearer token or `Username` + `Access-Key`, carrying {permissions(op)}.")
        else:
            out.append("- **Credentials**: none.")
        for p in op.get("parameters", ()):
            where = {"path": "in the path", "query": "query parameter", "header": "header"}[p["in"]]
            extra = f": {p['description']}" if p.get("description") else ""
            out.append(f"- `{p['name']}` ({where}, {type_of(p['schema'])}{'' if p.get('required') else ', optional'}){extra}")
        if "requestBody" in op:
            (ctype, media), = op["requestBody"]["content"].items()
            out.append(f"- **Body** (`{ctype}`): {type_of(media['schema'])}.")
            rows = fields(media["schema"])
            if rows:
                out += [""] + ["  " + r for r in rows] + [""]
        for status, response in op["responses"].items():
            if int(status) >= 400:
                continue
            content = response.get("content") or {}
            shape, rows = "", None
            if "application/json" in content:
                schema = content["application/json"]["schema"]
                shape = f" JSON: {type_of(schema)}."
                rows = fields(schema)
            description = response["description"].rstrip(".") + "."
            out.append(f"- **{status}**: {description}{shape}")
            if rows:
                out += [""] + ["  " + r for r in rows] + [""]
        errors = sorted(int(s) for s in op["responses"] if int(s) >= 400)
        out.append("- **Errors**: " + ", ".join(f"[{s}](#errors)" for s in errors) + ".")
        out.append("")
    out += ["## Shapes", ""]
    for shape, schema in doc["components"]["schemas"].items():
        out += [f"### {shape}", ""]
        if schema.get("description"):
            out += [schema["description"], ""]
        rows = fields(schema)
        if rows:
            out += rows + [""]
        elif not schema.get("description") or "anyOf" in schema or "oneOf" in schema:
            out += [f"{type_of(schema) if '$ref' not in schema else ''}".strip() or "Any JSON.", ""]
            for alt in schema.get("anyOf", schema.get("oneOf", ())):
                rows = fields(alt)
                if rows:
                    out += rows + [""]
    out += [
        "## Errors",
        "",
        "Every answer with a status of 400 or above has the body `{\"error\": \"<reason>\"}` (a "
        "human-readable reason; its wording may change). What each status means:",
        "",
        "| Status | Meaning |",
        "|---|---|",
    ]
    used = sorted({int(s) for item in doc["paths"].values() for op in item.values() for s in op["responses"] if int(s) >= 400})
    for status in used:
        if status in REASONS:
            out.append(f"| {status} | {REASONS[status]} |")
    return "\n".join(out) + "\n"


def render(doc):
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, doc in (("inbox", inbox()), ("scheduler", scheduler())):
        json_path = OUT / f"{name}.json"
        for path, text in (
            (json_path, render(doc)),
            (REFERENCE / f"{name}.md", markdown(doc, name, str(json_path.relative_to(ROOT)))),
        ):
            if check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path.relative_to(ROOT)))
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if stale:
        sys.exit(f"out of date (run tools/openapi.py): {', '.join(stale)}")


if __name__ == "__main__":
    main()
