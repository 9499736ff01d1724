//! Bounded memory for request payloads: the HTTP body budget and the RAC reassembly
//! pool.
//!
//! **Body budget.** A byte budget for HTTP request bodies, shared by all connections.
//!
//! A connection reserves the bytes of a body before it reads them; the reservation
//! travels with the call and is returned when the call has been answered. When the
//! budget is spent, new bodies are refused BUSY instead of growing memory: the node's
//! body memory never exceeds the configured bound, however many clients send at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;

pub struct MemoryBudget {
    used: AtomicUsize,
    max: usize,
    gauge: Gauge,
}

impl MemoryBudget {
    pub fn new(max: usize, gauge: Gauge) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            used: AtomicUsize::new(0),
            max,
            gauge,
        })
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self, bytes: usize) -> bool {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let Some(next) = used.checked_add(bytes).filter(|&n| n <= self.max) else {
                return false;
            };
            match self
                .used
                .compare_exchange_weak(used, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.gauge.set(next as i64);
                    return true;
                }
                Err(actual) => used = actual,
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "released more than reserved");
        self.gauge.set((before - bytes) as i64);
    }

    /// Reserves `bytes`, or `None` when the budget cannot cover them.
    pub fn try_reserve(self: &Arc<Self>, bytes: usize) -> Option<MemoryPermit> {
        self.take(bytes).then(|| MemoryPermit {
            budget: Arc::clone(self),
            bytes,
        })
    }
}

/// Bytes reserved from a [`MemoryBudget`]; returned on drop.
pub struct MemoryPermit {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl MemoryPermit {
    /// Extends the reservation by `more` bytes (a chunked body growing).
    pub fn try_grow(&mut self, more: usize) -> bool {
        let ok = self.budget.take(more);
        if ok {
            self.bytes += more;
        }
        ok
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for MemoryPermit {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// How the reassembly pool picks a buffer for a call that arrives in pieces.
#[derive(Clone, Copy, Debug, Default, serde::Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PoolPolicy {
    /// OffRAC's policy: the next buffer, in rotation after the last one chosen, that
    /// has room for the whole call.
    #[default]
    EligibleRoundRobin,
    /// The buffer with the most free room, so partial calls spread out evenly.
    JoinShortestBuffer,
}

/// The RAC reassembly pool (after OffRAC): `buffers` buffers of `buffer_bytes` each,
/// shared by every connection and accelerator. A call whose payload does not arrive in
/// the same read as its header is given room in one buffer for its whole payload
/// before any of it is read; it holds that room until it has been answered. A call
/// that finds no eligible buffer is refused BUSY. Calls that arrive whole in one read
/// take the separate single-fragment path and do not use the pool.
pub struct ReassemblyPool {
    state: parking_lot::Mutex<PoolState>,
    buffer_bytes: usize,
    policy: PoolPolicy,
    buffers_in_use: Gauge,
}

struct PoolState {
    /// Bytes reserved in each buffer.
    used: Vec<usize>,
    /// Calls holding room in each buffer.
    holders: Vec<u32>,
    next: usize,
    in_use: usize,
}

impl ReassemblyPool {
    pub fn new(
        buffers: usize,
        buffer_bytes: usize,
        policy: PoolPolicy,
        buffers_in_use: Gauge,
    ) -> Arc<ReassemblyPool> {
        assert!(buffers > 0 && buffer_bytes > 0, "pool must have room");
        Arc::new(ReassemblyPool {
            state: parking_lot::Mutex::new(PoolState {
                used: vec![0; buffers],
                holders: vec![0; buffers],
                next: 0,
                in_use: 0,
            }),
            buffer_bytes,
            policy,
            buffers_in_use,
        })
    }

    /// Largest payload a buffer can hold: the RAC payload limit.
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// Buffers holding at least one partial or waiting call.
    pub fn buffers_in_use(&self) -> usize {
        self.state.lock().in_use
    }

    /// Room for `bytes` in an eligible buffer, or `None` when no buffer has it.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Option<PoolLease> {
        let mut st = self.state.lock();
        let n = st.used.len();
        let fits = |st: &PoolState, i: usize| st.used[i] + bytes <= self.buffer_bytes;
        let chosen = match self.policy {
            PoolPolicy::EligibleRoundRobin => {
                (0..n).map(|k| (st.next + k) % n).find(|&i| fits(&st, i))
            }
            PoolPolicy::JoinShortestBuffer => {
                (0..n).filter(|&i| fits(&st, i)).min_by_key(|&i| st.used[i])
            }
        }?;
        st.used[chosen] += bytes;
        debug_assert!(
            st.used[chosen] <= self.buffer_bytes,
            "a buffer holds its size"
        );
        st.holders[chosen] += 1;
        if st.holders[chosen] == 1 {
            st.in_use += 1;
            self.buffers_in_use.set(st.in_use as i64);
        }
        st.next = (chosen + 1) % n;
        debug_assert!(st.in_use <= n, "no more buffers in use than there are");
        Some(PoolLease {
            pool: Arc::clone(self),
            buffer: chosen,
            bytes,
        })
    }

    fn release(&self, buffer: usize, bytes: usize) {
        let mut st = self.state.lock();
        debug_assert!(st.holders[buffer] > 0, "a lease of a buffer nobody holds");
        debug_assert!(st.used[buffer] >= bytes, "released more than leased");
        st.used[buffer] -= bytes;
        st.holders[buffer] -= 1;
        if st.holders[buffer] == 0 {
            st.in_use -= 1;
            self.buffers_in_use.set(st.in_use as i64);
        }
    }
}

/// Room held in one reassembly buffer; returned on drop.
pub struct PoolLease {
    pool: Arc<ReassemblyPool>,
    buffer: usize,
    bytes: usize,
}

impl Drop for PoolLease {
    fn drop(&mut self) {
        self.pool.release(self.buffer, self.bytes);
    }
}

/// Memory a call's payload is accounted against, released when the call is answered.
pub enum BodyMemory {
    /// An HTTP body, from the body-memory budget.
    Budget(MemoryPermit),
    /// A RAC payload that arrived in pieces, from the reassembly pool.
    Pool(PoolLease),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_never_exceeded_and_comes_back() {
        let b = MemoryBudget::new(100, Gauge::default());
        let mut p = b.try_reserve(60).unwrap();
        assert!(b.try_reserve(41).is_none());
        let q = b.try_reserve(40).unwrap();
        assert!(!p.try_grow(1));
        drop(q);
        assert!(p.try_grow(40));
        assert_eq!((p.bytes(), b.used()), (100, 100));
        drop(p);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn pool_round_robin_skips_ineligible_buffers() {
        let pool = ReassemblyPool::new(3, 100, PoolPolicy::EligibleRoundRobin, Gauge::default());
        let a = pool.reserve(60).unwrap();
        let b = pool.reserve(60).unwrap();
        let c = pool.reserve(60).unwrap();
        assert_eq!((a.buffer, b.buffer, c.buffer), (0, 1, 2));
        assert!(pool.reserve(41).is_none(), "no buffer has 41 free");
        let d = pool.reserve(40).unwrap();
        assert_eq!(d.buffer, 0, "rotation wraps to the first eligible buffer");
        assert_eq!(pool.buffers_in_use(), 3);
        drop((a, d));
        assert_eq!(pool.buffers_in_use(), 2);
        assert!(pool.reserve(101).is_none(), "larger than any buffer");
    }

    #[test]
    fn pool_join_shortest_picks_the_emptiest_buffer() {
        let pool = ReassemblyPool::new(3, 100, PoolPolicy::JoinShortestBuffer, Gauge::default());
        let a = pool.reserve(50).unwrap();
        let b = pool.reserve(10).unwrap();
        let c = pool.reserve(30).unwrap();
        assert_eq!((a.buffer, b.buffer, c.buffer), (0, 1, 2));
        let d = pool.reserve(5).unwrap();
        assert_eq!(d.buffer, 1);
        drop((a, b, c, d));
        assert_eq!(pool.buffers_in_use(), 0);
    }
}
