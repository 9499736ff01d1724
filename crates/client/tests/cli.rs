//! Black-box tests of the `netaccel` CLI against a real node: every subcommand, over
//! HTTP and RAC, and the exit codes of each kind of failure.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Node {
    child: Child,
    http: String,
    rac: String,
    dir: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The node binary, built beside this crate's binary by `cargo test --workspace`.
fn node_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_netaccel")).with_file_name("netaccel-node");
    assert!(
        bin.exists(),
        "{} missing: run `cargo build -p netaccel-node` (or the whole workspace) first",
        bin.display()
    );
    bin
}

fn start_node(extra: &str) -> Node {
    let (http_port, rac_port) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("netaccel-cli-{}-{http_port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("node.toml");
    let text = format!("http = \"127.0.0.1:{http_port}\"\nrac = \"127.0.0.1:{rac_port}\"\nlog_level = \"warn\"\n{extra}");
    std::fs::write(&config, text).unwrap();
    let child = Command::new(node_bin())
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let node = Node {
        child,
        http: format!("http://127.0.0.1:{http_port}"),
        rac: format!("127.0.0.1:{rac_port}"),
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", http_port)).is_err()
        || TcpStream::connect(("127.0.0.1", rac_port)).is_err()
    {
        assert!(Instant::now() < deadline, "node did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    node
}

fn netaccel(node: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel"))
        .arg("--node")
        .arg(node)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn call_over_http_and_rac_with_files_and_params() {
    let node = start_node("");
    let out = netaccel(&node.http, &["call", "to_uppercase"], b"hello");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"HELLO");

    let input = node.dir.join("values.bin");
    let output = node.dir.join("top.bin");
    let values: Vec<u8> = [5i32, -3, 9, 9, 0, 2]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(&input, &values).unwrap();
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    let out = netaccel(
        &node.http,
        &["call", "topk", "-p", "k=3", "-i", i, "-o", o, "-v"],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expect: Vec<u8> = [9i32, 9, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(std::fs::read(&output).unwrap(), expect);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("queue"),
        "verbose prints timings"
    );

    let out = netaccel(
        &node.http,
        &[
            "call", "sobel", "--rac", &node.rac, "-p", "width=2", "-p", "height=2",
        ],
        &[1, 2, 3, 4],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, vec![0; 4]);
}

#[test]
fn listing_and_reconfiguring() {
    let node = start_node("admin_token = \"t0k\"\n");
    let out = netaccel(&node.http, &["accelerators"], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(
        text.contains("topk") && text.contains("k:u32") && text.contains("matmul"),
        "{text}"
    );
    let out = netaccel(&node.http, &["slots", "--json"], b"");
    let slots: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(slots.as_array().unwrap().len(), 7);

    let out = netaccel(&node.http, &["load", "0", "sobel"], b"");
    assert_eq!(out.status.code(), Some(1), "no token: the node refuses");
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNAUTHORIZED"));
    let out = netaccel(&node.http, &["load", "0", "sobel", "--token", "t0k"], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("slot 0 now holds sobel"));
    let out = netaccel(&node.http, &["slots"], b"");
    assert!(String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .contains("sobel"));
}

#[test]
fn exit_codes_say_what_failed() {
    let node = start_node("");
    let out = netaccel(&node.http, &["call", "topk"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing required parameter `k`"));
    let out = netaccel(&node.http, &["call", "nope"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNKNOWN_ACCELERATOR"));
    let out = netaccel(&node.http, &["call", "topk", "-p", "k"], b"");
    assert_eq!(out.status.code(), Some(2));
    let out = netaccel(
        &node.http,
        &["call", "echo", "-i", "/nonexistent/file"],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    let out = netaccel(
        &node.http,
        &["call", "topk", "--rac", &node.rac, "-p", "k=0"],
        b"",
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "params are checked before sending"
    );
    let out = netaccel(
        &node.http,
        &["call", "topk", "--rac", &node.rac, "-p", "k=1"],
        b"abc",
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "payload length is checked before sending"
    );
    let out = netaccel(
        &node.http,
        &["call", "minmax", "--rac", &node.rac],
        &f32::NAN.to_le_bytes(),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "the node refuses what only it can check"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("BAD_REQUEST"));
    let dead = format!("http://127.0.0.1:{}", free_port());
    let out = netaccel(&dead, &["slots"], b"");
    assert_eq!(out.status.code(), Some(3));
}
