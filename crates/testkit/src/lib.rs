//! What the workspace's black-box tests share: loopback ports for the servers they
//! start (below), and the replay of a crate's checked-in fuzz corpus ([`fuzz_corpus`]).
//!
//! **Ports.** A test that starts a server (a node, a registry, etcd, Prometheus) on a
//! port of its choosing has to pick one that is free, and the server binds it a moment
//! later. Asking the kernel for one (`bind` to port 0, then close) returns a port of
//! the *ephemeral* range, the range the kernel also gives to outgoing connections as
//! their source ports: while the suite's other tests open thousands of connections
//! (the connection-bound tests open 2,000 at once), such a port is often taken as a
//! source port before the server binds it, and the server fails to start. So
//! [`free_port`] picks from just below the ephemeral range
//! (`net.ipv4.ip_local_port_range`), which outgoing connections never use: only
//! another test picking at the same moment can take the same port, and the test
//! harnesses try again with another when a server cannot bind its port.

pub mod fuzz_corpus;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// How many ports below the ephemeral range picks come from.
const SPAN: u16 = 12_000;

/// A loopback TCP port free when picked, outside the range of outgoing connections'
/// source ports.
pub fn free_port() -> u16 {
    let (low, high) = pick_range();
    for _ in 0..64 {
        let port = low + (next_random() % u64::from(high - low)) as u16;
        // Free for a listener now, and not in TIME_WAIT use by an earlier test's
        // server either (bind without SO_REUSEADDR would fail then).
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    // A crowded range: the kernel's choice, as before.
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// [`free_port`] as a loopback address.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()))
}

/// The range picks come from: the `SPAN` ports below the kernel's ephemeral range,
/// above the privileged ports.
fn pick_range() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    range_below(ephemeral_low)
}

fn range_below(ephemeral_low: u16) -> (u16, u16) {
    let high = ephemeral_low.max(1_024 + 1_000);
    let low = high.saturating_sub(SPAN).max(1_024);
    (low, high)
}

/// splitmix64 over a counter seeded per process from the clock and the process id:
/// picks differ between the test binaries that run at once, and between the threads
/// of one (each call takes its own step of the counter).
fn next_random() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    static STEP: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ (u64::from(std::process::id()) << 32)
    });
    let step = STEP.fetch_add(1, Ordering::Relaxed);
    let mut z = seed.wrapping_add(step.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `BIN hash-token` (the node's or the registry's), as a user runs it: `token` on its
/// standard input, the argon2id PHC string it prints; checked to be one, and not to
/// hold the token.
pub fn hash_token(bin: &std::path::Path, token: &str) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(bin)
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    writeln!(child.stdin.take().expect("piped stdin"), "{token}").expect("write the token");
    let out = child.wait_with_output().expect("hash-token ends");
    assert!(out.status.success(), "{} hash-token failed", bin.display());
    let hash = String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(!hash.contains(token));
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_free_and_below_the_ephemeral_range() {
        let (low, high) = pick_range();
        for _ in 0..100 {
            let port = free_port();
            assert!((low..high).contains(&port), "{port} outside {low}..{high}");
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("free when picked");
        }
    }

    #[test]
    fn the_range_stays_above_the_privileged_ports() {
        assert_eq!(range_below(32_768), (20_768, 32_768));
        assert_eq!(range_below(1_024), (1_024, 2_024));
        assert_eq!(range_below(5_000), (1_024, 5_000));
    }
}
