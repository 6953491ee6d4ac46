//! The local control socket and the commands that use the data directory itself:
//! `pigeonhole backup` (asks the running server) and `pigeonhole restore` (server stopped).
//!
//! The server listens on `DATA_DIR/control.sock` (mode 0600 in the 0700 data directory, so
//! only the user that runs the server can connect: that is the credential, and no network
//! port is opened). One request per connection, one line of JSON each way:
//! `{"backup":"/absolute/path"}` → `{"records":…,"bytes":…,"paused_ms":…}` or
//! `{"error":"…"}`. The server writes the file itself (it has the data; the client may not
//! even be able to read the database while it runs), under a temporary name in the
//! destination's directory, synced, renamed, and the directory synced.

use crate::auth::tokens::KEY_FILE;
use crate::config::{default_data_dir, BackupArgs, RestoreArgs};
use crate::store::{self, BackupSummary, Store, StoreError};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The socket's name in the data directory.
pub const SOCKET: &str = "control.sock";

/// Serves the control socket of `data_dir` until `shutdown`, then removes it. `None` when it
/// cannot be bound (the server runs on without it; the reason is logged).
pub fn serve(store: Arc<Store>, data_dir: &Path, mut shutdown: watch::Receiver<bool>) -> Option<JoinHandle<()>> {
    let path = data_dir.join(SOCKET);
    // The store holds the data directory's lock, so a socket file here was left by a server
    // that is gone (killed): nobody answers on it.
    let _ = std::fs::remove_file(&path);
    let listener = match tokio::net::UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(
                "cannot listen on {}: {e}; `pigeonhole backup` will not reach this server",
                path.display()
            );
            return None;
        }
    };
    if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
        tracing::warn!("cannot make {} private: {e}; not serving it", path.display());
        let _ = std::fs::remove_file(&path);
        return None;
    }
    let data_dir = data_dir.to_path_buf();
    // one backup at a time: each holds the writer between two cycles while it reads
    let one_at_a_time = Arc::new(tokio::sync::Mutex::new(()));
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((conn, _)) = accepted else { continue };
                    let (store, dir, gate) = (store.clone(), data_dir.clone(), one_at_a_time.clone());
                    tokio::spawn(async move { answer(conn, store, dir, gate).await });
                }
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
        }
        let _ = std::fs::remove_file(&path);
    }))
}

/// Reads one request line (at most 4 KiB, within 10 s) and writes its answer.
async fn answer(conn: tokio::net::UnixStream, store: Arc<Store>, data_dir: PathBuf, gate: Arc<tokio::sync::Mutex<()>>) {
    let (read, mut write) = conn.into_split();
    let mut line = String::new();
    let mut limited = tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(read, 4096));
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), limited.read_line(&mut line)).await;
    let reply = match read {
        Ok(Ok(_)) => match serde_json::from_str::<Value>(&line) {
            Ok(request) => match request["backup"].as_str() {
                Some(dest) if Path::new(dest).is_absolute() => {
                    let dest = PathBuf::from(dest);
                    let _one = gate.lock().await;
                    let done = tokio::task::spawn_blocking(move || backup_file(&store, &data_dir, &dest)).await;
                    match done {
                        Ok(Ok(s)) => json!({
                            "records": s.records,
                            "bytes": s.bytes,
                            "paused_ms": s.paused.as_secs_f64() * 1000.0,
                        }),
                        Ok(Err(e)) => json!({ "error": e }),
                        Err(e) => json!({ "error": format!("the backup stopped: {e}") }),
                    }
                }
                Some(_) => json!({"error": "the backup's destination must be an absolute path"}),
                None => json!({"error": "unknown request: expected {\"backup\": \"/path\"}"}),
            },
            Err(e) => json!({ "error": format!("the request is not JSON: {e}") }),
        },
        Ok(Err(e)) => json!({ "error": format!("cannot read the request: {e}") }),
        Err(_) => return,
    };
    let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
    let _ = write.shutdown().await;
}

/// Writes a backup of `store` (and the token signing key of `data_dir`, so that tokens stay
/// valid after a restore) to `dest`: the whole file or nothing appears under that name.
pub fn backup_file(store: &Store, data_dir: &Path, dest: &Path) -> Result<BackupSummary, String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot write the backup {}: {e}", dest.display());
    if dest.is_dir() {
        return Err(format!(
            "{} is a directory: give the backup file's name",
            dest.display()
        ));
    }
    let key = match std::fs::read(data_dir.join(KEY_FILE)) {
        Ok(k) => Some(k),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot read the token signing key: {e}")),
    };
    let files: Vec<(&str, &[u8])> = key.iter().map(|k| (KEY_FILE, k.as_slice())).collect();
    // read back with the checks a restore makes before the backup takes its name (issue 29
    // point 7): a backup this version could not restore is never reported written
    let result = crate::files::write_checked(
        dest,
        crate::files::Access::Private,
        |file| store.admin.backup_to(file, &files),
        |written| store::verify(written, &[KEY_FILE]).map(drop),
    )
    .map_err(|e| match e {
        e @ StoreError::Undecodable { .. } => format!(
            "the backup was not written to {}: it could not be restored, because the database holds an {e} \
             (docs/backup.md)",
            dest.display()
        ),
        e => fail(&e),
    });
    if let Ok(s) = &result {
        tracing::info!(
            "backup written to {}: {} records, {} bytes; writes waited {:.1} ms",
            dest.display(),
            s.records,
            s.bytes,
            s.paused.as_secs_f64() * 1000.0
        );
    }
    result
}

fn data_dir(given: Option<PathBuf>) -> Result<PathBuf, String> {
    match given {
        Some(d) => Ok(d),
        None => default_data_dir().map_err(|e| e.to_string()),
    }
}

/// `pigeonhole backup DEST`: asks the server running on the data directory to write it.
/// Answers the line to print.
pub fn backup(args: BackupArgs) -> Result<String, String> {
    let dir = data_dir(args.data_dir)?;
    let dest = if args.dest.is_absolute() {
        args.dest.clone()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot tell the current directory: {e}"))?
            .join(&args.dest)
    };
    let socket = dir.join(SOCKET);
    let mut conn = std::os::unix::net::UnixStream::connect(&socket).map_err(|e| {
        format!(
            "no server answers at {} ({e}); is it running with --data-dir {}? (to copy the data of a \
             stopped server, copy its data directory)",
            socket.display(),
            dir.display()
        )
    })?;
    let path = dest
        .to_str()
        .ok_or_else(|| format!("{} is not a UTF-8 path", dest.display()))?;
    conn.write_all(format!("{}\n", json!({ "backup": path })).as_bytes())
        .map_err(|e| format!("cannot talk to the server: {e}"))?;
    let mut line = String::new();
    BufReader::new(conn)
        .read_line(&mut line)
        .map_err(|e| format!("the server broke off: {e}"))?;
    let answer: Value = serde_json::from_str(&line).map_err(|_| "the server broke off the backup".to_string())?;
    if let Some(e) = answer["error"].as_str() {
        return Err(e.to_owned());
    }
    Ok(format!(
        "backup written to {}: {} records, {} bytes (writes waited {:.1} ms)",
        dest.display(),
        answer["records"],
        answer["bytes"],
        answer["paused_ms"].as_f64().unwrap_or(0.0)
    ))
}

/// `pigeonhole restore SRC`: verifies the backup, then builds the database of the stopped
/// server's data directory from it. Answers the line to print.
pub fn restore(args: RestoreArgs) -> Result<String, String> {
    let dir = data_dir(args.data_dir)?;
    crate::datadir::private_umask();
    crate::datadir::prepare(&dir)?;
    if std::os::unix::net::UnixStream::connect(dir.join(SOCKET)).is_ok() {
        return Err(format!(
            "a server is running on {}: stop it before restoring",
            dir.display()
        ));
    }
    let summary = store::restore(&args.src, &dir, args.force, &[KEY_FILE]).map_err(|e| match e {
        StoreError::Locked(_) => format!("a server is running on {}: stop it before restoring", dir.display()),
        e => format!("cannot restore {}: {e}", args.src.display()),
    })?;
    Ok(format!(
        "restored {} records from {} into {}",
        summary.records,
        args.src.display(),
        dir.display()
    ))
}
