//! sled 0.34 alone, with the server's cache capacity: what its process holds after writing
//! or reading a tree (resident memory, anonymous memory, live heap counted by a wrapping
//! allocator, after `malloc_trim` as the idle server does). Not part of the server.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator with the same arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static A: Counting = Counting;

fn kib(file: &str, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn report(what: &str) {
    // SAFETY: malloc_trim only releases memory no allocation uses.
    unsafe {
        libc::malloc_trim(0);
    }
    println!(
        "{what}: RSS {} MiB, anonymous {} MiB, live heap {} MiB (zeroed allocations sled never touched included)",
        kib("/proc/self/status", "VmRSS:") / 1024,
        kib("/proc/self/smaps_rollup", "Anonymous:") / 1024,
        LIVE.load(Ordering::Relaxed) >> 20
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: sled-memory DIR fill MB VALUE_BYTES | DIR scan LOOKUPS";
    let (dir, mode) = match (args.get(1), args.get(2)) {
        (Some(d), Some(m)) => (d, m.as_str()),
        _ => panic!("{usage}"),
    };
    let number = |i: usize| -> usize { args.get(i).and_then(|v| v.parse().ok()).expect(usage) };
    // SAFETY: a parameter of glibc's allocator, set before any thread starts (as the server).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    // the server's configuration (src/store/sled/mod.rs)
    let db = sled::Config::new().path(dir).cache_capacity(2 << 20).open().expect("open");
    let tree = db.open_tree("inbox").expect("tree");
    report("opened");
    let started = Instant::now();
    match mode {
        "fill" => {
            let (mb, size) = (number(3), number(4));
            let mut batch = sled::Batch::default();
            for i in 0..mb * 1_000_000 / size {
                batch.insert(&(i as u64).to_be_bytes()[..], vec![b'x'; size]);
                if i % 64 == 63 {
                    tree.apply_batch(std::mem::take(&mut batch)).expect("batch");
                    db.flush().expect("flush");
                }
            }
            tree.apply_batch(batch).expect("batch");
            db.flush().expect("flush");
            report(&format!("filled in {:?}", started.elapsed()));
        }
        "scan" => {
            let lookups = number(3);
            let (mut values, mut bytes) = (0, 0);
            for record in tree.iter() {
                let (key, value) = record.expect("record");
                for _ in 0..lookups {
                    tree.get(&key).expect("get");
                }
                values += 1;
                bytes += value.len();
            }
            report(&format!(
                "read {values} values ({} MB) in {:?}, each looked up {lookups} more times",
                bytes / 1_000_000,
                started.elapsed()
            ));
        }
        _ => panic!("{usage}"),
    }
}
