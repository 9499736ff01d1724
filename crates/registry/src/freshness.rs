//! Read-your-writes on followers.
//!
//! A follower answers reads from a copy of the leader's state that trails it by up to
//! one refresh (a watch event or a poll away, see [`crate::ha`] and [`crate::follow`]).
//! That is fine for most reads, but not for the read that follows a client's own
//! write: a client creates a function on the leader, then asks another replica for it
//! and is told `404 there is no function` — the new thing does not exist yet where it
//! asked (seen in the cluster page's recipe, a Python client binding right after
//! `put_function`).
//!
//! So a follower does not answer "not found" from a copy that may be stale: before it
//! sends a `404` to a `GET`, it asks its refresh loop for a round that *starts after the
//! request came in* and waits for that round (at most [`CATCH_UP_MAX`]), then answers
//! again from the fresh copy. Whatever the leader had stored when the request arrived
//! is then seen. Existing things may still be up to one refresh old (a follower's
//! normal freshness); only absence is confirmed.
//!
//! Cost. Rounds are shared: every miss waiting when a round starts is served by it, so
//! a flood of misses costs one refresh at a time, spaced by at least [`SPACING`] —
//! never more store or leader reads than that, however many clients ask.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Longest a miss waits for a fresh copy before it is answered from the old one.
pub const CATCH_UP_MAX: Duration = Duration::from_secs(2);
/// Least time between two refreshes that misses ask for.
pub const SPACING: Duration = Duration::from_millis(20);

/// The follower's refresh rounds, as the requests that wait on them see them.
pub struct Refresh {
    /// Rung by a miss: the refresh loop starts a round now instead of at its period.
    wanted: Notify,
    /// `(started, finished)`: the number of the last round begun, and of the last one
    /// ended.
    rounds: watch::Sender<(u64, u64)>,
    /// When the last round ended, for [`SPACING`].
    last_end: Mutex<Option<Instant>>,
}

impl Default for Refresh {
    fn default() -> Self {
        Refresh {
            wanted: Notify::new(),
            rounds: watch::Sender::new((0, 0)),
            last_end: Mutex::new(None),
        }
    }
}

impl Refresh {
    /// Resolves when a miss wants a round, but no sooner than [`SPACING`] after the
    /// last round ended; the refresh loop waits on this beside its period.
    pub async fn wanted(&self) {
        self.wanted.notified().await;
        let last_end = *self.last_end.lock().expect("refresh lock");
        if let Some(t) = last_end {
            tokio::time::sleep_until(t + SPACING).await;
        }
    }

    /// Runs `copy` (the refresh loop's reading of a fresh copy) as one round, which
    /// the misses waiting for it see end.
    pub async fn round<T>(&self, copy: impl std::future::Future<Output = T>) -> T {
        let id = self.begin();
        let copied = copy.await;
        self.end(id);
        copied
    }

    /// A round begins: called just before the copy is read.
    fn begin(&self) -> u64 {
        let mut id = 0;
        self.rounds.send_modify(|(started, _)| {
            *started += 1;
            id = *started;
        });
        id
    }

    /// Round `id` ended (whether or not it got a fresh copy: waiters are bounded
    /// anyway, and a failed copy is as fresh as this replica can be).
    fn end(&self, id: u64) {
        *self.last_end.lock().expect("refresh lock") = Some(Instant::now());
        self.rounds
            .send_modify(|(_, finished)| *finished = (*finished).max(id));
    }

    /// Waits until a round that began after this call has ended, or `bound` passed.
    /// `true` when such a round ended.
    pub async fn catch_up(&self, bound: Duration) -> bool {
        let mut rounds = self.rounds.subscribe();
        let asked = rounds.borrow_and_update().0;
        self.wanted.notify_one();
        tokio::time::timeout(bound, rounds.wait_for(|&(_, finished)| finished > asked))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A refresh loop as the follower modules run it, counting its rounds.
    fn spawn_loop(refresh: Arc<Refresh>, period: Duration) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(0);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = refresh.wanted() => {}
                }
                refresh
                    .round(async {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        tx.send_modify(|n| *n += 1);
                    })
                    .await;
            }
        });
        rx
    }

    #[tokio::test(start_paused = true)]
    async fn a_miss_waits_for_a_round_that_began_after_it() {
        let refresh = Arc::new(Refresh::default());
        let copies = spawn_loop(refresh.clone(), Duration::from_secs(3600));
        // No period will come: the miss itself starts the round, and it returns
        // after that round, not before.
        assert!(refresh.catch_up(CATCH_UP_MAX).await);
        assert_eq!(*copies.borrow(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_under_way_when_the_miss_comes_is_not_enough() {
        let refresh = Arc::new(Refresh::default());
        // A round already began (its copy may predate the client's write).
        let early = refresh.begin();
        let waiter = tokio::spawn({
            let refresh = refresh.clone();
            async move { refresh.catch_up(CATCH_UP_MAX).await }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        refresh.end(early);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            !waiter.is_finished(),
            "answered from a round that began before it"
        );
        let next = refresh.begin();
        refresh.end(next);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn many_misses_share_rounds_and_none_waits_past_the_bound() {
        let refresh = Arc::new(Refresh::default());
        let copies = spawn_loop(refresh.clone(), Duration::from_secs(3600));
        let waiters: Vec<_> = (0..100)
            .map(|_| {
                let refresh = refresh.clone();
                tokio::spawn(async move { refresh.catch_up(CATCH_UP_MAX).await })
            })
            .collect();
        for w in waiters {
            assert!(w.await.unwrap());
        }
        assert!(
            *copies.borrow() <= 2,
            "{} rounds for 100 misses",
            *copies.borrow()
        );
        // With no loop at all, a miss gives up at the bound.
        let lonely = Refresh::default();
        let started = tokio::time::Instant::now();
        assert!(!lonely.catch_up(Duration::from_millis(300)).await);
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }
}
