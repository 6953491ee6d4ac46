//! Benchmark of importing (not a test), two parts:
//!
//! * **export**: `pigeonhole import` of a large export: writes an export file of small inbox
//!   items (1 GiB by default), starts the release server on loopback with a fresh data
//!   directory, sets up a client and runs `pigeonhole import FILE`, then prints one row: file
//!   size, items, wall time, and the peak RSS (`VmHWM`) of the client and of the server.
//! * **originals**: `pigeonhole import-intray` of an Intray database of 2,000,000 items and
//!   `import-tickler` of a Tickler database of 1,000,000 rows (benches/common/originals.rs
//!   makes them), each into a fresh data directory: rows per second and the import
//!   process's peak RSS (docs/moving-in.md has the figures).
//!
//! Run with `cargo bench --bench import` (a program of its own, no test harness; never part
//! of `cargo test`). Options after `--`: `--only export` or `--only originals` (default:
//! both), `--mb N` (the export's size in MiB, default 1024), `--intray N` and `--tickler N`
//! (rows). Needs about three times the export's size of free disk under the temporary
//! directory, and 4 GB for the originals.

#[path = "../tests/originals/ddl.rs"]
#[allow(dead_code)]
mod ddl;
#[path = "common/originals.rs"]
mod originals;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field).and_then(|v| v.strip_prefix(':')))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Writes an export of `items` small text items; answers its size in bytes.
fn write_export(path: &Path, items: usize) -> u64 {
    let file = std::fs::File::create(path).expect("create the export");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    out.write_all(br#"{"format":"pigeonhole-export","version":1,"inbox":{"format":"pigeonhole-inbox-export","version":1,"access-keys":[],"items":["#)
        .unwrap();
    for i in 0..items {
        if i > 0 {
            out.write_all(b",").unwrap();
        }
        let id = uuid::Uuid::from_u128(0x1234_0000_0000_4000_8000_0000_0000_0000 | i as u128);
        write!(
            out,
            r#"{{"contents":{{"data":"{:08}","type":"text"}},"created":"2024-01-01T00:00:00.{:09}Z","id":"{id}"}}"#,
            i % 100_000_000,
            i % 1_000_000_000
        )
        .unwrap();
    }
    out.write_all(br#"]},"scheduler":{"format":"pigeonhole-scheduler-export","version":1}}"#)
        .unwrap();
    out.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

/// The value after `--name` in `args`, if any.
fn option<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only = option(&args, "--only");
    let bin = std::env::var("PIGEONHOLE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pigeonhole").to_owned());
    if only != Some("originals") {
        export(&args, &bin);
    }
    if only != Some("export") {
        move_ins(&args, &bin);
    }
}

/// Runs `pigeonhole COMMAND FILE --data-dir DATA` to its end; answers its wall time in
/// seconds and peak RSS in KiB (sampled: `VmHWM` only grows) and prints its output.
fn run_sampled(bin: &str, command: &str, file: &Path, data: &Path) -> (f64, u64) {
    let started = Instant::now();
    let mut child = Command::new(bin)
        .args([command, file.to_str().expect("path"), "--data-dir"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the import");
    let mut peak = 0;
    while child.try_wait().expect("poll the import").is_none() {
        if let Some(kib) = status_kib(child.id(), "VmHWM") {
            peak = peak.max(kib);
        }
        std::thread::sleep(Duration::from_millis(20)); // sampling
    }
    let took = started.elapsed().as_secs_f64();
    let out = child.wait_with_output().expect("the import's output");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", said.trim());
    (took, peak)
}

/// `import-intray` and `import-tickler` of large originals' databases.
fn move_ins(args: &[String], bin: &str) {
    let rows = |name, default: u64| option(args, name).map_or(default, |v| v.parse().expect("a number of rows"));
    let (intray, tickler) = (rows("--intray", 2_000_000), rows("--tickler", 1_000_000));
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut table = Vec::new();
    let intray_file = dir.path().join("intray.sqlite3");
    originals::intray_file(&intray_file, &ddl::IntrayLayout::Since2020.ddl(), intray);
    let (took, peak) = run_sampled(bin, "import-intray", &intray_file, &dir.path().join("intray-data"));
    table.push(("import-intray", intray, &intray_file, took, peak));
    let tickler_file = dir.path().join("tickler.sqlite3");
    originals::tickler_file(&tickler_file, &ddl::TicklerLayout::Since2022.ddl(), tickler);
    let (took, peak) = run_sampled(bin, "import-tickler", &tickler_file, &dir.path().join("tickler-data"));
    table.push(("import-tickler", tickler, &tickler_file, took, peak));
    println!("| command | rows | file | time | rows/s | peak RSS |");
    println!("|---|---|---|---|---|---|");
    for (command, rows, file, took, peak) in table {
        let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        println!(
            "| {command} | {rows} | {:.0} MiB | {took:.0} s | {:.0} | {:.0} MiB |",
            size as f64 / 1048576.0,
            rows as f64 / took,
            peak as f64 / 1024.0
        );
    }
}

/// `pigeonhole import` of a large export into a running server.
fn export(args: &[String], bin: &str) {
    let mb: u64 = option(args, "--mb").map_or(1024, |v| v.parse().expect("--mb N"));
    let dir = tempfile::tempdir().expect("temporary directory");
    let export = dir.path().join("export.json");
    // an item is about 135 bytes
    let items = (mb * 1024 * 1024 / 135) as usize;
    let size = write_export(&export, items);
    eprintln!("wrote {} ({size} bytes, {items} items)", export.display());

    let (inbox_port, scheduler_port) = (free_port(), free_port());
    let data = dir.path().join("data");
    let mut server = Command::new(bin)
        .args(["serve", "--host", "127.0.0.1", "--password-iterations", "1000"])
        .arg("--data-dir")
        .arg(&data)
        .args(["--inbox-port", &inbox_port.to_string()])
        .args(["--scheduler-port", &scheduler_port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let inbox = format!("http://127.0.0.1:{inbox_port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", inbox_port)).is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(50)); // poll
    }
    let home = dir.path().join("home");
    let client = |args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(args)
            .env("XDG_CONFIG_HOME", &home)
            .env("PIGEONHOLE_PASSWORD", "correct horse battery staple")
            .env_remove("PIGEONHOLE_CLIENT_CONFIG");
        c
    };
    let scheduler = format!("http://127.0.0.1:{scheduler_port}");
    let setup = client(&[
        "setup",
        "--inbox-url",
        &inbox,
        "--scheduler-url",
        &scheduler,
        "--username",
        "bench",
    ])
    .output()
    .expect("run setup");
    assert!(setup.status.success(), "{}", String::from_utf8_lossy(&setup.stderr));

    let server_before = status_kib(server.id(), "VmHWM").unwrap_or(0);
    let started = Instant::now();
    let mut import = client(&["import", export.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run import");
    let mut client_peak = 0;
    while import.try_wait().expect("poll the import").is_none() {
        if let Some(kib) = status_kib(import.id(), "VmHWM") {
            client_peak = client_peak.max(kib);
        }
        std::thread::sleep(Duration::from_millis(50)); // sampling
    }
    let took = started.elapsed();
    let out = import.wait_with_output().expect("the import's output");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    let server_peak = status_kib(server.id(), "VmHWM").unwrap_or(0);
    let _ = server.kill();
    let _ = server.wait();
    println!("{}", said.trim());
    println!("| file | items | time | client peak RSS | server peak RSS (before) |");
    println!("|---|---|---|---|---|");
    println!(
        "| {:.0} MiB | {items} | {:.0} s | {:.0} MiB | {:.0} MiB ({:.0} MiB) |",
        size as f64 / 1048576.0,
        took.as_secs_f64(),
        client_peak as f64 / 1024.0,
        server_peak as f64 / 1024.0,
        server_before as f64 / 1024.0,
    );
}
