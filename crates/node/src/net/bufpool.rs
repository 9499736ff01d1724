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

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least `len` bytes: a pooled one when there is
/// one, else a new one.
pub fn take(len: usize) -> Vec<u8> {
    let mut buf = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    buf.reserve(len);
    buf
}

/// Gives a buffer back (its contents are discarded) and leaves an empty, unallocated
/// `Vec` in its place.
pub fn give(buf: &mut Vec<u8>) {
    let mut buf = std::mem::take(buf);
    if buf.capacity() == 0 || buf.capacity() > KEPT_BYTES_MAX {
        return;
    }
    buf.clear();
    POOL.with(|p| {
        let mut pool = p.borrow_mut();
        if pool.len() < KEPT_MAX {
            pool.push(buf);
        }
    });
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
