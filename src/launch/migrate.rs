//! `pigeonhole migrate-store --from DIR|URL --to DIR|URL` (issue 21 point 4): a stopped
//! server's whole database copied between engines, sled and PostgreSQL, either way, with
//! its signing key, checked by counts and a digest ([`crate::store::copy`]).

use crate::auth::tokens::KEY_FILE;
use crate::config::{DatabaseUrl, MigrateStoreArgs};
use crate::store::copy::{self, Place};
use std::fmt::Write;

/// A `--from` or `--to`: a PostgreSQL URL, or a data directory.
fn place_of(given: &str, flag: &str) -> Result<(Place, String), String> {
    if given.starts_with("postgres://") || given.starts_with("postgresql://") {
        let url = DatabaseUrl::parse(given).map_err(|e| format!("{flag}: {e}"))?;
        Ok((Place::Postgres(super::database::connection(&url)), url.redacted()))
    } else if given.is_empty() {
        Err(format!("{flag}: give a data directory or a postgres:// URL"))
    } else {
        let dir = std::path::PathBuf::from(given);
        Ok((Place::Sled(dir.clone()), dir.display().to_string()))
    }
}

/// Runs the copy; answers the report to print (what was copied and its check).
pub fn migrate_store(args: MigrateStoreArgs) -> Result<String, String> {
    let (from, from_name) = place_of(&args.from, "--from")?;
    let (to, to_name) = place_of(&args.to, "--to")?;
    crate::datadir::private_umask();
    // items pass through every thread: without the limit, each thread's arena keeps its own
    crate::memory::limit_arenas();
    if let Place::Sled(dir) = &to {
        crate::datadir::prepare(dir)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let copied = runtime
        .block_on(copy::copy(&from, &to, KEY_FILE))
        .map_err(|e| format!("cannot copy {from_name} into {to_name}: {e}"))?;
    let mut report = format!("copied {from_name} into {to_name}:\n{}", copied.tally);
    let _ = write!(
        report,
        "checked: {to_name}, read back, has these counts and this digest",
    );
    if copied.occurrences_left_out > 0 {
        let _ = write!(
            report,
            "\n{} triggered items' occurrences were left out (sled keeps none: they only keep several \
             processes from triggering one occurrence twice)",
            copied.occurrences_left_out
        );
    }
    Ok(report)
}
