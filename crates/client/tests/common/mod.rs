//! What the black-box tests that start real registries and nodes share: free ports,
//! the workspace's other binaries, waiting for a listener, processes killed on drop.
#![allow(dead_code)] // each test binary uses its own part

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

pub use testkit::free_port;

/// A binary built beside `netaccel` (`cargo build --workspace`, or `cargo test
/// --workspace`).
pub fn sibling_bin(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_netaccel")).with_file_name(name);
    assert!(
        bin.exists(),
        "{} missing: run `cargo build -p {name}` (or build the whole workspace) first",
        bin.display()
    );
    bin
}

pub fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    if let Err(status) = listening(port, child, what) {
        panic!("{what} (port {port}) exited during start-up: {status}");
    }
}

/// Waits until `child` listens on `port`; its exit status if it ended first (a port
/// that another test picked at the same moment and bound first, see
/// `testkit::free_port`: the caller starts it again on other ports).
pub fn listening(port: u16, child: &mut Child, what: &str) -> Result<(), std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            return Err(status);
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A process killed on drop, and a folder removed with it.
pub struct Process {
    pub child: Child,
    pub dir: Option<PathBuf>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
