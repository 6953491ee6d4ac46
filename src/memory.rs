//! The process's heap. An allocator keeps memory that a burst of work freed (a full sync of
//! a large inbox, a fill of thousands of items) inside the process. For a small server that
//! mostly sits idle on a small machine this is the wrong trade, so:
//!
//! * the binary's Rust code allocates from jemalloc (`src/main.rs`: two arenas, small thread
//!   caches, freed pages handed back after half a second by its background thread);
//! * [`limit_arenas`] (called by `main` before any thread starts) allows glibc's malloc,
//!   which C code still uses (SQLite), two arenas;
//! * [`release_when_idle`] hands free heap pages of both back to the kernel once requests
//!   have stopped for a second after some activity ([`note_activity`]).
//!
//! Each is a no-op where its allocator is not there. Measurements are in
//! docs/performance.md.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

static ACTIVITY: AtomicU64 = AtomicU64::new(0);

/// Records that a request was served (cheap: one relaxed atomic add).
pub fn note_activity() {
    ACTIVITY.fetch_add(1, Ordering::Relaxed);
}

/// At most two malloc arenas. Call before starting threads.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code, reason = "std has no safe mallopt (glibc)")]
    // SAFETY: mallopt only sets a parameter of glibc's allocator; it is called before the
    // runtime starts any thread, and M_ARENA_MAX with a positive value is a valid setting.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Returns free heap pages to the kernel (jemalloc's and glibc's).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", not(target_env = "musl")))]
    #[allow(unsafe_code, reason = "jemalloc's control interface is a C function")]
    // SAFETY: `arena.4096.purge` (4096 names every arena) reads and writes no value: both
    // value pointers are null and the length 0, as jemalloc requires of it; the name is a
    // NUL-terminated string. It is thread-safe (it takes the arenas' locks).
    unsafe {
        let _ = tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code, reason = "std has no safe malloc_trim (glibc)")]
    // SAFETY: malloc_trim is thread-safe (it takes each arena's lock) and only releases
    // memory that no allocation uses.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Releases free memory once activity has stopped for a second (checked every second),
/// until `shutdown` turns true.
pub async fn release_when_idle(mut shutdown: watch::Receiver<bool>) {
    let mut state = Quiet::new(ACTIVITY.load(Ordering::Relaxed));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        if state.check(ACTIVITY.load(Ordering::Relaxed)) {
            tokio::task::spawn_blocking(release_free_memory);
        }
    }
}

/// When to release: after a whole check interval without requests, once per burst.
struct Quiet {
    seen: u64,
    released: u64,
}

impl Quiet {
    fn new(now: u64) -> Quiet {
        Quiet {
            seen: now,
            released: now,
        }
    }

    /// Given the activity counter now, whether to release memory.
    fn check(&mut self, now: u64) -> bool {
        let release = now == self.seen && now != self.released;
        if release {
            self.released = now;
        }
        self.seen = now;
        release
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_once_after_each_burst_when_requests_stop() {
        let mut q = Quiet::new(5);
        assert!(!q.check(5), "no requests since start: nothing to release");
        assert!(!q.check(9), "busy");
        assert!(!q.check(20), "still busy");
        assert!(q.check(20), "quiet for a whole interval after a burst");
        assert!(!q.check(20), "released already");
        assert!(!q.check(21));
        assert!(q.check(21));
    }
}
