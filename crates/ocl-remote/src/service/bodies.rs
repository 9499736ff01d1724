//! Spare buffers for large frame bodies.
//!
//! A frame body lives until the task that uses its bytes (a write's data) has run, and
//! is then freed. Large bodies come from `mmap` and go back to the kernel when freed,
//! so every new one page-faults its way in again: with 256 MiB written over TCP in 8 MiB
//! commands, page faults took a third of the service's time. The node therefore keeps
//! a few large buffers for reuse, bounded in total bytes.

use crate::service::lock;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

/// Node-wide spare body buffers, at most `bytes_max` bytes of capacity in all.
pub(crate) struct BodyPool {
    spare: Mutex<Vec<Vec<u8>>>,
    bytes_max: usize,
    /// Smallest capacity worth keeping.
    keep_min: usize,
}

impl BodyPool {
    pub fn new(bytes_max: usize, keep_min: usize) -> Arc<BodyPool> {
        Arc::new(BodyPool {
            spare: Mutex::new(Vec::new()),
            bytes_max,
            keep_min,
        })
    }

    /// An empty buffer with room for `len` bytes: a spare one if one is large enough.
    pub fn take(&self, len: usize) -> Vec<u8> {
        let mut spare = lock(&self.spare);
        match spare.iter().position(|v| v.capacity() >= len) {
            Some(i) => spare.swap_remove(i),
            None => Vec::with_capacity(len),
        }
    }

    /// Keeps `buf` for reuse if it is large and there is room; frees it otherwise.
    fn give(&self, mut buf: Vec<u8>) {
        if buf.capacity() < self.keep_min || buf.capacity() > self.bytes_max {
            return;
        }
        let mut spare = lock(&self.spare);
        let held: usize = spare.iter().map(Vec::capacity).sum();
        if held + buf.capacity() <= self.bytes_max {
            buf.clear();
            spare.push(buf);
        } else if let Some(smallest) = spare
            .iter()
            .enumerate()
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i)
            .filter(|&i| {
                spare[i].capacity() < buf.capacity()
                    && held - spare[i].capacity() + buf.capacity() <= self.bytes_max
            })
        {
            // A larger buffer serves more bodies: it replaces the smallest one.
            buf.clear();
            spare[smallest] = buf;
        }
    }

    /// Frees every spare buffer (no client is left to use them).
    pub fn clear(&self) {
        let spare = std::mem::take(&mut *lock(&self.spare));
        drop(spare);
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        let spare = self.spare.lock().unwrap();
        spare.iter().map(Vec::capacity).sum()
    }
}

/// A frame body; its buffer goes back to the pool when the last user drops it.
pub(crate) struct Body {
    bytes: Vec<u8>,
    pool: Arc<BodyPool>,
}

impl Body {
    pub fn new(bytes: Vec<u8>, pool: &Arc<BodyPool>) -> Body {
        Body {
            bytes,
            pool: Arc::clone(pool),
        }
    }
}

impl Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_come_back_within_the_bound() {
        let pool = BodyPool::new(10 << 20, 64 << 10);
        let a = pool.take(4 << 20);
        let ptr = a.as_ptr();
        drop(Body::new(a, &pool));
        assert_eq!(pool.held(), 4 << 20);
        // A smaller body reuses it (the same memory), a larger one does not fit it.
        let b = pool.take(1 << 20);
        assert_eq!((b.as_ptr(), b.len()), (ptr, 0));
        assert_eq!(pool.held(), 0);
        drop(Body::new(b, &pool));
        let c = pool.take(5 << 20);
        assert_ne!(c.as_ptr(), ptr);
        // Small buffers are not kept; past the bound, a larger buffer replaces a smaller.
        drop(Body::new(Vec::with_capacity(1024), &pool));
        assert_eq!(pool.held(), 4 << 20);
        drop(Body::new(vec![0; 7 << 20], &pool));
        assert_eq!(pool.held(), 7 << 20);
        drop(Body::new(c, &pool));
        assert!(pool.held() <= 10 << 20);
        assert_eq!(pool.held(), 7 << 20, "5 MiB does not fit next to 7 MiB");
        drop(Body::new(Vec::with_capacity(11 << 20), &pool));
        assert_eq!(pool.held(), 7 << 20, "larger than the whole bound");
        pool.clear();
        assert_eq!(pool.held(), 0);
    }
}
