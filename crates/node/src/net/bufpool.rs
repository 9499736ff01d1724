//! Per-network-thread pool of I/O buffers.
//!
//! A node holds tens of thousands of connections, nearly all idle. A connection that
//! kept its own read and write buffers between requests would cost their capacity
//! while idle (4–64 KiB each, times the connections). Instead a connection takes a
//! buffer from this pool when bytes are pending (input became readable, output is to
//! be written) and gives it back once they are consumed, so an idle connection holds
//! no buffer at all and the memory in buffers follows the busy connections.
//!
//! Each network thread runs a single-threaded runtime and a connection never leaves
//! its thread, so the pool is thread-local: no lock, no contention. It is bounded in
//! count and in the size of buffer it keeps; anything beyond goes back to the
//! allocator.

use std::cell::RefCell;

/// Buffers kept per thread. Enough for every connection a network thread serves in
/// one turn of a busy loop; idle connections need none.
const KEPT_MAX: usize = 256;
/// Largest buffer kept; a larger one (a big response, a long payload) is freed.
const KEPT_BYTES_MAX: usize = 64 * 1024;
/// Pooled buffers [`take`] looks at for one with room enough, from the most recently
/// given. A connection gives back its read, output and payload buffers together and
/// takes them again in another order; without the look, a 64 KiB read buffer taken
/// right after a small output buffer was given back grew that small one (a `realloc`
/// per call, and the next small take shrank nothing but grew the next), issue 28.
const FIT_LOOK_MAX: usize = 8;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least `len` bytes: a pooled one when there is
/// one (one with room enough among the last [`FIT_LOOK_MAX`] given, else the last
/// given, grown), else a new one.
pub fn take(len: usize) -> Vec<u8> {
    let mut buf = POOL.with(|p| {
        let mut pool = p.borrow_mut();
        let last = pool.len();
        // Indices rather than a sub-slice's iterator: its length, counted in elements
        // of 24 bytes, took a multiplication and a division per take (issue 28).
        let mut at = last;
        while at > last.saturating_sub(FIT_LOOK_MAX) {
            at -= 1;
            if pool[at].capacity() >= len {
                return pool.swap_remove(at);
            }
        }
        pool.pop().unwrap_or_default()
    });
    debug_assert!(buf.is_empty(), "pooled buffers are given back empty");
    buf.reserve(len);
    buf
}

/// Gives a buffer back (its contents are discarded) and leaves an empty, unallocated
/// `Vec` in its place.
pub fn give(buf: &mut Vec<u8>) {
    give_all([buf]);
}

/// [`give`] for several buffers at once: one look-up of the thread's pool for all of
/// them (a connection going idle gives back its read and write buffers together;
/// each look-up of a thread-local costs a few dozen instructions, issue 28).
pub fn give_all<const N: usize>(bufs: [&mut Vec<u8>; N]) {
    if bufs.iter().all(|b| !pooled(b)) {
        for buf in bufs {
            drop(std::mem::take(buf));
        }
        return;
    }
    POOL.with(|p| {
        let mut pool = p.borrow_mut();
        for buf in bufs {
            let mut buf = std::mem::take(buf);
            if pooled(&buf) && pool.len() < KEPT_MAX {
                buf.clear();
                pool.push(buf);
            }
        }
    });
}

/// Whether the pool keeps `buf` when it is given back.
fn pooled(buf: &Vec<u8>) -> bool {
    (1..=KEPT_BYTES_MAX).contains(&buf.capacity())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_buffers_are_reused_and_leave_nothing_behind() {
        let mut a = take(4096);
        a.extend_from_slice(b"hello");
        let ptr = a.as_ptr();
        give(&mut a);
        assert_eq!(a.capacity(), 0, "the giver keeps no allocation");
        let b = take(16);
        assert_eq!(b.as_ptr(), ptr, "the pooled buffer is handed out again");
        assert!(b.is_empty() && b.capacity() >= 4096);
    }

    #[test]
    fn a_buffer_with_room_enough_is_taken_before_a_smaller_one() {
        let mut big = take(64 * 1024);
        let mut small = take(100);
        let (big_ptr, small_ptr) = (big.as_ptr(), small.as_ptr());
        give(&mut big);
        give(&mut small);
        // The small one was given last, yet the big one fits: no buffer grows.
        let big = take(64 * 1024);
        assert_eq!(big.as_ptr(), big_ptr);
        let small = take(100);
        assert_eq!(small.as_ptr(), small_ptr);
        assert!(big.capacity() >= 64 * 1024 && small.capacity() >= 100);
    }

    #[test]
    fn giving_several_at_once_keeps_the_poolable_ones_and_empties_all() {
        POOL.with(|p| p.borrow_mut().clear());
        let mut kept = take(100);
        let mut unallocated = Vec::new();
        let mut too_big = Vec::with_capacity(KEPT_BYTES_MAX + 1);
        kept.extend_from_slice(b"bytes");
        give_all([&mut kept, &mut unallocated, &mut too_big]);
        assert!([&kept, &unallocated, &too_big]
            .iter()
            .all(|b| b.capacity() == 0));
        assert_eq!(POOL.with(|p| p.borrow().len()), 1);
        assert!(take(100).is_empty(), "a pooled buffer comes back empty");
        let mut none: [Vec<u8>; 2] = Default::default();
        let [a, b] = &mut none;
        give_all([a, b]);
        assert_eq!(POOL.with(|p| p.borrow().len()), 0);
    }

    #[test]
    fn the_pool_is_bounded() {
        let mut big = Vec::with_capacity(KEPT_BYTES_MAX + 1);
        give(&mut big);
        let mut many: Vec<Vec<u8>> = (0..KEPT_MAX + 10).map(|_| take(8)).collect();
        for b in &mut many {
            give(b);
        }
        assert_eq!(POOL.with(|p| p.borrow().len()), KEPT_MAX);
        assert!(POOL.with(|p| p.borrow().iter().all(|b| b.capacity() <= KEPT_BYTES_MAX)));
    }
}
