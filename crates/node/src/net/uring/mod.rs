//! The io_uring network path (`network = "io_uring"`, issue 15 item 5).
//!
//! On the epoll path every request costs the node one `recv` and one `send` system
//! call, plus its share of an `epoll_wait`: exactly what the bare C responder makes,
//! which is why it cannot be cheaper than nginx by much. Here the kernel does the
//! receiving and sending on the node's behalf and only reports completions:
//!
//! - each listener has one *multishot accept*: every new connection is one completion,
//!   with no `accept` call per connection;
//! - each connection has one *multishot receive* into a ring of *provided buffers*
//!   (the kernel picks a free buffer when bytes arrive, so an idle connection holds
//!   none): received bytes are one completion, with no `recv` call;
//! - a turn's answers go to the kernel together when the thread would sleep: several
//!   in one `io_uring_enter`, and one alone (a connection answering one request per
//!   wake-up) with a plain non-blocking `send`, which costs less than a submission
//!   and its completion; what a socket does not take at once goes to the ring. The
//!   thread then sleeps in an `io_uring_enter`, waiting for completions (the loop's
//!   epoll descriptor is polled on the ring: a wake-up from another thread ends the
//!   wait too).
//!
//! What stays the same is deliberate: this is a different way of doing I/O feeding the
//! same code. The ring lives beside each network thread's own event loop
//! ([`crate::net::evloop`], which sleeps in the ring instead of its `epoll_wait`),
//! and a connection here is a [`UringStream`], one more
//! [`crate::net::netio::Transport`]; the HTTP and RAC front ends, their parsers, the
//! dispatcher and every timeout and bound run unchanged on it. Answers of calls queued
//! to slot threads wake the connection's task as on epoll. TLS and gRPC listeners are
//! served by the network thread's companion tokio runtime, as on epoll.
//!
//! Everything here is per network thread (a thread-local [`Driver`]) and never
//! touched from another thread: no lock.

mod driver;
mod stream;

pub(crate) use driver::{install, probe, sleep};
pub(crate) use stream::{Listener, UringStream};
