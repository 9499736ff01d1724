//! What the registry's black-box tests share: free loopback ports, and waiting for a
//! started process to listen.

use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

pub use testkit::free_port;

/// Waits up to 15 s for `addr` to accept connections; fails at once if `child` exits.
pub fn wait_for_port(addr: SocketAddr, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while TcpStream::connect(addr).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited during start-up: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}
