//! The batcher's decisions: for a model with dynamic batching
//! ([`accel::batch::Policy`]), whether the batch a slot's worker is forming takes the
//! next queued call, runs now, or waits for more calls — and what a call that waited
//! past its queue timeout gets. Pure functions of the policy, the batch so far, the
//! next call and the time the core's [`crate::core::clock::Clock`] reads, so that a
//! simulator under a virtual clock gets the same batches from the same arrivals.
//!
//! Not here: the queue (the slot's tenant-fair queue decides *which* call is next),
//! joining payloads and splitting outputs (`accel::batch`), running the batch (the
//! slot's worker).
//!
//! The rules are Triton's dynamic batcher's: a batch grows, in queue order, while the
//! next call fits `max_batch_size`; it runs at once when it reaches the largest
//! preferred batch size (or `max_batch_size` without preferred sizes), when the next
//! call does not fit, or when its oldest call has waited `max_queue_delay`; else it
//! waits for more calls until then. One difference: Triton, when the queue holds
//! more than a batch can take, trims the batch back to the largest preferred size it
//! passed; here a batch grows past the largest preferred size only when it had not
//! reached it exactly.

use std::time::Instant;

use accel::batch::{Policy, TimeoutAction};

/// What the worker does with the batch it is forming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take the next queued call into the batch.
    Take,
    /// Run the batch now.
    Run,
    /// Wait for another call until this time (the clock's), then decide again.
    Wait(Instant),
}

/// The batch being formed, as the batcher sees it.
#[derive(Clone, Copy, Debug)]
pub struct Forming {
    /// Items in the batch (the sum of its calls' batch sizes); at least 1.
    pub items: usize,
    /// When the oldest call in it was received: the delay counts from there.
    pub oldest: Instant,
}

/// Decides what the batch `forming` does next, at `now`, given the batch size of the
/// next queued call (`None`: nothing queued). `hurry`: the slot is draining (a
/// reconfiguration or a stop waits for it), so nothing waits for more calls.
pub fn decide(
    policy: &Policy,
    forming: Forming,
    next: Option<usize>,
    now: Instant,
    hurry: bool,
) -> Decision {
    assert!(forming.items >= 1, "a batch is formed around a call");
    assert!(
        forming.items <= policy.max_batch_size,
        "a batch never exceeds max_batch_size"
    );
    if forming.items >= policy.dispatch_size() {
        return Decision::Run;
    }
    match next {
        Some(size) if forming.items + size <= policy.max_batch_size => Decision::Take,
        Some(_) => Decision::Run,
        None => {
            let until = forming.oldest + policy.max_queue_delay;
            if hurry || now >= until {
                Decision::Run
            } else {
                debug_assert!(!policy.max_queue_delay.is_zero());
                Decision::Wait(until)
            }
        }
    }
}

/// What a call received at `received` gets at `now` under the model's queue policy:
/// `None` while within its timeout (or without one), else the policy's action.
pub fn timed_out(policy: &Policy, received: Instant, now: Instant) -> Option<TimeoutAction> {
    let q = &policy.queue_policy;
    if q.default_timeout.is_zero() {
        return None;
    }
    (now.saturating_duration_since(received) > q.default_timeout).then_some(q.timeout_action)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use accel::batch::QueuePolicy;

    use super::*;
    use crate::core::clock::{Clock, VirtualClock};

    fn policy(preferred: &[usize], delay_us: u64) -> Policy {
        Policy {
            max_batch_size: 8,
            preferred_batch_sizes: preferred.to_vec(),
            max_queue_delay: Duration::from_micros(delay_us),
            priority_levels: 0,
            default_priority_level: 0,
            queue_policy: QueuePolicy::default(),
        }
    }

    /// Forms batches from calls of `sizes` arriving every `gap_us` µs on a virtual
    /// clock, as the slot's worker does: returns each batch's sizes and when it ran
    /// (µs since the first arrival).
    fn form(policy: &Policy, sizes: &[usize], gap_us: u64) -> Vec<(Vec<usize>, u64)> {
        let clock = VirtualClock::new();
        let t0 = clock.now();
        let arrival = |i: usize| t0 + Duration::from_micros(gap_us * i as u64);
        let mut batches = Vec::new();
        let mut next = 0;
        while next < sizes.len() {
            clock.advance_to(arrival(next));
            let mut batch = vec![sizes[next]];
            let oldest = arrival(next);
            next += 1;
            loop {
                let forming = Forming {
                    items: batch.iter().sum(),
                    oldest,
                };
                let queued =
                    (next < sizes.len() && arrival(next) <= clock.now()).then(|| sizes[next]);
                match decide(policy, forming, queued, clock.now(), false) {
                    Decision::Take => {
                        batch.push(sizes[next]);
                        next += 1;
                    }
                    Decision::Run => break,
                    Decision::Wait(until) => {
                        assert!(until > clock.now(), "a wait ends in the future");
                        // Woken by the next arrival or at the deadline.
                        let wake = if next < sizes.len() {
                            arrival(next).min(until)
                        } else {
                            until
                        };
                        clock.advance_to(wake);
                    }
                }
            }
            let ran = clock.since(t0).as_micros() as u64;
            batches.push((batch, ran));
        }
        batches
    }

    #[test]
    fn without_a_delay_a_batch_is_what_is_queued() {
        let p = policy(&[], 0);
        // All arrive at once: one batch of 8, then the rest.
        let b = form(&p, &[1; 10], 0);
        assert_eq!(b, [(vec![1; 8], 0), (vec![1; 2], 0)]);
        // Spread out: each runs alone, at once.
        let b = form(&p, &[1; 3], 10);
        assert_eq!(b, [(vec![1], 0), (vec![1], 10), (vec![1], 20)]);
    }

    #[test]
    fn the_delay_gathers_calls_until_the_batch_is_full_or_the_oldest_waited_enough() {
        let p = policy(&[], 100);
        // A call every 10 µs: 8 join by 70 µs, full, run at once.
        let b = form(&p, &[1; 8], 10);
        assert_eq!(b, [(vec![1; 8], 70)]);
        // A call every 30 µs: the first waits 100 µs and takes 4 (0, 30, 60, 90).
        let b = form(&p, &[1; 5], 30);
        assert_eq!(b[0], (vec![1; 4], 100));
        assert_eq!(b[1], (vec![1], 220), "the fifth waits its own delay");
    }

    #[test]
    fn the_largest_preferred_size_runs_at_once_and_a_call_that_does_not_fit_waits() {
        let p = policy(&[2, 4], 1000);
        let b = form(&p, &[1; 6], 10);
        assert_eq!(b[0], (vec![1; 4], 30), "4 is the largest preferred size");
        assert_eq!(
            b[1],
            (vec![1; 2], 1040),
            "2 is preferred but not the largest"
        );
        let p = policy(&[], 1000);
        let b = form(&p, &[3, 3, 3], 0);
        assert_eq!(b[0], (vec![3, 3], 0), "the third call would make 9 > 8");
    }

    #[test]
    fn draining_runs_the_batch_without_waiting() {
        let clock = VirtualClock::new();
        let p = policy(&[], 1000);
        let forming = Forming {
            items: 1,
            oldest: clock.now(),
        };
        assert_eq!(decide(&p, forming, None, clock.now(), true), Decision::Run);
        let until = clock.now() + Duration::from_millis(1);
        assert_eq!(
            decide(&p, forming, None, clock.now(), false),
            Decision::Wait(until)
        );
    }

    #[test]
    fn a_call_past_its_queue_timeout_gets_the_policys_action() {
        let clock = VirtualClock::new();
        let received = clock.now();
        let mut p = policy(&[], 0);
        clock.advance(Duration::from_secs(10));
        assert_eq!(timed_out(&p, received, clock.now()), None, "no timeout set");
        p.queue_policy.default_timeout = Duration::from_micros(500);
        assert_eq!(
            timed_out(&p, received, received + Duration::from_micros(500)),
            None
        );
        assert_eq!(
            timed_out(&p, received, clock.now()),
            Some(TimeoutAction::Reject)
        );
        p.queue_policy.timeout_action = TimeoutAction::Delay;
        assert_eq!(
            timed_out(&p, received, clock.now()),
            Some(TimeoutAction::Delay)
        );
    }
}
