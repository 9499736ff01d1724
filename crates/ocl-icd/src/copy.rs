//! Large copies between the application's memory and shared memory, on two threads.
//!
//! On the shared-memory path the application's thread itself copies write data into a
//! buffer and read results out of it (native PoCL makes the same copies in one of its
//! worker threads). One core copies 1 MiB in 45–60 µs from its own cache and in 85–100 µs
//! from memory another core just wrote — which is where a kernel's results are, since
//! the device's threads wrote them — while two cores, each copying what it holds, take
//! 18–23 µs (2-core VM of `docs/benchmarks.md`, 2000 copies, medians). So a copy of at
//! least [`PARALLEL_MIN`] bytes is cut into [`CHUNK`]-sized pieces that the calling
//! thread and helper threads take in turn: the caller starts at once and a helper joins
//! when it has woken up, so a helper that is late (a busy machine) costs the caller
//! nothing but the call that wakes it; the caller returns once every piece is copied.
//!
//! `NETACCEL_OPENCL_COPY_THREADS` sets the number of helper threads (default 1 on a
//! machine with two CPUs or more, at most 8; `0` turns the helpers off).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Copies shorter than this are made by the caller alone: waking a helper costs a few
/// µs, and one core copies 256 KiB in about 12 µs.
pub const PARALLEL_MIN: usize = 256 << 10;
/// The piece the threads take in turn; the caller waits at most for the pieces that
/// helpers are copying when it runs out (64 KiB: 3–5 µs).
pub const CHUNK: usize = 64 << 10;
/// Environment variable: number of helper threads.
pub const THREADS_ENV: &str = "NETACCEL_OPENCL_COPY_THREADS";
const THREADS_MAX: usize = 8;

/// Copies `len` bytes from `src` to `dst`, with helper threads when it is large.
///
/// # Safety
/// As for `std::ptr::copy_nonoverlapping`: `src` readable and `dst` writable for `len`
/// bytes, not overlapping, and neither changed by anyone else until this returns.
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    match pool() {
        Some(pool) if len >= PARALLEL_MIN => pool.copy(dst, src, len),
        _ => std::ptr::copy_nonoverlapping(src, dst, len),
    }
}

/// One copy, shared by its caller and the helpers that pick it up.
struct Job {
    dst: usize,
    src: usize,
    len: usize,
    chunks: usize,
    /// The next piece to claim; claims at or past `chunks` find nothing.
    next: AtomicUsize,
    /// Pieces copied.
    done: AtomicUsize,
    /// Woken by the helper that copies the last piece.
    caller: std::thread::Thread,
}

impl Job {
    /// Copies pieces until none is left to claim.
    ///
    /// # Safety
    /// The job's memory is valid while some piece is unfinished, which holds because its
    /// caller does not return before `done == chunks` and a piece is only touched after
    /// it was claimed.
    unsafe fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.chunks {
                return;
            }
            let start = i * CHUNK;
            let n = CHUNK.min(self.len - start);
            std::ptr::copy_nonoverlapping(
                (self.src + start) as *const u8,
                (self.dst + start) as *mut u8,
                n,
            );
            // Release: the caller that sees the count sees the bytes.
            if self.done.fetch_add(1, Ordering::Release) + 1 == self.chunks {
                self.caller.unpark();
            }
        }
    }
}

#[derive(Default)]
struct Slot {
    /// The latest job posted (helpers skip one whose pieces are all claimed).
    job: Option<Arc<Job>>,
    /// Bumped on every post, so that a helper works on each job once.
    generation: u64,
}

struct Pool {
    slot: Mutex<Slot>,
    posted: Condvar,
}

fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<&'static Pool>> = OnceLock::new();
    *POOL.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let helpers = threads_from(std::env::var(THREADS_ENV).ok().as_deref(), cpus);
        if helpers == 0 {
            return None;
        }
        let pool: &'static Pool = Box::leak(Box::new(Pool::new()));
        let mut started = 0;
        for i in 0..helpers {
            let spawned = std::thread::Builder::new()
                .name(format!("netaccel-copy-{i}"))
                .spawn(move || pool.help());
            started += usize::from(spawned.is_ok());
        }
        (started > 0).then_some(pool)
    })
}

/// The number of helper threads for the variable's value and the machine's CPUs.
fn threads_from(value: Option<&str>, cpus: usize) -> usize {
    match value.map(|v| v.trim().parse::<usize>()) {
        Some(Ok(n)) => n.min(THREADS_MAX),
        _ => usize::from(cpus >= 2),
    }
}

impl Pool {
    fn new() -> Pool {
        Pool {
            slot: Mutex::new(Slot::default()),
            posted: Condvar::new(),
        }
    }

    /// A helper thread: works on every job posted, forever.
    fn help(&self) {
        let mut seen = 0u64;
        loop {
            let job = {
                let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
                while slot.generation == seen || slot.job.is_none() {
                    slot = self.posted.wait(slot).unwrap_or_else(|p| p.into_inner());
                }
                seen = slot.generation;
                slot.job.clone().expect("checked above")
            };
            // SAFETY: see Job::work.
            unsafe { job.work() };
        }
    }

    /// # Safety
    /// As for [`copy`].
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) {
        let job = Arc::new(Job {
            dst: dst as usize,
            src: src as usize,
            len,
            chunks: len.div_ceil(CHUNK),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            caller: std::thread::current(),
        });
        {
            // A job still in the slot is finished (its caller waited for it) or being
            // finished by its caller: replacing it loses nothing.
            let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
            slot.job = Some(Arc::clone(&job));
            slot.generation += 1;
        }
        self.posted.notify_all();
        job.work();
        // At most one piece per helper is still being copied. Sleep rather than yield
        // while waiting for it: a yielding thread may keep the core from a helper that
        // shares it (seen as 2–4 ms outliers in 1–3 % of copies).
        while job.done.load(Ordering::Acquire) < job.chunks {
            std::thread::park();
        }
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.job.as_ref().is_some_and(|j| Arc::ptr_eq(j, &job)) {
            slot.job = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_count_follows_the_variable_and_the_machine() {
        assert_eq!(threads_from(None, 1), 0);
        assert_eq!(threads_from(None, 2), 1);
        assert_eq!(threads_from(None, 64), 1);
        assert_eq!(threads_from(Some("0"), 8), 0);
        assert_eq!(threads_from(Some(" 3 "), 1), 3);
        assert_eq!(threads_from(Some("1000"), 8), THREADS_MAX);
        assert_eq!(threads_from(Some("many"), 4), 1);
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn copies_of_every_size_are_exact_with_and_without_helpers() {
        let alone = Pool::new();
        let with_helper: &'static Pool = Box::leak(Box::new(Pool::new()));
        std::thread::spawn(move || with_helper.help());
        for len in [
            0,
            1,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            PARALLEL_MIN,
            3 * CHUNK + 17,
            (1 << 20) + 5,
        ] {
            let src = pattern(len, len as u8);
            // No helper at all: the caller copies every piece.
            let mut dst = vec![0u8; len];
            unsafe { alone.copy(dst.as_mut_ptr(), src.as_ptr(), len) };
            assert!(dst == src, "alone, {len} bytes");
            // With a helper thread.
            for round in 0..20u8 {
                let src = pattern(len, round);
                let mut dst = vec![0u8; len];
                unsafe { with_helper.copy(dst.as_mut_ptr(), src.as_ptr(), len) };
                assert!(dst == src, "with a helper, {len} bytes, round {round}");
            }
            // The public entry point, whatever the machine.
            let mut dst = vec![0u8; len];
            unsafe { copy(dst.as_mut_ptr(), src.as_ptr(), len) };
            assert!(dst == src, "copy(), {len} bytes");
        }
    }

    #[test]
    fn concurrent_callers_each_get_their_own_bytes() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new()));
        std::thread::spawn(move || pool.help());
        let callers: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..30u8 {
                        let len = PARALLEL_MIN + usize::from(t) * 4099 + usize::from(round);
                        let src = pattern(len, t ^ round);
                        let mut dst = vec![0u8; len];
                        unsafe { pool.copy(dst.as_mut_ptr(), src.as_ptr(), len) };
                        assert!(dst == src, "caller {t}, round {round}");
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
    }
}
