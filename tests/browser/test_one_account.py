"""One person, one account (issue 27, spec decision 18) and the inbox's undo: registering in
the pages does what `pigeonhole setup` does (both accounts, the scheduler's trigger into the
inbox with a capture-only key, the browser's time zone) and says any step that failed;
deleting needs the other service's sign-in or deletes nothing; "Later…" says where the item
comes back, or warns and links the inbox; Done and "Later…" can be undone for a few seconds
and are final only then."""

import base64

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC

from test_every_page import look, send, sibling_token_of, until
from test_web import (
    DELIVERY_WAIT,
    WAIT,
    api,
    logs_in,
    register,
    send_registration,
    submit,
    text_of,
    token_of,
    verification_key,
    wait,
    wait_text,
)


def inbox_texts(server, token):
    return [base64.b64decode(i["contents"]["data"]).decode() for i in api(server["inbox"], "/inbox/items", token)]


def in_zone(driver, zone):
    """The browser's time zone from now on (None: its own again)."""
    driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": zone or ""})


def test_registering_in_the_pages_does_what_setup_does(server, driver):
    inbox, scheduler = server["inbox"], server["scheduler"]
    url = server["inbox_delivery_url"]
    for base, name, zone in ((inbox, "nora", "America/New_York"), (scheduler, "olga", "Asia/Tokyo")):
        in_zone(driver, zone)
        try:
            register(driver, base, name, name + "-password")
        finally:
            in_zone(driver, None)
        mine, theirs = token_of(driver), sibling_token_of(driver)
        inbox_token, scheduler_token = (mine, theirs) if base == inbox else (theirs, mine)
        assert api(inbox, "/account", inbox_token)["username"] == name
        assert api(scheduler, "/account", scheduler_token)["username"] == name
        # the scheduler's trigger into the inbox of this server, with a capture-only key
        triggers = api(scheduler, "/trigger", scheduler_token)
        assert [t["info"]["typedTriggerInfoValue"] for t in triggers] == [{"inboxTriggerInfoUrl": url}], triggers
        keys = api(inbox, "/access-key", inbox_token)
        assert [(k["name"], k["permissions"]) for k in keys] == [("scheduler deliveries", ["PermitAdd"])], keys
        # the browser's zone
        assert api(scheduler, "/account/settings", scheduler_token)["timezone"]["name"] == zone
        # and so a reminder comes back into the inbox
        send(scheduler, "POST", "/scheduler/item", scheduler_token,
             {"content": "Reminder for " + name, "scheduled-day": "2020-01-01", "scheduled-time": None, "recurrence": None})
        until(lambda: "Reminder for " + name in inbox_texts(server, inbox_token), DELIVERY_WAIT, "the reminder in the inbox")


def test_a_registration_step_that_fails_is_said_with_how_to_finish_it(server, driver):
    inbox, scheduler = server["inbox"], server["scheduler"]
    # the name is taken on the scheduler, with another password
    send(scheduler, "POST", "/register", None, {"name": "petra", "password": "somebody-else"})
    send_registration(driver, inbox, "petra", "petra-password")
    problems = wait(driver).until(EC.visibility_of_element_located((By.ID, "register-problems")))
    words = problems.text
    assert look(driver, "inbox /app/login (a registration step failed)") == []
    assert "The scheduler of this server has an account named petra already" in words, words
    assert "reminders are not linked to your inbox and the time zone is not set" in words, words
    assert problems.find_element(By.LINK_TEXT, "the scheduler's page").get_attribute("href") == scheduler + "/app/login"
    # the inbox account is made and signed in; Continue goes on
    assert logs_in(inbox, "petra", "petra-password")
    assert "/app/login" in driver.current_url
    driver.find_element(By.ID, "register-continue").click()
    wait(driver).until(lambda d: d.current_url == inbox + "/app/")
    wait_text(driver, "#count", "(0)")


def test_deleting_without_the_other_services_sign_in_deletes_nothing(server, driver):
    inbox = server["inbox"]
    register(driver, inbox, "quinn", "quinn-password")
    driver.get(inbox + "/app/settings")
    wait_text(driver, "#delete-account", "on the inbox and the scheduler of this server")
    driver.execute_script("localStorage.setItem('pigeonhole-sibling-token', 'no-longer-valid')")
    driver.find_element(By.ID, "delete-confirm").click()
    submit(driver, "#delete-account")
    wait_text(driver, "#delete-account .error", "Nothing was deleted")
    assert logs_in(inbox, "quinn", "quinn-password") and logs_in(server["scheduler"], "quinn", "quinn-password")


def later_panel(driver, text):
    """Opens "Later…" of the list's item `text`; its row's XPath."""
    row = f"//ul[@id='items']/li[contains(., '{text}')]"
    wait(driver).until(EC.element_to_be_clickable((By.XPATH, row + "//button[text()='Later…']"))).click()
    wait(driver).until(EC.visibility_of_element_located((By.XPATH, row + "//div[contains(@class, 'later')]//button[text()='Tomorrow']")))
    return row


def test_later_says_where_the_item_comes_back(server, driver):
    inbox, scheduler = server["inbox"], server["scheduler"]
    register(driver, inbox, "sara", "sara-password")
    scheduler_token = sibling_token_of(driver)
    capture = wait(driver).until(EC.element_to_be_clickable((By.ID, "capture-text")))
    capture.send_keys("Call the bank" + Keys.ENTER)
    wait_text(driver, "#count", "(1)")
    row = later_panel(driver, "Call the bank")
    assert "When it is due, it comes back into this inbox" in text_of(driver, "#items .later-where")
    # the time of each preset, in the account's zone
    assert "Tomorrow · tomorrow 09:00" in text_of(driver, "#items .later")

    # a verified e-mail trigger is named too
    send(scheduler, "POST", "/trigger/email", scheduler_token, {"addEmailTrigger": "sara@example.org"})
    key = verification_key(server["outbox"], 1, "sara@example.org")
    email = [t for t in api(scheduler, "/trigger", scheduler_token) if t["info"]["typedTriggerInfoType"] == "email"][0]
    send(scheduler, "POST", f"/trigger/email/verify/{email['uuid']}/{key}", scheduler_token)
    driver.refresh()
    later_panel(driver, "Call the bank")
    wait_text(driver, "#items .later-where", "into this inbox and by e-mail to sara@example.org")

    # without triggers: a warning, and one button links the inbox as registration does
    for t in api(scheduler, "/trigger", scheduler_token):
        send(scheduler, "DELETE", "/trigger/delete/" + t["uuid"], scheduler_token)
    driver.refresh()
    row = later_panel(driver, "Call the bank")
    wait_text(driver, "#items .later-where", "Nothing brings it back when it is due")
    assert look(driver, "inbox /app/ (Later… with nothing to bring it back)", shot="inbox-later-unlinked", scroll="#items .later") == []
    driver.find_element(By.XPATH, row + "//button[text()='Deliver reminders into this inbox']").click()
    wait_text(driver, "#items .later-where", "When it is due, it comes back into this inbox")
    triggers = api(scheduler, "/trigger", scheduler_token)
    assert [t["info"]["typedTriggerInfoValue"] for t in triggers] == [{"inboxTriggerInfoUrl": server["inbox_delivery_url"]}]
    # chosen: the undo line says it once more, with the day and time
    driver.find_element(By.XPATH, row + "//button[text()='Tomorrow']").click()
    wait_text(driver, "#undo", "“Call the bank” comes back into this inbox tomorrow 09:00.")


def test_done_and_later_can_be_undone(server, driver):
    inbox, scheduler = server["inbox"], server["scheduler"]
    register(driver, inbox, "tara", "tara-password")
    token, scheduler_token = token_of(driver), sibling_token_of(driver)
    capture = wait(driver).until(EC.element_to_be_clickable((By.ID, "capture-text")))
    for n, note in enumerate(("Water the fern", "Fix the bike light", "Return the library books"), 1):
        capture.send_keys(note + Keys.ENTER)
        wait_text(driver, "#count", f"({n})")
        capture = driver.find_element(By.ID, "capture-text")

    # Done: gone from the page at once, with Undo; nothing is sent yet; Undo brings it back
    wait_text(driver, "#current-item", "Water the fern")
    driver.find_element(By.XPATH, "//div[@id='current-item']//button[text()='Done']").click()
    wait_text(driver, "#count", "(2)")
    wait_text(driver, "#undo", "“Water the fern” done.")
    assert "Water the fern" not in text_of(driver, "#items") + text_of(driver, "#process")
    assert api(inbox, "/inbox/size", token) == 3, "sent before the undo window closed"
    driver.find_element(By.CSS_SELECTOR, "#undo .undo-button").click()
    wait_text(driver, "#count", "(3)")
    wait_text(driver, "#current-item", "Water the fern")
    assert not driver.find_element(By.ID, "undo").is_displayed()

    # "Later…": the same
    later_panel(driver, "Fix the bike light")
    driver.find_element(By.XPATH, "//ul[@id='items']/li[contains(., 'Fix the bike light')]//button[text()='Tomorrow']").click()
    wait_text(driver, "#count", "(2)")
    wait_text(driver, "#undo", "“Fix the bike light” comes back into this inbox tomorrow 09:00.")
    driver.find_element(By.CSS_SELECTOR, "#undo .undo-button").click()
    wait_text(driver, "#count", "(3)")
    assert "Fix the bike light" in text_of(driver, "#items")

    # an action not undone is final once its window closed: Done on another item; when it
    # was sent, the undone ones' windows had closed long before, and they were never sent
    driver.find_element(By.XPATH, "//div[@id='current-item']//button[text()='Keep for later']").click()
    wait_text(driver, "#current-item", "Fix the bike light")
    driver.find_element(By.XPATH, "//div[@id='current-item']//button[text()='Keep for later']").click()
    wait_text(driver, "#current-item", "Return the library books")
    driver.find_element(By.XPATH, "//div[@id='current-item']//button[text()='Done']").click()
    until(lambda: api(inbox, "/inbox/size", token) == 2, WAIT, "the Done sent after its window")
    wait(driver).until(EC.invisibility_of_element_located((By.ID, "undo")))
    assert sorted(inbox_texts(server, token)) == ["Fix the bike light", "Water the fern"]
    assert api(scheduler, "/scheduler/items", scheduler_token) == [], "the undone Later… reached the scheduler"
    wait_text(driver, "#count", "(2)")


def test_a_done_in_its_undo_window_is_sent_as_the_page_goes_away(server, driver):
    inbox = server["inbox"]
    register(driver, inbox, "uma", "uma-password")
    token = token_of(driver)
    wait(driver).until(EC.element_to_be_clickable((By.ID, "capture-text"))).send_keys("Post the letter" + Keys.ENTER)
    wait_text(driver, "#current-item", "Post the letter")
    driver.find_element(By.XPATH, "//div[@id='current-item']//button[text()='Done']").click()
    wait_text(driver, "#undo", "done.")
    # a link of the page makes it final first
    driver.find_element(By.LINK_TEXT, "Settings").click()
    wait(driver).until(EC.url_contains("/app/settings"))
    assert api(inbox, "/inbox/size", token) == 0
    # the page closed (here: left for another address) within the window: sent as it goes
    driver.get(inbox + "/app/")
    wait(driver).until(EC.element_to_be_clickable((By.ID, "capture-text"))).send_keys("Buy stamps" + Keys.ENTER)
    wait_text(driver, "#current-item", "Buy stamps")
    driver.find_element(By.XPATH, "//div[@id='current-item']//button[text()='Done']").click()
    wait_text(driver, "#undo", "done.")
    driver.get("about:blank")
    until(lambda: api(inbox, "/inbox/size", token) == 0, WAIT, "the Done sent as the page went away")
