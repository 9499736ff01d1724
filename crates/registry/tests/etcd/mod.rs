//! etcd for the tests that need a real one (Debian's `etcd-server`): free loopback
//! ports, a data directory of its own, stopped and removed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::free_port;

/// `etcd` on free loopback ports, with a data directory removed on drop.
pub struct Etcd {
    child: Child,
    dir: PathBuf,
    pub client: String,
}

impl Etcd {
    /// Starts etcd and waits until it answers `/health`. Ports are chosen free but can
    /// be taken by another process before etcd binds them (tests run in parallel), so
    /// an etcd that exits or never becomes healthy is tried again on new ports.
    pub fn start() -> Etcd {
        let binary = "/usr/bin/etcd";
        assert!(
            std::path::Path::new(binary).exists(),
            "{binary} is missing: install Debian's etcd-server (test.sh does)"
        );
        for _ in 0..3 {
            let (client_port, peer_port) = (free_port(), free_port());
            let dir = std::env::temp_dir().join(format!(
                "netaccel-registry-etcd-{}-{client_port}",
                std::process::id()
            ));
            let client = format!("127.0.0.1:{client_port}");
            let peer = format!("http://127.0.0.1:{peer_port}");
            let child = Command::new(binary)
                .args(["--name", "test", "--data-dir"])
                .arg(&dir)
                .args(["--listen-client-urls", &format!("http://{client}")])
                .args(["--advertise-client-urls", &format!("http://{client}")])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &format!("test={peer}")])
                .args(["--log-level", "error"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting etcd");
            let mut etcd = Etcd { child, dir, client };
            if etcd.wait_healthy() {
                return etcd;
            }
        }
        panic!("etcd did not become healthy in three tries");
    }

    fn wait_healthy(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        let url = format!("http://{}/health", self.client);
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            let healthy = ureq::get(&url)
                .timeout(Duration::from_secs(1))
                .call()
                .ok()
                .and_then(|r| r.into_string().ok())
                .is_some_and(|body| body.contains("true"));
            if healthy {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
