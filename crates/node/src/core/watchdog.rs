//! The slot watchdog: finds calls whose kernel runs past `kernel_timeout_ms`.
//!
//! A slot runs one call at a time to completion, so a kernel that never returns (a
//! device that stopped answering, a kernel bug) would hold its slot's queue forever:
//! every call behind it waits, and the node looks alive while that accelerator is
//! silent. One thread per node looks at every slot a few times per bound; a slot whose
//! call has run longer than the bound is failed ([`crate::core::slot::Slot::check_hung`]):
//! the call and the queue are answered `UNAVAILABLE`, the slot refuses calls until an
//! accelerator is loaded into it again through the admin API, and a fresh worker
//! thread is ready for that. The other slots are not touched.
//!
//! The stuck thread cannot be stopped (Rust has no safe way to end a thread inside a
//! kernel, and a device call may not be interruptible at all): it is abandoned,
//! counted in `netaccel_slot_threads_abandoned`, and exits if its kernel ever returns.
//!
//! What it does not do: bound calls that run on a network thread (cheap calls, see
//! [`crate::core::slot`]): such a call that hangs stalls its network thread; the watchdog
//! still fails its slot so the calls queued there are answered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::core::slot::Slot;

/// The shortest look period: a bound of a few ms costs a wake-up per ms, no more.
const EVERY_MIN: Duration = Duration::from_millis(1);
/// The longest look period: how late past its bound a hung kernel is found, at most.
const EVERY_MAX: Duration = Duration::from_millis(250);
const _: () = assert!(EVERY_MIN.as_nanos() > 0 && EVERY_MIN.as_nanos() < EVERY_MAX.as_nanos());

/// How often the watchdog looks at the slots for a `bound` (not zero): every
/// quarter of it, between [`EVERY_MIN`] and [`EVERY_MAX`].
pub fn period(bound: Duration) -> Duration {
    debug_assert!(!bound.is_zero(), "no watchdog without a bound");
    (bound / 4).clamp(EVERY_MIN, EVERY_MAX)
}

/// Looks at `slots` every quarter of `bound` (between [`EVERY_MIN`] and
/// [`EVERY_MAX`]) until `stop`. A hung kernel is therefore found within
/// 1.25 × `bound` (at most `bound` + 250 ms).
pub fn spawn(slots: Vec<Arc<Slot>>, bound: Duration, stop: Arc<AtomicBool>) {
    if bound.is_zero() || slots.is_empty() {
        return;
    }
    let every = period(bound);
    let spawned = std::thread::Builder::new()
        .name("slot-watchdog".to_string())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(every);
                for slot in &slots {
                    slot.check_hung();
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the slot watchdog: hung kernels will not be detected");
    }
}
