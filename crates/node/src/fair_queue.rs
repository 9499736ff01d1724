//! The tenant-fair queue of a slot: one FIFO per tenant, served round robin, a tenant
//! without a backlog ahead of those with one (the sparse flows of fq_codel). Bounds
//! (queue depth, a tenant's share) are the slot's to enforce before it pushes; see the
//! `slot` module for why the queue is shaped this way.

use std::collections::{HashMap, VecDeque};

use crate::tenant::TenantId;

/// Per-tenant FIFOs served round robin, tenants that just arrived first.
pub struct FairQueue<T> {
    pub(crate) queues: HashMap<TenantId, VecDeque<T>>,
    /// Tenants whose queue was empty when their first queued job arrived, in arrival
    /// order; served before `ready`. After one job they join `ready` if they have more.
    pub(crate) fresh: VecDeque<TenantId>,
    /// Tenants with a backlog, in service order.
    pub(crate) ready: VecDeque<TenantId>,
    pub len: usize,
}

impl<T> FairQueue<T> {
    pub fn new() -> FairQueue<T> {
        FairQueue {
            queues: HashMap::new(),
            fresh: VecDeque::new(),
            ready: VecDeque::new(),
            len: 0,
        }
    }

    pub fn tenant_len(&self, tenant: TenantId) -> usize {
        self.queues.get(&tenant).map_or(0, VecDeque::len)
    }

    pub fn push(&mut self, tenant: TenantId, job: T) {
        let q = self.queues.entry(tenant).or_default();
        if q.is_empty() {
            self.fresh.push_back(tenant);
        }
        q.push_back(job);
        self.len += 1;
    }

    pub fn pop(&mut self) -> Option<T> {
        let tenant = match self.fresh.pop_front() {
            Some(t) => t,
            None => self.ready.pop_front()?,
        };
        let q = self
            .queues
            .get_mut(&tenant)
            .expect("queued tenants have a queue");
        let job = q.pop_front().expect("queued tenants have a job");
        if q.is_empty() {
            self.queues.remove(&tenant);
        } else {
            self.ready.push_back(tenant);
        }
        self.len -= 1;
        Some(job)
    }

    /// Takes the job of a tenant that has exactly one queued (out of turn).
    pub fn take_sole(&mut self, tenant: TenantId) -> Option<T> {
        if self.tenant_len(tenant) != 1 {
            return None;
        }
        let job = self.queues.remove(&tenant)?.pop_front()?;
        self.fresh.retain(|&t| t != tenant);
        self.ready.retain(|&t| t != tenant);
        self.len -= 1;
        Some(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_queue_serves_tenants_in_turn() {
        let mut q = FairQueue::new();
        for (tenant, payload) in [
            (1, "a1"),
            (1, "a2"),
            (1, "a3"),
            (2, "b1"),
            (3, "c1"),
            (2, "b2"),
        ] {
            q.push(tenant, payload.to_string());
        }
        assert_eq!((q.tenant_len(1), q.len), (3, 6));
        let order: Vec<String> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, ["a1", "b1", "c1", "a2", "b2", "a3"]);
        assert!(q.queues.is_empty() && q.ready.is_empty() && q.fresh.is_empty());
    }

    fn push(q: &mut FairQueue<String>, tenant: TenantId, p: &str) {
        q.push(tenant, p.to_string());
    }

    #[test]
    fn a_tenant_without_backlog_goes_ahead_of_backlogs_once() {
        let mut q = FairQueue::new();
        for p in ["a1", "a2", "a3"] {
            push(&mut q, 1, p);
        }
        assert_eq!(q.pop().unwrap(), "a1");
        // Tenant 2 arrives while tenant 1 has a backlog: served next, then in turn.
        push(&mut q, 2, "b1");
        push(&mut q, 2, "b2");
        let order: Vec<String> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, ["b1", "a2", "b2", "a3"]);
        // take_sole removes a tenant's only job, wherever it stands, and nothing else.
        push(&mut q, 1, "a4");
        push(&mut q, 1, "a5");
        push(&mut q, 3, "c1");
        assert!(q.take_sole(1).is_none(), "tenant 1 has two");
        assert_eq!(q.take_sole(3).unwrap(), "c1");
        assert!(q.take_sole(3).is_none());
        let order: Vec<String> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, ["a4", "a5"]);
        assert!(q.queues.is_empty() && q.ready.is_empty() && q.fresh.is_empty());
        assert_eq!(q.len, 0);
    }
}
