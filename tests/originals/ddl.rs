//! The originals' own DDL: the CREATE TABLE statements that `persistent-sqlite` made for
//! their entity definitions, as their migration golden tests recorded them
//! (`*-data-gen/test_resources/migration.sql`, the statements without the file's closing
//! comment), and the layouts before those files existed, derived from them by the changes
//! of `*-data/src/**/DB.hs` (each edit below names the commit that made it; [`edit`] checks
//! that the text it changes is there).
//!
//! Sources (docs/moving-in.md lists every layout with its commit range):
//! - Intray: `intray-data-gen/test_resources/migration.sql` at 8ce2c5d (2022-05-05, the
//!   only version of that file; NorfairKing/intray's later history was squashed, so it was
//!   read in the forks StevenXL/intray and DavideFauri/intray, which hold the same commits).
//! - Tickler: `tickler-data-gen/test_resources/migration.sql` at ec78709 (2022-05-05) and
//!   79a68ed (2022-05-25, its last change), NorfairKing/tickler.

/// Intray, `intray-data-gen/test_resources/migration.sql` at 8ce2c5d.
pub const INTRAY_8CE2C5D: &str = r#"
CREATE TABLE "user"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"username" VARCHAR NOT NULL,"hashed_password" BLOB NOT NULL,"created_timestamp" TIMESTAMP NOT NULL,"last_login" TIMESTAMP NULL,CONSTRAINT "unique_user_identifier" UNIQUE ("identifier"),CONSTRAINT "unique_username" UNIQUE ("username"));
CREATE TABLE "customer"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"stripe_customer" VARCHAR NOT NULL,CONSTRAINT "unique_stripe_customer" UNIQUE ("user","stripe_customer"));
CREATE TABLE "subscription"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"end" TIMESTAMP NOT NULL,CONSTRAINT "unique_subscription_user" UNIQUE ("user"));
CREATE TABLE "intray_item"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"type" VARCHAR NOT NULL,"contents" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,CONSTRAINT "unique_item_identifier" UNIQUE ("identifier","user_id"));
CREATE TABLE "access_key"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user" BLOB NOT NULL,"name" VARCHAR NOT NULL,"hashed_key" BLOB NOT NULL,"created_timestamp" TIMESTAMP NOT NULL,"permissions" VARCHAR NOT NULL,CONSTRAINT "unique_access_key_identifier" UNIQUE ("identifier","user"));
"#;

/// Tickler, `tickler-data-gen/test_resources/migration.sql` at ec78709.
pub const TICKLER_EC78709: &str = r#"
CREATE TABLE "user"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"username" VARCHAR NOT NULL,"hashed_password" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,"last_login" TIMESTAMP NULL,CONSTRAINT "unique_user_identifier" UNIQUE ("identifier"),CONSTRAINT "unique_username" UNIQUE ("username"));
CREATE TABLE "customer"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"stripe_customer" VARCHAR NOT NULL,CONSTRAINT "unique_customer_user" UNIQUE ("user"),CONSTRAINT "unique_user_customer" UNIQUE ("stripe_customer"));
CREATE TABLE "stripe_event"("id" INTEGER PRIMARY KEY,"event" VARCHAR NOT NULL,"error" VARCHAR NULL,CONSTRAINT "unique_stripe_event" UNIQUE ("event"));
CREATE TABLE "user_settings"("id" INTEGER PRIMARY KEY,"user_id" BLOB NOT NULL,"time_zone" VARCHAR NOT NULL,CONSTRAINT "unique_user_settings" UNIQUE ("user_id"));
CREATE TABLE "tickler_item"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"contents" VARCHAR NOT NULL,"created" TIMESTAMP NOT NULL,"scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,CONSTRAINT "unique_item_identifier" UNIQUE ("user_id","identifier"));
CREATE TABLE "triggered_item"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"contents" VARCHAR NOT NULL,"created" TIMESTAMP NOT NULL,"scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,"triggered" TIMESTAMP NOT NULL,CONSTRAINT "unique_triggered_item_identifier" UNIQUE ("identifier"));
CREATE TABLE "user_trigger"("id" INTEGER PRIMARY KEY,"user_id" BLOB NOT NULL,"trigger_type" VARCHAR NOT NULL,"trigger_id" BLOB NOT NULL);
CREATE TABLE "intray_trigger"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"url" VARCHAR NOT NULL,"username" VARCHAR NOT NULL,"access_key" BLOB NOT NULL,"added" TIMESTAMP NOT NULL,CONSTRAINT "unique_intray_trigger" UNIQUE ("identifier"));
CREATE TABLE "email_trigger"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"address" VARCHAR NOT NULL,"verification_key" BLOB NOT NULL,"verified" BOOLEAN NOT NULL,"added" TIMESTAMP NOT NULL,CONSTRAINT "unique_email_trigger" UNIQUE ("identifier"));
CREATE TABLE "verification_email"("id" INTEGER PRIMARY KEY,"to" VARCHAR NOT NULL,"key" BLOB NOT NULL,"trigger" BLOB NOT NULL,"scheduled" TIMESTAMP NOT NULL,"email" INTEGER NULL REFERENCES "email");
CREATE TABLE "admin_notification_email"("id" INTEGER PRIMARY KEY,"contents" VARCHAR NOT NULL,"email" INTEGER NULL REFERENCES "email");
CREATE TABLE "triggered_intray_item"("id" INTEGER PRIMARY KEY,"item" BLOB NOT NULL,"trigger" BLOB NOT NULL,"intray_item_u_u_i_d" BLOB NULL,"error" VARCHAR NULL,CONSTRAINT "unique_triggered_intray_item" UNIQUE ("item","trigger"));
CREATE TABLE "triggered_email"("id" INTEGER PRIMARY KEY,"item" BLOB NOT NULL,"trigger" BLOB NOT NULL,"email" INTEGER NULL REFERENCES "email","error" VARCHAR NULL,CONSTRAINT "unique_triggered_email" UNIQUE ("item","trigger"));
CREATE TABLE "email"("id" INTEGER PRIMARY KEY,"to" VARCHAR NOT NULL,"from" VARCHAR NOT NULL,"from_name" VARCHAR NOT NULL,"subject" VARCHAR NOT NULL,"text_content" VARCHAR NOT NULL,"html_content" VARCHAR NOT NULL,"status" VARCHAR NOT NULL,"send_error" VARCHAR NULL,"ses_id" VARCHAR NULL,"scheduled" TIMESTAMP NOT NULL,"send_attempt" TIMESTAMP NULL);
"#;

/// Tickler, `tickler-data-gen/test_resources/migration.sql` at 79a68ed (unchanged since).
pub const TICKLER_79A68ED: &str = r#"
CREATE TABLE "user"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"username" VARCHAR NOT NULL,"hashed_password" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,"last_login" TIMESTAMP NULL,CONSTRAINT "unique_user_identifier" UNIQUE ("identifier"),CONSTRAINT "unique_username" UNIQUE ("username"));
CREATE TABLE "customer"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"stripe_customer" VARCHAR NOT NULL,CONSTRAINT "unique_stripe_customer" UNIQUE ("user","stripe_customer"));
CREATE TABLE "subscription"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"end" TIMESTAMP NOT NULL,CONSTRAINT "unique_subscription_user" UNIQUE ("user"));
CREATE TABLE "user_settings"("id" INTEGER PRIMARY KEY,"user_id" BLOB NOT NULL,"time_zone" VARCHAR NOT NULL,CONSTRAINT "unique_user_settings" UNIQUE ("user_id"));
CREATE TABLE "tickler_item"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"contents" VARCHAR NOT NULL,"created" TIMESTAMP NOT NULL,"scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,CONSTRAINT "unique_item_identifier" UNIQUE ("user_id","identifier"));
CREATE TABLE "triggered_item"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"contents" VARCHAR NOT NULL,"created" TIMESTAMP NOT NULL,"scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,"triggered" TIMESTAMP NOT NULL,CONSTRAINT "unique_triggered_item_identifier" UNIQUE ("identifier"));
CREATE TABLE "intray_trigger"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"identifier" BLOB NOT NULL,"url" VARCHAR NOT NULL,"username" VARCHAR NOT NULL,"access_key" BLOB NOT NULL,"added" TIMESTAMP NOT NULL,CONSTRAINT "unique_intray_trigger" UNIQUE ("identifier"));
CREATE TABLE "email_trigger"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"identifier" BLOB NOT NULL,"address" VARCHAR NOT NULL,"verification_key" BLOB NOT NULL,"verified" BOOLEAN NOT NULL,"added" TIMESTAMP NOT NULL,CONSTRAINT "unique_email_trigger" UNIQUE ("identifier"));
CREATE TABLE "verification_email"("id" INTEGER PRIMARY KEY,"to" VARCHAR NOT NULL,"key" BLOB NOT NULL,"trigger" BLOB NOT NULL,"scheduled" TIMESTAMP NOT NULL,"email" INTEGER NULL REFERENCES "email" ON DELETE RESTRICT ON UPDATE RESTRICT);
CREATE TABLE "admin_notification_email"("id" INTEGER PRIMARY KEY,"contents" VARCHAR NOT NULL,"email" INTEGER NULL REFERENCES "email" ON DELETE RESTRICT ON UPDATE RESTRICT);
CREATE TABLE "triggered_intray_item"("id" INTEGER PRIMARY KEY,"item" BLOB NOT NULL,"trigger" BLOB NOT NULL,"intray_item_u_u_i_d" BLOB NULL,"error" VARCHAR NULL,CONSTRAINT "unique_triggered_intray_item" UNIQUE ("item","trigger"));
CREATE TABLE "triggered_email"("id" INTEGER PRIMARY KEY,"item" BLOB NOT NULL,"trigger" BLOB NOT NULL,"email" INTEGER NULL REFERENCES "email" ON DELETE RESTRICT ON UPDATE RESTRICT,"error" VARCHAR NULL,CONSTRAINT "unique_triggered_email" UNIQUE ("item","trigger"));
CREATE TABLE "email"("id" INTEGER PRIMARY KEY,"to" VARCHAR NOT NULL,"from" VARCHAR NOT NULL,"from_name" VARCHAR NOT NULL,"subject" VARCHAR NOT NULL,"text_content" VARCHAR NOT NULL,"html_content" VARCHAR NOT NULL,"status" VARCHAR NOT NULL,"send_error" VARCHAR NULL,"ses_id" VARCHAR NULL,"scheduled" TIMESTAMP NOT NULL,"send_attempt" TIMESTAMP NULL);
"#;

/// Replaces `from` by `to` in `ddl`; `from` must be there (else the derivation no longer
/// fits the golden file it starts from).
pub fn edit(ddl: &str, from: &str, to: &str) -> String {
    assert!(ddl.contains(from), "the DDL has no {from:?}");
    ddl.replace(from, to)
}

/// Drops the CREATE TABLE statement of `table`.
pub fn without(ddl: &str, table: &str) -> String {
    let start = format!("CREATE TABLE \"{table}\"(");
    let line = ddl
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("the DDL has no table {table}"));
    ddl.replace(&format!("{line}\n"), "")
}

/// Which layout a fixture of Intray has (docs/moving-in.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntrayLayout {
    /// 9c97617..d4241ce (2018-04-18 to 2018-05-22): no access keys; `intray_item.timestamp`.
    April2018,
    /// d4241ce..aee0532 (2018-05-22): access keys without a name.
    May2018NoKeyName,
    /// aee0532..b6da725 (2018-05-23 to 2018-06-07).
    May2018,
    /// b6da725..c9299fc (2018-06-07 to 2020-02-10): `intray_item.created` and `synced`.
    June2018,
    /// c9299fc.. (since 2020-02-10): the golden file of 8ce2c5d.
    Since2020,
}

impl IntrayLayout {
    pub const ALL: [IntrayLayout; 5] = [
        IntrayLayout::April2018,
        IntrayLayout::May2018NoKeyName,
        IntrayLayout::May2018,
        IntrayLayout::June2018,
        IntrayLayout::Since2020,
    ];

    pub fn ddl(self) -> String {
        use IntrayLayout::*;
        let golden = INTRAY_8CE2C5D.to_owned();
        if self == Since2020 {
            return golden;
        }
        // before pricing (7e9cc9d, 2019-09-07): no payment tables
        let mut ddl = without(&without(&golden, "customer"), "subscription");
        // b6da725 (2018-06-07, mergeless): `synced` until c9299fc (2020-02-10)
        ddl = edit(
            &ddl,
            r#""created" TIMESTAMP NOT NULL,CONSTRAINT "unique_item_identifier" UNIQUE ("identifier","user_id")"#,
            r#""created" TIMESTAMP NOT NULL,"synced" TIMESTAMP NOT NULL,CONSTRAINT "unique_item_identifier" UNIQUE ("identifier")"#,
        );
        if self == June2018 {
            return ddl;
        }
        // before b6da725: IntrayItem { identifier, type, contents, timestamp, userId } with
        // UniqueItem and UniqueIdentifier (9c97617)
        ddl = edit(
            &ddl,
            r#""identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"type" VARCHAR NOT NULL,"contents" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,"synced" TIMESTAMP NOT NULL,CONSTRAINT "unique_item_identifier" UNIQUE ("identifier")"#,
            r#""identifier" BLOB NOT NULL,"type" VARCHAR NOT NULL,"contents" BLOB NOT NULL,"timestamp" TIMESTAMP NOT NULL,"user_id" BLOB NOT NULL,CONSTRAINT "unique_item" UNIQUE ("identifier","type","contents","timestamp","user_id"),CONSTRAINT "unique_identifier" UNIQUE ("identifier","user_id")"#,
        );
        // AccessKey before 1baae03: UniqueAccessKeyIdentifier identifier
        ddl = edit(
            &ddl,
            r#"CONSTRAINT "unique_access_key_identifier" UNIQUE ("identifier","user")"#,
            r#"CONSTRAINT "unique_access_key_identifier" UNIQUE ("identifier")"#,
        );
        match self {
            May2018 => ddl,
            // d4241ce: AccessKey without `name` (added by aee0532)
            May2018NoKeyName => edit(&ddl, r#""name" VARCHAR NOT NULL,"#, ""),
            // 9c97617: no AccessKey at all
            _ => without(&ddl, "access_key"),
        }
    }
}

/// Which layout a fixture of Tickler has (docs/moving-in.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicklerLayout {
    /// 5b1350f..93d50c8 (2018-06-10 to 2018-06-14): one `scheduled` instant, no recurrence,
    /// `intray_item_u_u_i_d` as text (until d1794c9), no `triggered_email.error` (41d9c3f).
    June2018,
    /// 93d50c8..1d854bb (2018-06-14 to 2020-02-10): day, time and recurrence; `type`,
    /// contents as bytes, `synced`.
    Y2018,
    /// 69c7053..fc70109 (2020-02-24 to 2022-04-15): `server_time`, no `synced`.
    Y2020,
    /// 9bbe1d7..d5f0f7e (2022-04-16 to 2022-05-07): no `type`, contents as text, no
    /// `server_time`: the golden file of ec78709.
    April2022,
    /// d5f0f7e..f777fc5 (2022-05-07): `user_trigger` and a nullable `user` on the triggers:
    /// the golden file of d5f0f7e.
    May2022Both,
    /// f777fc5.. (since 2022-05-07): no `user_trigger`: the golden file of 79a68ed.
    Since2022,
}

impl TicklerLayout {
    pub const ALL: [TicklerLayout; 6] = [
        TicklerLayout::June2018,
        TicklerLayout::Y2018,
        TicklerLayout::Y2020,
        TicklerLayout::April2022,
        TicklerLayout::May2022Both,
        TicklerLayout::Since2022,
    ];

    pub fn ddl(self) -> String {
        use TicklerLayout::*;
        let golden = TICKLER_EC78709.to_owned();
        match self {
            Since2022 => return TICKLER_79A68ED.to_owned(),
            April2022 => return golden,
            // d5f0f7e's golden file: ec78709's with `"user" BLOB NULL DEFAULT NULL` first in
            // both trigger tables
            May2022Both => {
                let ddl = edit(
                    &golden,
                    r#"CREATE TABLE "intray_trigger"("id" INTEGER PRIMARY KEY,"#,
                    r#"CREATE TABLE "intray_trigger"("id" INTEGER PRIMARY KEY,"user" BLOB NULL DEFAULT NULL,"#,
                );
                return edit(
                    &ddl,
                    r#"CREATE TABLE "email_trigger"("id" INTEGER PRIMARY KEY,"#,
                    r#"CREATE TABLE "email_trigger"("id" INTEGER PRIMARY KEY,"user" BLOB NULL DEFAULT NULL,"#,
                );
            }
            _ => {}
        }
        // before 9bbe1d7 (2022-04-16): `type ItemType` and `contents ByteString`
        let mut ddl = golden.replace(
            r#""contents" VARCHAR NOT NULL,"created" TIMESTAMP NOT NULL,"scheduled_day""#,
            r#""type" VARCHAR NOT NULL,"contents" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,"scheduled_day""#,
        );
        assert_eq!(ddl.matches(r#""type" VARCHAR NOT NULL,"contents" BLOB"#).count(), 2);
        // before 3c22e93 (2022-04-19): UniqueItemIdentifier identifier
        ddl = edit(
            &ddl,
            r#"CONSTRAINT "unique_item_identifier" UNIQUE ("user_id","identifier")"#,
            r#"CONSTRAINT "unique_item_identifier" UNIQUE ("identifier")"#,
        );
        if self == Y2020 {
            // 69c7053 / 8b2efd0: `serverTime Mergeful.ServerTime default=0` until fc70109
            return edit(
                &ddl,
                r#""created" TIMESTAMP NOT NULL,"scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,CONSTRAINT"#,
                r#""created" TIMESTAMP NOT NULL,"server_time" INTEGER NOT NULL DEFAULT 0,"scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,CONSTRAINT"#,
            );
        }
        // before 02d6bfa (2020-03-28) no payment tables; before 7ddcc30 no admin notices
        ddl = without(&without(&ddl, "customer"), "stripe_event");
        ddl = without(&ddl, "admin_notification_email");
        // 8dd9609 (2018-06-10) to 1d854bb (2020-02-10): `synced UTCTime` on both item tables
        let synced = ddl.replace(
            r#""created" TIMESTAMP NOT NULL,"scheduled_day""#,
            r#""created" TIMESTAMP NOT NULL,"synced" TIMESTAMP NOT NULL,"scheduled_day""#,
        );
        assert_eq!(synced.matches(r#""synced" TIMESTAMP NOT NULL"#).count(), 2);
        if self == Y2018 {
            return synced;
        }
        // June2018, before 93d50c8: `scheduled UTCTime`, no recurrence (a6b4211); before
        // d1794c9 `intrayItemUUID Text`; before 41d9c3f no error of a triggered e-mail
        let instant = synced.replace(
            r#""scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,"#,
            r#""scheduled" TIMESTAMP NOT NULL,"#,
        );
        let scheduled = |d: &str| d.matches(r#""scheduled" TIMESTAMP NOT NULL,"#).count();
        assert_eq!(scheduled(&instant), scheduled(&synced) + 2);
        let text_uuid = edit(
            &instant,
            r#""intray_item_u_u_i_d" BLOB NULL"#,
            r#""intray_item_u_u_i_d" VARCHAR NULL"#,
        );
        edit(
            &text_uuid,
            r#""email" INTEGER NULL REFERENCES "email","error" VARCHAR NULL,CONSTRAINT "unique_triggered_email""#,
            r#""email" INTEGER NULL REFERENCES "email",CONSTRAINT "unique_triggered_email""#,
        )
    }
}
