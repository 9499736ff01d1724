//! A connection's wait for the node's shutdown, shared by the HTTP and RAC connection
//! loops.
//!
//! One wait for the connection's life, not one per turn of its loop: each wait
//! registers with the channel's waiter list, shared by every connection of the node,
//! and unregisters when dropped — an unlink that touches the neighbours' (other
//! connections', idle ones included) cold entries; per request it cost ~2 % of the
//! node's CPU at 5,000 connections (`tokio::sync::notify` and `watch` in a task-clock
//! profile, against 0.3 % at 64). And it is polled only when the signal changed
//! ([`poll`]). It completes at most once: the connection then stops reading.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::watch;

/// The wait, as a connection keeps it pinned.
pub(crate) type StopWait = dyn Future<Output = ()> + Send;

/// The wait for `signal` (the node's shutdown signal) to say "stop". It looks at the
/// value first, so a shutdown that came before the wait ends it at once.
pub(crate) fn wait(signal: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut shutdown = signal.clone();
    async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    }
}

/// Polls `stop` (a [`wait`]) unless it has nothing new to say: it has `registered` its
/// waker and `signal` (the connection's copy of the shutdown signal, never marked
/// seen) did not change since it was taken. Each turn of a connection's loop would
/// otherwise poll the waiting `watch`, which takes the lock of the node-wide list of
/// waiters to compare the waker: ~450 of the node's 8.2k instructions per keep-alive
/// `/health`, ~400 per RAC call (issue 28).
///
/// The registered waker stays right because a connection is served by one task of
/// its own for its whole life (`server::serve_plain` spawns it), whose waker is the
/// same at every poll; keeping the waker to compare would make every idle
/// connection's task 16 bytes larger (`netio`'s `connection_futures_stay_small`).
/// Not to be polled again once it is ready.
pub(crate) fn poll<F: Future<Output = ()> + ?Sized>(
    stop: Pin<&mut F>,
    cx: &mut Context<'_>,
    signal: &watch::Receiver<bool>,
    registered: &mut bool,
) -> Poll<()> {
    if *registered && matches!(signal.has_changed(), Ok(false)) {
        return Poll::Pending;
    }
    let polled = stop.poll(cx);
    *registered = polled.is_pending();
    polled
}
