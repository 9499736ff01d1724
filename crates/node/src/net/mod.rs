//! The network layer: socket I/O with deadlines, pooled read buffers, TLS, the node's
//! own epoll event loop and the io_uring one. It knows bytes and connections, not
//! calls: nothing here parses a protocol or touches a slot.
//!
//! | module | what |
//! | --- | --- |
//! | `netio` | reads and writes with a deadline, `IoTimer`, lingering close, the `Transport` trait, the count of timers armed |
//! | `bufpool` | read buffers that go back to a pool while a connection is idle |
//! | [`tls`] | `[tls]` configuration, the reloadable acceptor (SIGHUP), session resumption, client certificate → tenant name, the TLS transport |
//! | `evloop` | the node's own epoll event loop (`network = "epoll"`, the default) |
//! | `uring` | the io_uring network path (`network = "io_uring"`) |
//! | `sys` | `recv`, `send`, `writev` and `epoll_wait` made directly, without glibc's cancellation points |

pub(crate) mod bufpool;
pub(crate) mod evloop;
pub(crate) mod netio;
pub(crate) mod sys;
pub mod tls;
pub(crate) mod uring;

/// For the per-call budget test (`crates/node/tests/budget.rs`): timers armed so far.
pub use netio::timers_armed;
