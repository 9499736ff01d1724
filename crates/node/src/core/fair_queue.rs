//! The tenant-fair queue of a slot: one FIFO per tenant, served round robin, a tenant
//! without a backlog ahead of those with one (the sparse flows of fq_codel). Bounds
//! (queue depth, a tenant's share) are the slot's to enforce before it pushes; see the
//! `slot` module for why the queue is shaped this way.
//!
//! As in fq_codel, a tenant whose last job was just served keeps its place in the
//! round (an empty FIFO) until the round comes back to it; only then is it forgotten.
//! Without that, a tenant that always has exactly one call queued — each of many
//! one-call-at-a-time HTTP connections is its own tenant — would arrive "fresh" every
//! time and go ahead of every backlog for good: 20 such connections offering an
//! accelerator its capacity starved a RAC client's backlog (its calls waited 35
//! service times where round robin gives a few). The places kept are bounded by the
//! tenants served since the queue was last empty, when they are all dropped.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::core::tenant::TenantId;

/// Per-tenant FIFOs served round robin, tenants that just arrived first.
pub struct FairQueue<T> {
    /// Every tenant in the round, with its FIFO (empty: the tenant's place is kept
    /// until its turn). Each appears exactly once in `fresh` or `ready`.
    pub(crate) queues: HashMap<TenantId, VecDeque<T>>,
    /// Tenants that were not in the round when their first queued job arrived, in
    /// arrival order; served before `ready`. After one job they join `ready`.
    pub(crate) fresh: VecDeque<TenantId>,
    /// Tenants in the round, in service order.
    pub(crate) ready: VecDeque<TenantId>,
    /// Jobs queued.
    pub len: usize,
    /// Tenants with at least one job queued.
    active: usize,
}

impl<T> FairQueue<T> {
    pub fn new() -> FairQueue<T> {
        FairQueue {
            queues: HashMap::new(),
            fresh: VecDeque::new(),
            ready: VecDeque::new(),
            len: 0,
            active: 0,
        }
    }

    pub fn tenant_len(&self, tenant: TenantId) -> usize {
        self.queues.get(&tenant).map_or(0, VecDeque::len)
    }

    pub fn push(&mut self, tenant: TenantId, job: T) {
        let q = match self.queues.entry(tenant) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                self.fresh.push_back(tenant);
                e.insert(VecDeque::new())
            }
        };
        if q.is_empty() {
            self.active += 1;
        }
        q.push_back(job);
        self.len += 1;
        debug_assert!(self.active > 0 && self.active <= self.len);
        self.debug_check();
    }

    pub fn pop(&mut self) -> Option<T> {
        while self.len > 0 {
            let tenant = match self.fresh.pop_front() {
                Some(t) => t,
                None => self.ready.pop_front()?,
            };
            let q = self
                .queues
                .get_mut(&tenant)
                .expect("tenants in the round have a queue");
            let Some(job) = q.pop_front() else {
                // Its turn found it empty: it leaves the round.
                self.queues.remove(&tenant);
                continue;
            };
            if q.is_empty() {
                self.active -= 1;
            }
            self.ready.push_back(tenant);
            self.len -= 1;
            self.forget_if_empty();
            self.debug_check();
            return Some(job);
        }
        // Nothing queued: every place in the round was forgotten with the last job.
        debug_assert!(self.queues.is_empty() && self.active == 0);
        None
    }

    /// The job [`FairQueue::pop`] would return next, left queued (a slot's batcher
    /// looks whether it fits the batch being formed before it takes it).
    pub fn peek(&self) -> Option<&T> {
        // Tenants whose turn would find their FIFO empty are skipped, as pop skips
        // (and forgets) them.
        let next = self
            .fresh
            .iter()
            .chain(self.ready.iter())
            .find_map(|t| self.queues.get(t).and_then(VecDeque::front));
        debug_assert_eq!(next.is_some(), self.len > 0);
        next
    }

    /// Takes the job of a tenant that has exactly one queued (out of turn). The tenant
    /// keeps its place in the round.
    pub fn take_sole(&mut self, tenant: TenantId) -> Option<T> {
        let q = self.queues.get_mut(&tenant)?;
        if q.len() != 1 {
            return None;
        }
        let job = q.pop_front()?;
        debug_assert!(q.is_empty(), "the sole job was taken");
        self.active -= 1;
        self.len -= 1;
        self.forget_if_empty();
        self.debug_check();
        Some(job)
    }

    /// Takes out every queued job for which `gone` holds, in no particular order, and
    /// hands each to `each`; returns how many. Tenants keep their places in the round
    /// (an emptied FIFO leaves at its turn, as after a pop). Walks the whole queue:
    /// for the rare withdrawal of calls whose callers left (`slot::cancel`), never on
    /// a call's own path.
    pub fn remove_where(
        &mut self,
        mut gone: impl FnMut(&T) -> bool,
        mut each: impl FnMut(T),
    ) -> usize {
        let before = self.len;
        for q in self.queues.values_mut() {
            if q.is_empty() || !q.iter().any(&mut gone) {
                continue;
            }
            let had = q.len();
            let mut kept = VecDeque::with_capacity(had);
            for job in q.drain(..) {
                if gone(&job) {
                    each(job);
                } else {
                    kept.push_back(job);
                }
            }
            self.len -= had - kept.len();
            if kept.is_empty() {
                self.active -= 1;
            }
            *q = kept;
        }
        let removed = before - self.len;
        debug_assert!(removed <= before, "no more removed than queued");
        self.forget_if_empty();
        self.debug_check();
        removed
    }

    /// How many queued jobs of other tenants are served before a job `tenant` pushes
    /// now, at most: the tenants ahead of it in `fresh` when it is not in the round
    /// (it joins them), otherwise, round robin, one more than its own backlog from
    /// each other tenant with jobs. Constant time: it is asked on every queued call.
    pub fn others_ahead_of_next(&self, tenant: TenantId) -> usize {
        let ahead = match self.queues.get(&tenant) {
            None => self.fresh.len().min(self.len),
            Some(q) => {
                let own = q.len();
                let others = self.active - usize::from(own > 0);
                (self.len - own).min(others * (own + 1))
            }
        };
        debug_assert!(ahead + self.tenant_len(tenant) <= self.len);
        ahead
    }

    /// [`FairQueue::check`], in debug builds only: called after every change.
    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            self.check();
        }
    }

    /// Asserts the queue's invariants: the counts agree with the FIFOs, every tenant
    /// with a job queued is in the round, the round holds each tenant with a place
    /// exactly once, and an empty queue keeps no place. Panics naming the one broken.
    /// Walks every tenant: debug builds call it after each change, and tests.
    pub fn check(&self) {
        let queued: usize = self.queues.values().map(VecDeque::len).sum();
        assert_eq!(
            queued, self.len,
            "fair queue: len disagrees with the jobs queued"
        );
        let active = self.queues.values().filter(|q| !q.is_empty()).count();
        assert_eq!(
            active, self.active,
            "fair queue: active disagrees with the tenants with jobs"
        );
        let mut in_round = HashSet::with_capacity(self.queues.len());
        for tenant in self.fresh.iter().chain(&self.ready) {
            assert!(
                in_round.insert(*tenant),
                "fair queue: tenant {tenant} is in the round twice"
            );
            assert!(
                self.queues.contains_key(tenant),
                "fair queue: tenant {tenant} is in the round without a queue"
            );
        }
        assert_eq!(
            in_round.len(),
            self.queues.len(),
            "fair queue: a tenant with a queue is not in the round"
        );
        if self.len == 0 {
            assert!(
                self.queues.is_empty(),
                "fair queue: an empty queue keeps places in the round"
            );
        }
    }

    /// With nothing queued, nobody's place in the round matters any more.
    fn forget_if_empty(&mut self) {
        if self.len == 0 {
            self.queues.clear();
            self.fresh.clear();
            self.ready.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peek_shows_the_job_pop_returns() {
        let mut q = queue_of_two_tenants();
        push(&mut q, 9, "fresh");
        let mut served = 0;
        while q.len > 0 {
            let peeked = q.peek().cloned();
            assert_eq!(peeked, q.pop());
            served += 1;
            if served == 2 {
                // Tenant 2's place is kept empty in the round: peek skips it too.
                push(&mut q, 1, "again");
            }
        }
        assert_eq!(q.peek(), None);
    }

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

    /// One-call-at-a-time tenants arriving anew after each call do not starve a
    /// backlog: each keeps its place in the round after its call, so its next call
    /// waits its turn, and the backlog is served every other call.
    #[test]
    fn tenants_with_one_call_at_a_time_do_not_starve_a_backlog() {
        let mut q = FairQueue::new();
        for i in 0..10 {
            push(&mut q, 1, &format!("a{i}"));
        }
        // Tenants 2 and 3 each send their next call as soon as the last is served.
        push(&mut q, 2, "b");
        push(&mut q, 3, "c");
        let mut served = Vec::new();
        for _ in 0..12 {
            let job = q.pop().unwrap();
            if job.starts_with('b') || job.starts_with('c') {
                let tenant = if job.starts_with('b') { 2 } else { 3 };
                push(&mut q, tenant, &job);
            }
            served.push(job);
        }
        let backlog = served.iter().filter(|j| j.starts_with('a')).count();
        assert_eq!(backlog, 4, "{served:?}");
        assert_eq!(&served[..7], ["a0", "b", "c", "a1", "b", "c", "a2"]);
    }

    /// `others_ahead_of_next` never counts fewer jobs of other tenants than are served
    /// before the next job pushed, and counts them exactly for a tenant not in the
    /// round, over every mix of pushes and pops of three tenants up to a length (a
    /// small xorshift drives the choices, so a failure replays).
    #[test]
    fn others_ahead_of_next_bounds_the_jobs_served_first() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..2000 {
            let mut q: FairQueue<(TenantId, u32)> = FairQueue::new();
            for i in 0..next(12) {
                if next(3) == 0 {
                    q.pop();
                } else {
                    let t = next(3) as TenantId;
                    q.push(t, (t, i as u32));
                }
            }
            let tenant = next(3) as TenantId;
            let predicted = q.others_ahead_of_next(tenant);
            let fresh = !q.queues.contains_key(&tenant);
            q.push(tenant, (tenant, u32::MAX));
            let before: Vec<_> = std::iter::from_fn(|| q.pop())
                .take_while(|&job| job != (tenant, u32::MAX))
                .collect();
            let served = before.iter().filter(|job| job.0 != tenant).count();
            assert!(
                served <= predicted,
                "{served} served before, predicted {predicted}"
            );
            if fresh {
                assert_eq!(served, predicted);
            }
        }
    }

    /// A queue of tenant 1 with two jobs and tenant 2 with one, checked.
    fn queue_of_two_tenants() -> FairQueue<String> {
        let mut q = FairQueue::new();
        push(&mut q, 1, "a1");
        push(&mut q, 1, "a2");
        push(&mut q, 2, "b1");
        q.check();
        q
    }

    #[test]
    #[should_panic(expected = "fair queue: len disagrees with the jobs queued")]
    fn check_finds_a_length_that_disagrees_with_the_jobs() {
        let mut q = queue_of_two_tenants();
        q.len += 1;
        q.check();
    }

    #[test]
    #[should_panic(expected = "fair queue: active disagrees with the tenants with jobs")]
    fn check_finds_a_count_of_active_tenants_that_disagrees() {
        let mut q = queue_of_two_tenants();
        q.queues.get_mut(&2).unwrap().clear();
        q.len -= 1;
        q.check();
    }

    #[test]
    #[should_panic(expected = "fair queue: tenant 1 is in the round twice")]
    fn check_finds_a_tenant_in_the_round_twice() {
        let mut q = queue_of_two_tenants();
        q.ready.push_back(1);
        q.check();
    }

    #[test]
    #[should_panic(expected = "fair queue: tenant 3 is in the round without a queue")]
    fn check_finds_a_tenant_in_the_round_without_a_queue() {
        let mut q = queue_of_two_tenants();
        q.fresh.push_back(3);
        q.check();
    }

    #[test]
    #[should_panic(expected = "fair queue: a tenant with a queue is not in the round")]
    fn check_finds_a_tenant_with_jobs_left_out_of_the_round() {
        let mut q = queue_of_two_tenants();
        q.fresh.retain(|&t| t != 2);
        q.ready.retain(|&t| t != 2);
        q.check();
    }

    #[test]
    #[should_panic(expected = "fair queue: an empty queue keeps places in the round")]
    fn check_finds_places_kept_in_an_empty_queue() {
        let mut q: FairQueue<String> = FairQueue::new();
        q.queues.insert(1, VecDeque::new());
        q.ready.push_back(1);
        q.check();
    }

    /// Every operation of the tests above keeps the invariants (debug builds check
    /// after each); here in any build, over random pushes, pops, out-of-turn takes and
    /// removals.
    #[test]
    fn every_operation_keeps_the_invariants() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut q: FairQueue<u64> = FairQueue::new();
        for i in 0..5000 {
            let tenant = next(5);
            match next(4) {
                0 => {
                    q.pop();
                }
                1 => {
                    q.take_sole(tenant);
                }
                2 if next(8) == 0 => {
                    let len = q.len;
                    let odd = q.remove_where(|j| j % 2 == 1, |j| assert_eq!(j % 2, 1));
                    assert_eq!(q.len, len - odd, "the removed jobs leave the count");
                }
                _ => q.push(tenant, i),
            }
            q.check();
        }
    }
}
