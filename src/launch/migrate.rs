//! `pigeonhole migrate-store --from DIR|URL --to DIR|URL` (issue 21 point 4): a stopped
//! server's whole database copied between engines, sled and PostgreSQL, either way, with
//! its signing key, checked by counts and a digest ([`crate::store::copy`]).
//!
//! The copy is orchestrated here, above the engines: open the source and the target (each
//! engine's [`Dump`] and [`Load`]), pipe the source's records into the target, check the
//! target, read back, against the source's tally, and keep it only then; anything else
//! discards it, so the target is as it was.

use crate::auth::tokens::KEY_FILE;
use crate::config::{DatabaseUrl, MigrateStoreArgs};
use crate::store::copy::{CopyError, Dump, Load, Record, Tally};
use crate::store::postgres::{Connection, PgSource, PgTarget};
use crate::store::{SledSource, SledTarget};
use std::fmt::Write;
use std::path::PathBuf;

/// A database to copy from or to.
#[derive(Clone, Debug)]
enum Place {
    /// The sled database of a data directory (stopped: opened under its lock).
    Sled(PathBuf),
    /// A PostgreSQL database (no Pigeonhole server connected to it).
    Postgres(Box<Connection>),
}

/// A `--from` or `--to`: a PostgreSQL URL, or a data directory.
fn place_of(given: &str, flag: &str) -> Result<(Place, String), String> {
    if given.starts_with("postgres://") || given.starts_with("postgresql://") {
        let url = DatabaseUrl::parse(given).map_err(|e| format!("{flag}: {e}"))?;
        let mut connection = super::database::connection(&url);
        // a copy's statements (COPY of whole tables) run as long as the data takes
        connection.bounds.statement = None;
        connection.bounds.lock = None;
        Ok((Place::Postgres(Box::new(connection)), url.redacted()))
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
        .block_on(copy_between(&from, &to, KEY_FILE))
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

/// What a copy did.
#[derive(Clone, Debug)]
struct Copied {
    /// Counts and digest of what was copied: the source's, and the target's read back.
    tally: Tally,
    /// Triggered items whose occurrence was left out (sled does not keep it).
    occurrences_left_out: u64,
}

/// Opens `from` and `to` (a sled data directory must be stopped; `to` must be empty: a
/// directory without a database, or a database without data) and copies the one into the
/// other ([`copy`]). `key_file` is the name of the token signing key's file in a sled data
/// directory (the key is copied too, so tokens stay valid).
async fn copy_between(from: &Place, to: &Place, key_file: &str) -> Result<Copied, CopyError> {
    if let (Place::Sled(a), Place::Sled(b)) = (from, to) {
        if a == b
            || a.canonicalize()
                .ok()
                .is_some_and(|a| b.canonicalize().is_ok_and(|b| a == b))
        {
            return Err(CopyError::Invalid(
                "the source and the target are the same directory".into(),
            ));
        }
    }
    let source: Box<dyn Dump> = match from {
        Place::Sled(dir) => Box::new(SledSource::open(dir, key_file)?),
        Place::Postgres(connection) => Box::new(PgSource::open(connection).await?),
    };
    let target: Box<dyn Load> = match to {
        Place::Sled(dir) => Box::new(SledTarget::open(dir, key_file)?),
        Place::Postgres(connection) => Box::new(PgTarget::open(connection).await?),
    };
    copy(source, target).await
}

/// Pipes every record of `source` into `target`, then keeps the target only when what it
/// holds, read back, has the source's counts and digest: all or nothing. Memory stays
/// bounded: records flow through channels of a few dozen, each engine reads and writes in
/// pages or flushed batches.
async fn copy(source: Box<dyn Dump>, target: Box<dyn Load>) -> Result<Copied, CopyError> {
    let keeps_occurrences = target.keeps_occurrences();
    let (source_tx, mut source_rx) = tokio::sync::mpsc::channel::<Record>(64);
    let (target_tx, target_rx) = tokio::sync::mpsc::channel::<Record>(64);
    let dumper = tokio::spawn(source.dump(source_tx));
    let loader = tokio::spawn(target.load(target_rx));
    let mut tally = Tally::default();
    let mut occurrences_left_out = 0;
    while let Some(mut record) = source_rx.recv().await {
        if let (false, Record::Triggered { occurrence, .. }) = (keeps_occurrences, &mut record) {
            if occurrence.take().is_some() {
                occurrences_left_out += 1;
            }
        }
        tally.add(&record);
        if target_tx.send(record).await.is_err() {
            break;
        }
    }
    // a dumper still sending stops at its next record; the load's stream ends here
    drop(source_rx);
    drop(target_tx);
    let dumped = dumper
        .await
        .unwrap_or_else(|e| Err(CopyError::Invalid(format!("the dump's task failed: {e}"))));
    let loaded = loader
        .await
        .unwrap_or_else(|e| Err(CopyError::Invalid(format!("the load's task failed: {e}"))));
    // an error drops what was loaded: the target is discarded
    let loaded = match (dumped, loaded) {
        // the dumper stopped because the load ended: the load says why
        (Err(CopyError::Stopped) | Ok(()), Err(e)) => return Err(e),
        (Err(e), _) => return Err(e),
        (Ok(()), Ok(loaded)) => loaded,
    };
    if *loaded.tally() != tally {
        return Err(CopyError::Mismatch {
            source: tally,
            target: loaded.tally().clone(),
        });
    }
    loaded.keep().await?;
    Ok(Copied {
        tally,
        occurrences_left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::copy::samples::{channel_of, every_kind, every_kind_for_sled};
    use crate::store::copy::Loaded;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const KEY_FILE: &str = "signing.key";

    /// A source that sends `records`, then fails (`broken`) or ends.
    struct Records {
        records: Vec<Record>,
        broken: bool,
    }

    #[async_trait::async_trait]
    impl Dump for Records {
        async fn dump(self: Box<Self>, out: tokio::sync::mpsc::Sender<Record>) -> Result<(), CopyError> {
            for r in self.records {
                out.send(r).await.map_err(|_| CopyError::Stopped)?;
            }
            match self.broken {
                true => Err(CopyError::Invalid("the source broke".into())),
                false => Ok(()),
            }
        }
    }

    /// A target that takes every record and reads back one more than it was given; whether
    /// it was kept.
    struct OneMore(Arc<AtomicBool>);

    struct OneMoreLoaded(Tally, Arc<AtomicBool>);

    #[async_trait::async_trait]
    impl Load for OneMore {
        fn keeps_occurrences(&self) -> bool {
            true
        }

        async fn load(
            self: Box<Self>,
            mut records: tokio::sync::mpsc::Receiver<Record>,
        ) -> Result<Box<dyn Loaded>, CopyError> {
            let mut tally = Tally::default();
            while let Some(r) = records.recv().await {
                tally.add(&r);
            }
            tally.add(&Record::PaymentEvent {
                id: "evt_more".into(),
                failed: None,
            });
            Ok(Box::new(OneMoreLoaded(tally, self.0)))
        }
    }

    #[async_trait::async_trait]
    impl Loaded for OneMoreLoaded {
        fn tally(&self) -> &Tally {
            &self.0
        }

        async fn keep(self: Box<Self>) -> Result<(), CopyError> {
            self.1.store(true, Ordering::SeqCst);
            Ok(())
        }
    }

    fn tally_of(records: &[Record]) -> Tally {
        let mut tally = Tally::default();
        records.iter().for_each(|r| tally.add(r));
        tally
    }

    /// A sled data directory holding `records`.
    async fn sled_with(dir: &Path, records: Vec<Record>) -> Tally {
        let loaded = Box::new(SledTarget::open(dir, KEY_FILE).expect("target"))
            .load(channel_of(records))
            .await
            .expect("load");
        let tally = loaded.tally().clone();
        loaded.keep().await.expect("keep");
        tally
    }

    fn nothing_in(dir: &Path) -> bool {
        !dir.join("db").exists() && !dir.join(".migrating").exists() && !dir.join(KEY_FILE).exists()
    }

    /// sled → sled: the same counts and digest, the signing key with them, and a source
    /// with an occurrence (which sled does not keep) is copied without it, counted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_copy_keeps_the_counts_and_digest_and_counts_what_sled_leaves_out() {
        let dirs = tempfile::tempdir().expect("temporary directory");
        let (source, target) = (dirs.path().join("source"), dirs.path().join("target"));
        let original = sled_with(&source, every_kind_for_sled()).await;
        let copied = copy_between(&Place::Sled(source.clone()), &Place::Sled(target.clone()), KEY_FILE)
            .await
            .expect("copy");
        assert_eq!((copied.tally, copied.occurrences_left_out), (original.clone(), 0));
        assert_eq!(std::fs::read(target.join(KEY_FILE)).expect("key"), vec![9; 32]);
        let again = copy_between(&Place::Sled(source.clone()), &Place::Sled(target), KEY_FILE).await;
        assert!(matches!(again, Err(CopyError::NotEmpty(_))), "{again:?}");
        let same = copy_between(&Place::Sled(source.clone()), &Place::Sled(source), KEY_FILE).await;
        assert!(
            matches!(same, Err(CopyError::Invalid(ref m)) if m.contains("same directory")),
            "{same:?}"
        );

        let third = dirs.path().join("third");
        let with_occurrence = Box::new(Records {
            records: every_kind(),
            broken: false,
        });
        let target = Box::new(SledTarget::open(&third, KEY_FILE).expect("target"));
        let copied = copy(with_occurrence, target).await.expect("copy");
        assert_eq!((copied.tally, copied.occurrences_left_out), (original, 1));
    }

    /// A source that fails midway: the copy answers the source's error and the target
    /// keeps nothing (no database, no half-built one, no signing key).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_source_that_fails_midway_leaves_the_target_empty() {
        let dirs = tempfile::tempdir().expect("temporary directory");
        let records = every_kind_for_sled();
        let broken = Box::new(Records {
            records: records[..records.len() - 2].to_vec(),
            broken: true,
        });
        let target = Box::new(SledTarget::open(dirs.path(), KEY_FILE).expect("target"));
        let failed = copy(broken, target).await;
        assert!(
            matches!(failed, Err(CopyError::Invalid(ref m)) if m == "the source broke"),
            "{failed:?}"
        );
        assert!(nothing_in(dirs.path()));
    }

    /// A target whose read-back differs from the source: a mismatch, and it is not kept.
    #[tokio::test]
    async fn a_target_that_reads_back_otherwise_is_not_kept() {
        let kept = Arc::new(AtomicBool::new(false));
        let source = Box::new(Records {
            records: every_kind(),
            broken: false,
        });
        let mismatch = copy(source, Box::new(OneMore(kept.clone()))).await;
        match mismatch {
            Err(CopyError::Mismatch { source, target }) => {
                assert_eq!(source, tally_of(&every_kind()));
                assert_eq!(target.total(), source.total() + 1);
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
        assert!(!kept.load(Ordering::SeqCst), "a mismatching target was kept");
    }

    /// sled → PostgreSQL → sled: the same tally at every step; from PostgreSQL to sled the
    /// occurrence is left out, and counted.
    #[test]
    fn a_copy_goes_from_sled_to_postgresql_and_back() {
        use crate::store::postgres::{Host, TlsMode};
        let Some(cluster) = cluster::Cluster::start_or_skip("a_copy_goes_from_sled_to_postgresql_and_back") else {
            return;
        };
        let connection = |database: String| {
            Connection::new(
                "postgres",
                Host::Unix(cluster.socket_dir().to_path_buf()),
                cluster.port(),
                &database,
                TlsMode::Prefer,
            )
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let dirs = tempfile::tempdir().expect("temporary directory");
            let source = dirs.path().join("source");
            let original = sled_with(&source, every_kind_for_sled()).await;
            let postgres = Place::Postgres(Box::new(connection(cluster.fresh_database())));
            let there = copy_between(&Place::Sled(source.clone()), &postgres, KEY_FILE)
                .await
                .expect("sled to PostgreSQL");
            assert_eq!(there.tally, original);
            let back_dir = dirs.path().join("back");
            let back = copy_between(&postgres, &Place::Sled(back_dir.clone()), KEY_FILE)
                .await
                .expect("PostgreSQL to sled");
            assert_eq!((back.tally, back.occurrences_left_out), (original.clone(), 0));
            // into a directory that has a database: refused, and the source is untouched
            let again = copy_between(&Place::Sled(source.clone()), &Place::Sled(back_dir), KEY_FILE).await;
            assert!(matches!(again, Err(CopyError::NotEmpty(_))), "{again:?}");
            // into a PostgreSQL database that has data: refused
            let full = copy_between(&Place::Sled(source), &postgres, KEY_FILE).await;
            assert!(matches!(full, Err(CopyError::NotEmpty(_))), "{full:?}");

            // a database with an occurrence (made by triggering on PostgreSQL)
            let other = connection(cluster.fresh_database());
            let with_occurrence = Box::new(Records {
                records: every_kind(),
                broken: false,
            });
            copy(with_occurrence, Box::new(PgTarget::open(&other).await.expect("target")))
                .await
                .expect("load");
            let out = copy_between(
                &Place::Postgres(Box::new(other)),
                &Place::Sled(dirs.path().join("third")),
                KEY_FILE,
            )
            .await
            .expect("to sled");
            assert_eq!((out.tally, out.occurrences_left_out), (original, 1));
        });
    }

    /// The throwaway cluster of tests/common/postgres.rs, as the engine's tests include it.
    use crate::store::postgres::tests::cluster;
}
