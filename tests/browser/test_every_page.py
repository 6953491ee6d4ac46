"""Every page of both services, logged out and logged in with data of every kind (inbox
items, scheduled items with recurrence, triggered items with delivered and failed attempts,
inbox and e-mail triggers, access keys), in the states a person meets (a "Later…" panel
open, an undo offered, a delete asking, a new key's secret shown, an item being edited): no page shows the
text `null`, `undefined` or `[object` (issue 27: every triggered item showed a `null`), no
time field asks for seconds, and axe-core finds no violation, at phone and desktop widths,
in light and dark mode. The same pages, with realistic content, are photographed into
target/screenshots/docs/ for docs/screenshots/ (no test payloads in the pictures)."""

import base64
import json
import os
import re
import time
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from conftest import SCREENSHOTS
from test_push_service import PushService, Subscriber, due_a_minute_ago
from test_web import (
    DELIVERY_WAIT,
    WAIT,
    fill,
    register,
    submit,
    token_of,
    verification_key,
    wait,
    wait_text,
)

AXE_JS = Path(os.environ.get("AXE_JS", Path(__file__).resolve().parents[2] / "target/browser-tools/node_modules/axe-core/axe.min.js"))
DOCS_SHOTS = SCREENSHOTS / "docs"

# (label, width, height, mobile, colour scheme)
VARIANTS = (
    ("phone", 390, 844, True, "light"),
    ("desktop", 1280, 800, False, "light"),
    ("phone-dark", 390, 844, True, "dark"),
    ("desktop-dark", 1280, 800, False, "dark"),
)

# words a page shows when a script wrote a missing value or an object as text
BROKEN_WORDS = re.compile(r"\bnull\b|\bundefined\b|\[object|\bNaN\b")


def send(base, method, path, token=None, body=None):
    """One call of the API (bearer `token`), the parsed JSON answer or None."""
    headers = {}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def sibling_token_of(driver):
    return driver.execute_script("return localStorage.getItem('pigeonhole-sibling-token')")


def settled(driver, ready=None, timeout=WAIT):
    """Waits until the page is loaded, its requests answered (nothing `aria-busy`) and, when
    given, `ready` (a CSS selector of an element with text) is drawn."""

    def done(d):
        if d.execute_script("return document.readyState") != "complete":
            return False
        if d.execute_script("return document.querySelector('[aria-busy=true]') !== null"):
            return False
        if ready is None:
            return True
        return any(e.text.strip() for e in d.find_elements(By.CSS_SELECTOR, ready))

    wait(driver, timeout).until(done)


def broken_text(driver):
    """What of the page's visible text, labels, titles and field values reads `null`,
    `undefined`, `[object …` or `NaN`."""
    texts = driver.execute_script(
        """
        const out = [document.title, document.body.innerText];
        for (const e of document.querySelectorAll('[aria-label], [title], [placeholder], [alt], input, option')) {
          for (const a of ['aria-label', 'title', 'placeholder', 'alt']) if (e.hasAttribute(a)) out.push(e.getAttribute(a));
          if (e.matches('input:not([type=password]), option') && e.value) out.push(e.value);
        }
        return out;
        """
    )
    return [t[max(0, m.start() - 60):m.end() + 60] for t in texts for m in BROKEN_WORDS.finditer(t)]


def seconds_asked(driver):
    """The time fields that ask for seconds: every one takes minutes (`step="60"`, a value
    HH:MM), issue 27."""
    fields = driver.execute_script(
        "return [...document.querySelectorAll('input[type=time]')].map((i) => [i.id, i.getAttribute('step'), i.value])"
    )
    return [f for f in fields if f[1] != "60" or not re.fullmatch(r"(\d\d:\d\d)?", f[2])]


def axe_violations(driver):
    """axe-core's violations of the current page (every rule it runs by default), as
    `rule: what (nodes)` lines."""
    if not driver.execute_script("return typeof window.axe === 'object'"):
        driver.execute_script(AXE_JS.read_text())
    driver.set_script_timeout(60)
    found = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        axe.run(document, {resultTypes: ['violations']})
          .then((r) => done(r.violations.map((v) => v.id + ': ' + v.help + ' (' +
            v.nodes.map((n) => n.target.join(' ') + ' ' + (n.any[0]?.message || n.all[0]?.message || '')).join('; ') + ')')))
          .catch((e) => done(['axe failed: ' + e]));
        """
    )
    return found


def look(driver, page, shot=None, ready=None, words=True, scroll=None):
    """The checks of one page in its current state, at each width and colour scheme:
    nothing reads `null`/`undefined`, axe finds nothing. With `shot`, the light pictures go
    to target/screenshots/docs/<shot>-phone.png and -desktop.png. `words=False` for the
    API description at `/`, whose JSON examples say `null` on purpose; `scroll` (CSS) is
    brought into view for the pictures."""
    settled(driver, ready)
    problems = []
    try:
        for label, width, height, mobile, scheme in VARIANTS:
            driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
            )
            driver.execute_cdp_cmd(
                "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
            )
            driver.execute_script("return document.body.getBoundingClientRect().height")
            if scroll:
                driver.execute_script("document.querySelector(arguments[0]).scrollIntoView({block: 'center'})", scroll)
            for text in broken_text(driver) if words else []:
                problems.append(f"{page} ({label}) shows {text!r}")
            for field in seconds_asked(driver):
                problems.append(f"{page} ({label}) time field [id, step, value] {field} asks for seconds")
            for violation in axe_violations(driver):
                problems.append(f"{page} ({label}) axe: {violation}")
            if shot and scheme == "light":
                DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
                driver.execute_script("document.activeElement && document.activeElement.blur && document.activeElement.blur()")
                driver.save_screenshot(str(DOCS_SHOTS / f"{shot}-{label}.png"))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        # axe's own console lines stay out of the CSP test's reading of the console
        driver.get_log("browser")
    return problems


def until(predicate, timeout=WAIT, what="a condition"):
    """Polls `predicate` until it answers something true, with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def attempts_of(server, token, text):
    items = send(server["scheduler"], "GET", "/scheduler/items?filter=onlytriggered", token)
    for item in items:
        if item["contents"]["content"] == text:
            return [a["contents"][1]["tag"] for a in item["triggered"]["triggeredInfoTriggerTriggerAttempts"]]
    return None


def populate(server, driver, name, password, address):
    """An account as a person would have it after a few days: registered in the pages, an
    e-mail trigger confirmed from its e-mail's link, reminders that came due (one delivered
    to the inbox and by e-mail, one whose inbox delivery failed), reminders to come, notes in
    the inbox and an access key for a phone. Answers both tokens."""
    inbox, scheduler = server["inbox"], server["scheduler"]
    register(driver, inbox, name, password)
    inbox_token, scheduler_token = token_of(driver), sibling_token_of(driver)
    assert scheduler_token, "registering on the inbox's page signs in to the scheduler too"
    send(scheduler, "POST", "/trigger/email", scheduler_token, {"addEmailTrigger": address})
    key = verification_key(server["outbox"], 1, address)
    email = [t for t in send(scheduler, "GET", "/trigger", scheduler_token) if t["info"]["typedTriggerInfoType"] == "email"][0]
    # the e-mail's link, as the person opens it: the page asks, its button confirms
    driver.get(f"{scheduler}/verify-email/{email['uuid']}/{key}")
    wait(driver).until(EC.element_to_be_clickable((By.CSS_SELECTOR, "form button[type=submit]")))
    problems = look(driver, "scheduler /verify-email (asking)")
    # found again: the emulated widths may have laid the page out anew
    wait(driver).until(EC.element_to_be_clickable((By.CSS_SELECTOR, "form button[type=submit]"))).click()
    wait(driver).until(EC.text_to_be_present_in_element((By.TAG_NAME, "h1"), "Address confirmed"))
    problems += look(driver, "scheduler /verify-email (confirmed)")

    zone = send(scheduler, "GET", "/account/settings", scheduler_token)["timezone"]["name"]
    today = datetime.now(ZoneInfo(zone)).date()
    # a reminder that came due: delivered into the inbox and e-mailed
    send(scheduler, "POST", "/scheduler/item", scheduler_token,
         {"content": "Take the recycling out", "scheduled-day": str(today - timedelta(days=1)), "scheduled-time": "19:00", "recurrence": None})
    until(lambda: sorted(attempts_of(server, scheduler_token, "Take the recycling out") or []) == ["EmailResultSent", "InboxAdditionSuccess"],
          DELIVERY_WAIT, "the first reminder's deliveries")
    # one whose inbox delivery fails: the trigger's inbox key is gone
    keys = send(inbox, "GET", "/access-key", inbox_token)
    for k in keys:
        if k["name"] == "scheduler deliveries":
            send(inbox, "DELETE", "/access-key/" + k["uuid"], inbox_token)
    send(scheduler, "POST", "/scheduler/item", scheduler_token,
         {"content": "Send the tax papers to Sam", "scheduled-day": str(today), "scheduled-time": "00:00", "recurrence": None})

    def failed():
        items = send(scheduler, "GET", "/scheduler/items?filter=onlytriggered", scheduler_token)
        for item in items:
            if item["contents"]["content"] == "Send the tax papers to Sam":
                results = [a["contents"][1] for a in item["triggered"]["triggeredInfoTriggerTriggerAttempts"]]
                return any(r["tag"] == "InboxAdditionFailure" for r in results) and len(results) == 2
        return False

    until(failed, DELIVERY_WAIT, "the second reminder's failed delivery")
    # reminders to come
    for content, day, at, recurrence in (
        ("Pay the electricity bill", today + timedelta(days=9), "08:00", {"every-x-months": {"months": 1, "day": 28, "time-of-day": "08:00"}}),
        ("Water the balcony plants", today + timedelta(days=1), "07:30", {"every-x-days": {"days": 3, "time-of-day": "07:30"}}),
        ("Order flowers for Ana's birthday", today + timedelta(days=12), "10:00", None),
        ("Renew the passport", today + timedelta(days=40), None, None),
    ):
        send(scheduler, "POST", "/scheduler/item", scheduler_token,
             {"content": content, "scheduled-day": str(day), "scheduled-time": at, "recurrence": recurrence})
    # notes in the inbox, oldest first (the delivered reminder is already there)
    for note in (
        "Ask Sam about the bike rack",
        "Lentil soup recipe https://example.org/recipes/lentil-soup",
        "Book the dentist for March",
        "Gift idea for Ana: the blue ceramic teapot",
    ):
        send(inbox, "POST", "/inbox/item", inbox_token, {"type": "text", "data": base64.b64encode(note.encode()).decode()})
    send(inbox, "POST", "/access-key", inbox_token, {"addAccessKeyName": "Phone shortcut", "addAccessKeyPermissions": ["PermitAdd"]})
    return inbox_token, scheduler_token, problems


def test_no_page_shows_null_and_axe_finds_nothing(server, driver):
    # a browser in Berlin: registering gives the account its zone, as the pictures show
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Europe/Berlin"})
    try:
        every_page(server, driver)
    finally:
        driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})


def every_page(server, driver):
    inbox, scheduler = server["inbox"], server["scheduler"]
    problems = []

    # logged out
    driver.get(inbox + "/app/login")
    driver.execute_script("localStorage.clear()")
    for base, service in ((inbox, "inbox"), (scheduler, "scheduler")):
        driver.get(base + "/")
        problems += look(driver, service + " /", words=False)
        driver.get(base + "/app/login")
        wait(driver).until(EC.visibility_of_element_located((By.ID, "register")))
        problems += look(driver, service + " /app/login", shot=service + "-login", ready="#title")
        driver.get(base + "/app/notifications")
        problems += look(driver, service + " /app/notifications (logged out)", ready="#nav li")

    inbox_token, scheduler_token, seen = populate(server, driver, "maria", "tea-and-lentils", "maria@example.org")
    problems += seen

    # the inbox
    driver.get(inbox + "/app/")
    wait_text(driver, "#count", "(5)")
    problems += look(driver, "inbox /app/", shot="inbox", ready="#items li")
    # "Notify me on this device" at the bottom of the page
    problems += look(driver, "inbox /app/ (notifications)", shot="inbox-push", ready="#push-subscribe", scroll="#push")
    first = "//div[@id='current-item']"
    later = driver.find_elements(By.XPATH, first + "//button[text()='Later…']")
    if later:
        later[0].click()
        wait(driver).until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#current-item .later")))
        problems += look(driver, "inbox /app/ (Later… open)", shot="inbox-later", ready="#current-item .later")
        driver.find_element(By.XPATH, first + "//button[text()='Later…']").click()
    # Done, with its undo offered
    driver.find_element(By.XPATH, first + "//button[text()='Done']").click()
    wait(driver).until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#undo .undo-button")))
    problems += look(driver, "inbox /app/ (undo offered)", shot="inbox-undo", ready="#undo")
    driver.find_element(By.CSS_SELECTOR, "#undo .undo-button").click()
    wait_text(driver, "#count", "(5)")
    row = "//ul[@id='items']/li[contains(., 'Ask Sam')]"
    driver.find_element(By.XPATH, row + "//button[text()='Delete']").click()
    problems += look(driver, "inbox /app/ (delete asking)", ready=".confirm-yes")
    driver.find_element(By.XPATH, row + "//button[text()='Cancel']").click()
    driver.get(inbox + "/app/share?title=Lentil%20soup&url=https%3A%2F%2Fexample.org%2Frecipes%2Flentil-soup")
    problems += look(driver, "inbox /app/share", ready="#nav li")
    driver.get(inbox + "/app/notifications")
    problems += look(driver, "inbox /app/notifications", shot="notifications", ready="#nav li")
    driver.get(inbox + "/app/settings")
    wait_text(driver, "#keys", "Phone shortcut")
    problems += look(driver, "inbox /app/settings", ready="#keys li")
    fill(driver, "#key-name", "Laptop capture")
    submit(driver, "#add-key")
    wait(driver).until(EC.visibility_of_element_located((By.ID, "new-key")))
    problems += look(driver, "inbox /app/settings (new key)", shot="inbox-settings-keys", ready="#new-key-secret", scroll="#new-key")

    # the scheduler, signed in through the navigation's link
    driver.get(inbox + "/app/settings")
    link = wait(driver).until(EC.element_to_be_clickable((By.ID, "to-sibling")))
    link.click()
    wait(driver).until(EC.visibility_of_element_located((By.ID, "handoff-continue")))
    problems += look(driver, "scheduler /app/login (handoff)", ready="#handoff-who")
    driver.find_element(By.ID, "handoff-continue").click()
    wait(driver).until(lambda d: "/app/login" not in d.current_url)
    wait_text(driver, "#count", "(4)")
    problems += look(driver, "scheduler /app/", shot="scheduler", ready="#items li")
    driver.find_element(By.CSS_SELECTOR, "#items button[aria-label='Edit “Pay the electricity bill”']").click()
    wait_text(driver, "#item-title", "Edit the item")
    problems += look(driver, "scheduler /app/ (editing)")
    driver.find_element(By.ID, "item-cancel").click()
    driver.get(scheduler + "/app/triggered")
    wait_text(driver, "#items", "Failed for", timeout=DELIVERY_WAIT)
    problems += look(driver, "scheduler /app/triggered", shot="scheduler-triggered", ready="#items li")
    driver.find_element(By.ID, "delete-all").click()
    wait(driver).until(EC.visibility_of_element_located((By.CSS_SELECTOR, ".confirm-yes")))
    problems += look(driver, "scheduler /app/triggered (delete all asking)", shot="scheduler-triggered-confirm")
    # her phone gets notifications (this browser is the phone of the picture), ntfy on the
    # tablet and Gotify at home: added now, so the reminders above went elsewhere
    phone = send(scheduler, "POST", "/trigger/push", scheduler_token, Subscriber().subscription(
        "https://fcm.googleapis.com/fcm/send/eYq3Kd0Rm1A:APA91bHPRgkFLJu0yH7UNVh0Cw"))
    send(scheduler, "POST", "/trigger/webhook", scheduler_token,
         {"addWebhookTriggerUrl": "https://ntfy.sh/pigeonhole-q7m2x9k4w8bz", "addWebhookTriggerFormat": "text"})
    send(scheduler, "POST", "/trigger/webhook", scheduler_token,
         {"addWebhookTriggerUrl": "https://gotify.home.example.org/message?token=AQkR2v9nQm4", "addWebhookTriggerFormat": "json"})
    driver.get(scheduler + "/app/config.json")
    driver.execute_script("localStorage.setItem('pigeonhole-push-trigger', arguments[0])", phone)
    driver.get(scheduler + "/app/triggers")
    wait_text(driver, "#triggers", "Push to fcm.googleapis.com")
    problems += look(driver, "scheduler /app/triggers", shot="scheduler-triggers", ready="#triggers li")
    driver.get(scheduler + "/app/notifications")
    problems += look(driver, "scheduler /app/notifications", ready="#nav li")
    driver.get(scheduler + "/app/settings")
    problems += look(driver, "scheduler /app/settings", shot="scheduler-settings", ready="#zone-current")

    problems += push_and_webhook_results(server, driver)
    assert problems == [], "\n".join(problems)


def push_and_webhook_results(server, driver):
    """Another account whose reminder went to a push service and to webhooks of this test
    (on 127.0.0.1, so not in the pictures): sent and failed, each said in words."""
    scheduler = server["scheduler"]
    receivers = [PushService(answers) for answers in ([(201, {})], [(410, {})], [(200, {})], [(500, {})])]
    try:
        send(server["inbox"], "POST", "/register", body={"name": "pat", "password": "pat-password"})
        send(scheduler, "POST", "/register", body={"name": "pat", "password": "pat-password"})
        token = send(scheduler, "POST", "/app/token", body={"username": "pat", "password": "pat-password"})["token"]
        pushed, gone, hook, broken = receivers
        for endpoint in (pushed.origin + "/wpush/1", gone.origin + "/wpush/2"):
            send(scheduler, "POST", "/trigger/push", token, Subscriber().subscription(endpoint))
        send(scheduler, "POST", "/trigger/webhook", token, {"addWebhookTriggerUrl": hook.origin + "/hook", "addWebhookTriggerFormat": "text"})
        send(scheduler, "POST", "/trigger/webhook", token, {"addWebhookTriggerUrl": broken.origin + "/broken?token=s3cret", "addWebhookTriggerFormat": "json"})
        send(scheduler, "POST", "/scheduler/item", token, due_a_minute_ago("Check the smoke alarm"))
        until(lambda: len(attempts_of(server, token, "Check the smoke alarm") or []) == 4, DELIVERY_WAIT, "four deliveries")
        driver.get(scheduler + "/app/config.json")
        driver.execute_script("localStorage.clear(); localStorage.setItem('pigeonhole-token', arguments[0])", token)
        driver.get(scheduler + "/app/triggered")
        wait_text(driver, "#items", "Check the smoke alarm")
        words = driver.find_element(By.ID, "items").text
        for expected in (
            "Pushed to your device (via 127.0.0.1)",
            "Push failed (via 127.0.0.1): ",
            f"Sent to the webhook at {hook.origin}/hook",
            f"Failed for the webhook at {broken.origin}/broken?…: ",
        ):
            assert expected in words, f"{expected!r} not in {words!r}"
        assert "s3cret" not in words
        problems = look(driver, "scheduler /app/triggered (push and webhooks)", ready="#items li")
        driver.get(scheduler + "/app/triggers")
        wait_text(driver, "#triggers", "Expired — subscribe again on that device")
        problems += look(driver, "scheduler /app/triggers (push and webhooks)", ready="#triggers li")
        return problems
    finally:
        for receiver in receivers:
            receiver.close()
