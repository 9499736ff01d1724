//! What the registry's black-box tests share: free loopback ports, waiting for a
//! started process to listen, and real nodes that register with a registry.

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

/// A child process killed (after a SIGCONT, should it be stopped) and reaped when
/// dropped.
#[allow(dead_code)] // Not every test file starts processes this way.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real `netaccel-node` named `name` (HTTP and RAC on free ports, no gRPC) that
/// registers with `registry`, with one `to_uppercase` slot and `extra` configuration
/// (a `registry_token`, …); its configuration file goes in `dir`. The node and its
/// HTTP address.
#[allow(dead_code)]
pub fn registered_node(
    dir: &std::path::Path,
    registry: &str,
    name: &str,
    extra: &str,
) -> (Killed, SocketAddr) {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_netaccel-registry"))
        .with_file_name("netaccel-node");
    assert!(
        bin.exists(),
        "{} missing: build the workspace",
        bin.display()
    );
    let (http, rac) = (free_port(), free_port());
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "http = \"127.0.0.1:{http}\"\nrac = \"127.0.0.1:{rac}\"\ngrpc = \"off\"\n\
             log_level = \"warn\"\nregistry = \"{registry}\"\nname = \"{name}\"\n{extra}\
             [[slots]]\naccelerator = \"to_uppercase\"\n"
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(bin)
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
    wait_for_port(addr, &mut child, "netaccel-node");
    (Killed(child), addr)
}
