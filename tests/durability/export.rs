//! Export and import of one account (issue 12, point 4): `GET /account/export` and
//! `POST /account/import` on each service, and `pigeonhole export` / `pigeonhole import`.
//! An account moved to another server has the same items with the same ids and times;
//! importing twice changes nothing; a bad file changes nothing.

use crate::common;

use common::process::succeeded;
use common::scheduler::{utc_ago, wait_for};
use common::{b64, Api, Auth, Server};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

async fn export(api: &Api, auth: &Auth) -> Value {
    api.get("/account/export", auth).await.expect_json(200)
}

async fn import(api: &Api, auth: &Auth, body: &Value) -> Value {
    api.post("/account/import", auth, body).await.expect_json(200)
}

/// An account's export without what an import does not carry over (access keys are listed
/// to be recreated; e-mail triggers must be verified again).
fn carried(mut export: Value) -> Value {
    export["access-keys"] = json!(null);
    for t in export["triggers"].as_array_mut().into_iter().flatten() {
        if t["type"] == "email" {
            t["verified"] = json!(null);
        }
    }
    export
}

/// Alice's account on server `a`, with something of every kind; answers her (inbox,
/// scheduler) credentials.
async fn populate(a: &Server) -> (Auth, Auth) {
    let inbox = a.user("alice").await;
    let sched = a.scheduler.user("alice").await;
    for i in 0..5 {
        a.add_text(&inbox, &format!("note {i}")).await;
    }
    a.post(
        "/inbox/item",
        &inbox,
        &json!({"type": "image/png", "data": b64([0x89, b'P', b'N', b'G', 0, 1, 2])}),
    )
    .await
    .expect_json(200);
    a.add_text(&inbox, &"long ".repeat(2000)).await;
    a.add_key(&inbox, "phone", &["PermitAdd", "PermitGetItems"]).await;
    a.scheduler.add_key(&sched, "laptop", &["PermitAddItem"]).await;
    let settings = json!({"timezone": {"offset": 60, "name": "Europe/Zurich", "summer": false}});
    let put = a
        .scheduler
        .request(reqwest::Method::PUT, "/account/settings", &sched)
        .json(&settings);
    a.scheduler.send(put).await.expect(200);
    let (secret, _) = a.add_key(&inbox, "scheduler", &["PermitAdd"]).await;
    let trigger = a
        .scheduler
        .post(
            "/trigger/inbox",
            &sched,
            &json!({"addInboxTriggerUrl": a.api.url(""), "addInboxTriggerUsername": "alice",
                    "addInboxTriggerAccessKey": secret}),
        )
        .await
        .expect_json(200);
    assert!(trigger["Right"].is_string(), "{trigger}");
    a.scheduler.add_email_trigger(&sched, "alice@example.org").await;
    a.scheduler
        .add_tickle(&sched, &common::scheduler::future_tickle("some day"))
        .await;
    a.scheduler
        .add_tickle(
            &sched,
            &common::scheduler::tickle(
                "every week",
                "2099-03-01",
                Some("09:15"),
                Some(common::scheduler::every_days(7, Some("09:15"))),
            ),
        )
        .await;
    // one due already: triggered, and delivered into the inbox
    let (day, time) = utc_ago(3600);
    let due = a
        .scheduler
        .add_tickle(&sched, &common::scheduler::tickle("was due", &day, Some(&time), None))
        .await;
    let _ = due;
    wait_for("the due item's delivery", || async {
        let items = a.scheduler.tickles(&sched, None).await;
        items
            .iter()
            .any(|t| {
                t["triggered"]["triggeredInfoTriggerTriggerAttempts"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
            })
            .then_some(())
    })
    .await;
    (inbox, sched)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_account_moves_to_another_server_with_the_same_ids_and_times_and_a_second_import_changes_nothing() {
    let a = Server::start_scheduler().await;
    let (a_inbox, a_sched) = populate(&a).await;
    let inbox_part = export(&a.api, &a_inbox).await;
    let sched_part = export(&a.scheduler, &a_sched).await;
    assert_eq!(inbox_part["items"].as_array().unwrap().len(), 8, "{inbox_part}");
    assert_eq!(sched_part["triggered"].as_array().unwrap().len(), 1);
    assert_eq!(sched_part["scheduled"].as_array().unwrap().len(), 2);
    assert_eq!(sched_part["triggers"].as_array().unwrap().len(), 2);
    // access keys without their secrets
    let keys = inbox_part["access-keys"].as_array().unwrap();
    assert!(keys.iter().any(|k| k["name"] == "phone"));
    assert!(!inbox_part.to_string().contains("digest"));

    let b = Server::start_scheduler().await;
    let b_inbox = b.user("alice").await;
    let b_sched = b.scheduler.user("alice").await;
    let done = import(&b.api, &b_inbox, &inbox_part).await;
    assert_eq!(done["items-added"], 8, "{done}");
    assert!(done["access-keys-to-recreate"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k["name"] == "phone" && k["permissions"] == json!(["PermitAdd", "PermitGetItems"])));
    let done = import(&b.scheduler, &b_sched, &sched_part).await;
    assert_eq!(done["scheduled-added"], 2, "{done}");
    assert_eq!(done["triggered-added"], 1, "{done}");
    assert_eq!(done["triggers-added"], 2, "{done}");
    assert_eq!(done["settings-changed"], true, "{done}");
    assert_eq!(done["email-triggers-to-verify"].as_array().unwrap().len(), 1);

    // the same items, ids, times and contents, as the API shows them
    let a_items = a.get("/inbox/items", &a_inbox).await.expect_json(200);
    assert_eq!(b.get("/inbox/items", &b_inbox).await.expect_json(200), a_items);
    let a_tickles = a.scheduler.get("/scheduler/items", &a_sched).await.expect_json(200);
    assert_eq!(
        b.scheduler.get("/scheduler/items", &b_sched).await.expect_json(200),
        a_tickles
    );
    assert_eq!(
        b.scheduler.get("/account/settings", &b_sched).await.expect_json(200),
        a.scheduler.get("/account/settings", &a_sched).await.expect_json(200)
    );
    let b_inbox_part = export(&b.api, &b_inbox).await;
    let b_sched_part = export(&b.scheduler, &b_sched).await;
    assert_eq!(carried(b_inbox_part.clone()), carried(inbox_part.clone()));
    assert_eq!(carried(b_sched_part.clone()), carried(sched_part.clone()));
    // e-mail triggers arrive unverified
    let email = b_sched_part["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "email")
        .unwrap()
        .clone();
    assert_eq!(email["verified"], false);
    let counts = b.get("/account", &b_inbox).await.expect_json(200);
    assert_eq!(counts["count"], 8, "{counts}");

    // the second import changes nothing
    let again = import(&b.api, &b_inbox, &inbox_part).await;
    assert_eq!(
        (again["items-added"].clone(), again["items-kept"].clone()),
        (json!(0), json!(8))
    );
    let again = import(&b.scheduler, &b_sched, &sched_part).await;
    assert_eq!(again["scheduled-added"], 0, "{again}");
    assert_eq!(again["triggered-added"], 0, "{again}");
    assert_eq!(again["triggers-added"], 0, "{again}");
    assert_eq!(again["settings-changed"], false, "{again}");
    assert_eq!(export(&b.api, &b_inbox).await, b_inbox_part);
    assert_eq!(export(&b.scheduler, &b_sched).await, b_sched_part);
    assert_eq!(b.get("/account", &b_inbox).await.expect_json(200)["count"], 8);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_bad_import_is_refused_and_changes_nothing() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let sched = s.scheduler.user("alice").await;
    s.add_text(&alice, "mine").await;
    let before = export(&s.api, &alice).await;
    let sched_before = export(&s.scheduler, &sched).await;
    let item = |id: &str, data: &str| json!({"id": id, "created": "2024-05-01T10:00:00Z", "contents": {"type": "text", "data": data}});
    let good = "0b6bd5ab-3d4f-4d8e-9a53-6f1f7e0d3c11";
    let bad_inputs = [
        json!({"format": "pigeonhole-inbox-export", "version": 1,
               "items": [item(good, "aGk="), item("3f0e1a52-1111-4222-8333-944455556666", "not base64!")]}),
        json!({"format": "pigeonhole-inbox-export", "version": 1, "items": [item("not-a-uuid", "aGk=")]}),
        json!({"format": "pigeonhole-inbox-export", "version": 1,
               "items": [{"id": good, "created": "yesterday", "contents": {"type": "text", "data": "aGk="}}]}),
        json!({"format": "pigeonhole-inbox-export", "version": 2, "items": []}),
        json!({"format": "something else", "version": 1}),
        json!([1, 2, 3]),
    ];
    for body in &bad_inputs {
        let why = s.post("/account/import", &alice, body).await.expect_error(400);
        assert!(!why.is_empty());
        assert_eq!(export(&s.api, &alice).await, before, "{body} changed something");
    }
    let why = s
        .scheduler
        .post(
            "/account/import",
            &sched,
            &json!({"format": "pigeonhole-scheduler-export", "version": 1,
                    "settings": {"timezone": {"offset": 60, "name": "X", "summer": false}},
                    "scheduled": [{"id": good, "created": "2024-05-01T10:00:00Z",
                                   "contents": {"content": "x", "scheduled-day": "2024-02-30"}}]}),
        )
        .await
        .expect_error(400);
    assert!(why.contains("scheduled[0]"), "{why}");
    assert_eq!(
        export(&s.scheduler, &sched).await,
        sched_before,
        "the settings were not changed either"
    );

    // credentials without the permissions of what is read or written
    let (key, _) = s.add_key(&alice, "reader", &["PermitGetItems", "PermitAdd"]).await;
    let reader = Auth::key("alice", &key);
    s.get("/account/export", &reader).await.expect_error(401);
    s.stop().await;
}

/// Issue 18: an import never tells whether an id exists in another account. An entry whose
/// id is another account's is stored under an id of its own (derived from the account and
/// the id, so that importing again keeps it), with the same answer as for a free id; the
/// other account's entry is untouched.
#[tokio::test]
async fn an_import_does_not_tell_whether_an_id_is_another_accounts() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let bob = s.user("bob").await;
    let bobs = s.add_text(&bob, "bob's").await;
    let free = uuid::Uuid::new_v4().to_string();
    let item = |id: &str, data: &str| json!({"id": id, "created": "2024-05-01T10:00:00Z", "contents": {"type": "text", "data": data}});
    let answers = |ids: [&str; 1]| {
        json!({"format": "pigeonhole-inbox-export", "version": 1,
               "items": ids.iter().map(|id| item(id, "aGk=")).collect::<Vec<_>>()})
    };
    let taken = s
        .post("/account/import", &alice, &answers([&bobs]))
        .await
        .expect_json(200);
    let fresh = s
        .post("/account/import", &alice, &answers([&free]))
        .await
        .expect_json(200);
    assert_eq!(taken, fresh, "the answers differ");
    let mut ids = s.uuids(&alice).await;
    ids.sort();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&free) && !ids.contains(&bobs), "{ids:?}");
    assert_eq!(
        s.get(&format!("/inbox/item/{bobs}"), &bob).await.expect_json(200)["contents"]["data"],
        b64("bob's")
    );
    // the same file again: kept, nothing added
    let again = s
        .post("/account/import", &alice, &answers([&bobs]))
        .await
        .expect_json(200);
    assert_eq!(
        (again["items-added"].as_u64(), again["items-kept"].as_u64()),
        (Some(0), Some(1))
    );
    let mut now = s.uuids(&alice).await;
    now.sort();
    assert_eq!(now, ids);

    // the scheduler: a scheduled item of bob's id
    let sched_bob = s.scheduler.user("bob").await;
    let sched_alice = s.scheduler.user("alice").await;
    let export_of = |item_id: &str| {
        json!({"format": "pigeonhole-scheduler-export", "version": 1,
               "scheduled": [{"id": item_id, "created": "2024-05-01T10:00:00Z",
                              "contents": {"content": "x", "scheduled-day": "2030-02-03"}}]})
    };
    let item_id = uuid::Uuid::new_v4().to_string();
    s.scheduler
        .post("/account/import", &sched_bob, &export_of(&item_id))
        .await
        .expect_json(200);
    let bob_before = export(&s.scheduler, &sched_bob).await;
    let taken = s
        .scheduler
        .post("/account/import", &sched_alice, &export_of(&item_id))
        .await
        .expect_json(200);
    let carol = s.scheduler.user("carol").await;
    let fresh = s
        .scheduler
        .post("/account/import", &carol, &export_of(&uuid::Uuid::new_v4().to_string()))
        .await
        .expect_json(200);
    assert_eq!(taken, fresh, "the answers differ");
    let alices = export(&s.scheduler, &sched_alice).await;
    assert_eq!(alices["scheduled"].as_array().map(Vec::len), Some(1), "{alices}");
    assert_ne!(alices["scheduled"][0]["id"], item_id.as_str());
    assert_eq!(export(&s.scheduler, &sched_bob).await, bob_before);
    s.stop().await;
}

/// Runs `pigeonhole ARGS` with client settings under `config_home`.
fn client(config_home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .args(args)
        .env("XDG_CONFIG_HOME", config_home)
        .env("PIGEONHOLE_PASSWORD", "correct horse battery staple")
        .env_remove("PIGEONHOLE_CLIENT_CONFIG")
        .env_remove("PIGEONHOLE_INBOX_URL")
        .env_remove("PIGEONHOLE_SCHEDULER_URL")
        .env_remove("PIGEONHOLE_USERNAME")
        .output()
        .expect("run the client")
}

async fn run(config_home: &Path, args: &[&str]) -> Output {
    let home = config_home.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        client(&home, &args)
    })
    .await
    .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_command_line_exports_and_imports_an_account() {
    let a = Server::start().await;
    let b = Server::start().await;
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (s, home) in [(&a, &home_a), (&b, &home_b)] {
        let (inbox, sched) = (s.api.url(""), s.scheduler.url(""));
        succeeded(
            &run(
                home.path(),
                &[
                    "setup",
                    "--inbox-url",
                    &inbox,
                    "--scheduler-url",
                    &sched,
                    "--username",
                    "carol",
                ],
            )
            .await,
        );
    }
    succeeded(&run(home_a.path(), &["add", "first", "note"]).await);
    succeeded(&run(home_a.path(), &["add", "second", "note"]).await);
    succeeded(&run(home_a.path(), &["remind", "call", "mum", "--in", "30d"]).await);
    let file = home_a.path().join("carol.json");
    let file_arg = file.to_str().unwrap();
    succeeded(&run(home_a.path(), &["export", file_arg]).await);
    let exported: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(exported["format"], "pigeonhole-export");
    assert_eq!(exported["inbox"]["items"].as_array().unwrap().len(), 2);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);

    let said = succeeded(&run(home_b.path(), &["import", file_arg]).await);
    assert!(said.contains("imported 2 inbox items"), "{said}");
    let said = succeeded(&run(home_b.path(), &["import", file_arg]).await);
    assert!(said.contains("imported 0 inbox items (2 were there)"), "{said}");
    let a_items: Value = serde_json::from_str(&succeeded(&run(home_a.path(), &["inbox", "--json"]).await)).unwrap();
    let b_items: Value = serde_json::from_str(&succeeded(&run(home_b.path(), &["inbox", "--json"]).await)).unwrap();
    assert_eq!(a_items, b_items);
    let a_sched: Value = serde_json::from_str(&succeeded(&run(home_a.path(), &["scheduled", "--json"]).await)).unwrap();
    let b_sched: Value = serde_json::from_str(&succeeded(&run(home_b.path(), &["scheduled", "--json"]).await)).unwrap();
    assert_eq!(a_sched, b_sched);
    // not an export: refused
    std::fs::write(&file, "{\"format\": \"other\"}").unwrap();
    let out = run(home_b.path(), &["import", file_arg]).await;
    assert_eq!(out.status.code(), Some(1));
    a.stop().await;
    b.stop().await;
}
