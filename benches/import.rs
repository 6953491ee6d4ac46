//! Benchmark of `pigeonhole import` of a large export (not a test): writes an export file of
//! small inbox items (1 GiB by default), starts the release server on loopback with a fresh
//! data directory, sets up a client and runs `pigeonhole import FILE`, then prints one row:
//! file size, items, wall time, and the peak RSS (`VmHWM`) of the client and of the server.
//!
//! Run with `cargo bench --bench import` (a program of its own, no test harness; never part
//! of `cargo test`). Options after `--`: `--mb N` (file size in MiB, default 1024).
//! Needs about three times the file's size of free disk under the temporary directory.

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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mb: u64 = args
        .iter()
        .position(|a| a == "--mb")
        .and_then(|i| args.get(i + 1))
        .map_or(1024, |v| v.parse().expect("--mb N"));
    let bin = std::env::var("PIGEONHOLE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pigeonhole").to_owned());
    let dir = tempfile::tempdir().expect("temporary directory");
    let export = dir.path().join("export.json");
    // an item is about 135 bytes
    let items = (mb * 1024 * 1024 / 135) as usize;
    let size = write_export(&export, items);
    eprintln!("wrote {} ({size} bytes, {items} items)", export.display());

    let (inbox_port, scheduler_port) = (free_port(), free_port());
    let data = dir.path().join("data");
    let mut server = Command::new(&bin)
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
        let mut c = Command::new(&bin);
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
