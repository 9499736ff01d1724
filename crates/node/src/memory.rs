//! A byte budget for request bodies held by the node, shared by all connections.
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
}
