//! The node at its connection bound (issue 15): connections past `connections_max` are
//! refused exactly as documented (HTTP 503 with `Connection: close`, RAC a BUSY result
//! then close), counted in /metrics, while the connections already open keep being
//! served; the open-file limit is raised at start to what the bound needs, or the node
//! refuses to start naming both; and a CI-sized run of `bench/connections/connections.py`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{start_refused, TestNode};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Reads one HTTP response (head and `Content-Length` body) from `s`.
fn read_response(s: &mut TcpStream) -> (String, Vec<u8>) {
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).expect("reading a response");
        assert!(n > 0, "connection closed before a whole response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).expect("reading a body");
        assert!(n > 0, "connection closed inside a body");
        buf.extend_from_slice(&chunk[..n]);
    }
    (head, buf[head_end..head_end + len].to_vec())
}

fn http_get(s: &mut TcpStream, path: &str) -> (String, Vec<u8>) {
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    read_response(s)
}

fn rac_echo(s: &mut TcpStream, request_id: u32, body: &[u8]) {
    let mut h = [0u8; 64];
    h[..4].copy_from_slice(b"RAC1");
    h[4] = 1;
    h[6..8].copy_from_slice(&1u16.to_le_bytes()); // echo
    h[8..12].copy_from_slice(&(body.len() as u32).to_le_bytes());
    h[12..16].copy_from_slice(&request_id.to_le_bytes());
    s.write_all(&h).unwrap();
    s.write_all(body).unwrap();
    let (status, rid, payload) = rac_result(s);
    assert_eq!((status, rid, payload.as_slice()), (0, request_id, body));
}

/// One RAC result: status, request id, payload.
fn rac_result(s: &mut TcpStream) -> (u16, u32, Vec<u8>) {
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut h = [0u8; 64];
    s.read_exact(&mut h).expect("reading a RAC result header");
    assert_eq!(&h[..4], b"RAC1");
    assert_eq!(h[4], 2, "a result");
    let status = u16::from_le_bytes([h[6], h[7]]);
    let len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
    let rid = u32::from_le_bytes(h[12..16].try_into().unwrap());
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).unwrap();
    (status, rid, payload)
}

/// Reads until the node closes the connection (bounded by the read timeout).
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .expect("the node closes a refused connection");
    out
}

/// A metric's value from /metrics text (0 when absent).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0.0)
}

/// The start-up probes' connections are accepted and closed asynchronously, each by
/// whichever network thread the kernel hands it to: wait, asking on `s` (kept open),
/// until the node has accepted every probe and `s`, and holds no connection but `s`.
/// (Looking at the open connections alone was not enough: on a loaded machine a
/// probe could still wait in another thread's accept queue, then take a place under
/// `connections_max` the test counted on.)
fn wait_until_only(node: &TestNode, s: &mut TcpStream) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let text = String::from_utf8(http_get(s, "/metrics").1).unwrap();
        let http = metric(&text, "netaccel_connections_open{protocol=\"http\"}");
        let rac = metric(&text, "netaccel_connections_open{protocol=\"rac\"}");
        let accepted: f64 = text
            .lines()
            .filter(|l| l.starts_with("netaccel_connections_accepted_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if (http, rac) == (1.0, 0.0) && accepted == (node.probe_connections + 1) as f64 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "start-up connections never closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn connections_past_the_bound_are_refused_as_documented_counted_and_others_served() {
    let node = TestNode::start("connections_max = 4\n[[slots]]\naccelerator = \"echo\"\n");
    let mut h1 = TcpStream::connect(node.addr).unwrap();
    wait_until_only(&node, &mut h1);
    // Four connections, each answered once so the node has surely counted it.
    let mut h2 = TcpStream::connect(node.addr).unwrap();
    let mut r1 = TcpStream::connect(node.rac_addr).unwrap();
    let mut r2 = TcpStream::connect(node.rac_addr).unwrap();
    assert!(http_get(&mut h1, "/health").0.starts_with("HTTP/1.1 200"));
    assert!(http_get(&mut h2, "/health").0.starts_with("HTTP/1.1 200"));
    rac_echo(&mut r1, 1, b"one");
    rac_echo(&mut r2, 1, b"two");

    // The fifth, over HTTP: a 503 that says BUSY, Retry-After, Connection: close, and
    // the close, even though the client had already sent a request.
    let mut refused = TcpStream::connect(node.addr).unwrap();
    refused
        .write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let answer = String::from_utf8(read_to_close(&mut refused)).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("\r\nConnection: close\r\n"), "{answer}");
    assert!(answer.contains("\r\nRetry-After: 1\r\n"), "{answer}");
    assert!(answer.ends_with(r#""code":"BUSY"}"#), "{answer}");
    assert_eq!(
        answer.matches("HTTP/1.1").count(),
        1,
        "one answer: {answer}"
    );

    // Over RAC: one BUSY result with request id 0 and a message, then the close.
    let mut refused = TcpStream::connect(node.rac_addr).unwrap();
    let (status, rid, message) = rac_result(&mut refused);
    assert_eq!((status, rid), (3, 0), "BUSY for request id 0");
    assert!(String::from_utf8_lossy(&message).contains("connection limit"));
    assert!(read_to_close(&mut refused).is_empty(), "closed after BUSY");

    // The four are still served, and the refusals are counted once each.
    rac_echo(&mut r1, 2, b"still");
    rac_echo(&mut r2, 2, b"here");
    assert!(http_get(&mut h2, "/health").0.starts_with("HTTP/1.1 200"));
    let text = String::from_utf8(http_get(&mut h1, "/metrics").1).unwrap();
    assert_eq!(
        metric(
            &text,
            "netaccel_connections_refused_total{protocol=\"http\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "netaccel_connections_refused_total{protocol=\"rac\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&text, "netaccel_connections_open{protocol=\"rac\"}"),
        2.0
    );

    // A closed connection frees its place: a new one is served (polled, since the node
    // notices the close asynchronously).
    drop(r2);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut s = TcpStream::connect(node.rac_addr).unwrap();
        let mut h = [0u8; 64];
        h[..4].copy_from_slice(b"RAC1");
        h[4] = 1;
        h[6..8].copy_from_slice(&1u16.to_le_bytes());
        h[8..12].copy_from_slice(&2u32.to_le_bytes());
        h[12..16].copy_from_slice(&9u32.to_le_bytes());
        s.write_all(&h).unwrap();
        s.write_all(b"ok").unwrap();
        let (status, rid, _) = rac_result(&mut s);
        if (status, rid) == (0, 9) {
            break;
        }
        assert_eq!((status, rid), (3, 0), "only a refusal may come instead");
        assert!(
            Instant::now() < deadline,
            "the freed place was never reused"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_bound_above_the_hard_open_file_limit_is_refused_at_start_naming_both() {
    // No host allows a hard limit near this (Linux caps it at fs.nr_open).
    let (code, stderr) = start_refused("connections_max = 1000000000\n", &[]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("connections_max = 1000000000"), "{stderr}");
    assert!(stderr.contains("hard open-file limit"), "{stderr}");
}

/// Starts the node with `config` (without its listeners) under the open-file limits
/// `soft` and `hard`, on ports picked free (others when the node exits because one was
/// taken meanwhile); the node, its HTTP address, and the file its stderr goes to.
/// A node that exits during start-up for any other reason fails the test.
fn start_limited(
    dir: &std::path::Path,
    config: &str,
    soft: u64,
    hard: u64,
) -> (Killed, SocketAddr, std::path::PathBuf) {
    let stderr_path = dir.join("stderr.log");
    for _ in 0..5 {
        let (port, rac_port) = (common::free_addr().port(), common::free_addr().port());
        let path = dir.join("node.toml");
        std::fs::write(
            &path,
            format!("http = \"127.0.0.1:{port}\"\nrac = \"127.0.0.1:{rac_port}\"\ngrpc = \"127.0.0.1:0\"\nlog_level = \"warn\"\n{config}"),
        )
        .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_netaccel-node"));
        cmd.arg("--config")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap());
        // SAFETY: only async-signal-safe setrlimit between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut node = Killed(cmd.spawn().unwrap());
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if TcpStream::connect(addr).is_ok() {
                return (node, addr, stderr_path);
            }
            if node.0.try_wait().unwrap().is_some() {
                let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                assert!(
                    log.contains("Address already in use"),
                    "the node exited during start-up: {log}"
                );
                break;
            }
            assert!(Instant::now() < deadline, "node did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("the node found its ports taken five times");
}

/// Kills the node however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The node's soft open-file limit, from /proc.
fn soft_nofile(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[test]
fn the_soft_open_file_limit_is_raised_to_what_the_bound_needs() {
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid pointer to a local struct.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) },
        0
    );
    let bound = 2000u64;
    let needed = bound + 256 + 2;
    if hard.rlim_max < needed {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "hard open-file limit {} is below {needed}",
            hard.rlim_max
        );
        eprintln!(
            "SKIP: hard open-file limit {} below {needed}",
            hard.rlim_max
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("netaccel-fdlimit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The node starts with a soft limit of 1024, as most shells give it.
    let (node, _, _) = start_limited(
        &dir,
        &format!("connections_max = {bound}\nio_threads = 1\n"),
        1024,
        hard.rlim_max,
    );
    assert_eq!(soft_nofile(node.0.id()), needed);
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With its defaults the node starts on a host whose hard open-file limit is below
/// what the default bound (10,000) needs: the bound is fitted to the limit, with a
/// warning; a bound the operator set is refused instead (the test above).
#[test]
fn the_default_bound_is_fitted_to_a_low_hard_open_file_limit() {
    let dir = std::env::temp_dir().join(format!("netaccel-fdfit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A container's usual limits: 1,024 soft, 4,096 hard. Exiting here (refusing to
    // start with the default bound) fails in `start_limited`.
    let (node, _, stderr) = start_limited(&dir, "io_threads = 1\n", 1024, 4096);
    // Soft limit raised to the hard one: the fitted bound (4096 - 256 - 2) + the rest.
    assert_eq!(soft_nofile(node.0.id()), 4096);
    drop(node);
    let text = std::fs::read_to_string(&stderr).unwrap();
    assert!(text.contains("connections_max=3838"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Node memory (RSS) per idle connection the CI-sized run must stay under. At 1,499
/// connections a debug build measured 3.8 KiB (fixed costs spread over fewer
/// connections; a release build at 18,000: 1.9 KiB, the figure in
/// docs/operations.md), and 6.6 KiB before idle connections stopped taking a read
/// buffer; the bound leaves room for noise.
const IDLE_CONNECTION_BYTES_MAX: u64 = 5120;

/// The harness of `bench/connections/run.sh`, CI-sized: 2,000 connections (half HTTP,
/// half RAC, from four processes and source addresses) against a bound of 1,500:
/// exactly the bound is accepted and kept open, every other connection is refused
/// with its protocol's answer and counted, the open ones still answer calls, and an
/// idle connection costs the node at most [`IDLE_CONNECTION_BYTES_MAX`].
#[test]
fn two_thousand_connections_against_a_bound_of_1500() {
    let python = Command::new("python3").arg("--version").output();
    if python.map(|o| !o.status.success()).unwrap_or(true) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 is needed for the connection harness"
        );
        eprintln!("SKIP: python3 not found");
        return;
    }
    let node = TestNode::start(
        "connections_max = 1500\nidle_timeout_ms = 300000\nio_threads = 1\n[[slots]]\naccelerator = \"echo\"\n",
    );
    // Held from before the run, so /metrics can be read afterwards without racing
    // the node's noticing of the harness's closes: the harness gets 1,499 places.
    let mut held = TcpStream::connect(node.addr).unwrap();
    wait_until_only(&node, &mut held);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/connections/connections.py"
    );
    let out = Command::new("timeout")
        .args(["120", "python3", script])
        .args(["--http-port", &node.addr.port().to_string()])
        .args(["--rac-port", &node.rac_addr.port().to_string()])
        .args(["--node-pid", &node.pid().to_string()])
        .args([
            "--conns",
            "2000",
            "--procs",
            "4",
            "--active-per-worker",
            "4",
        ])
        .args(["--calls", "10", "--timeout", "90"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "harness failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{r}");
    assert_eq!(r["opened"], 2000, "{r}");
    assert_eq!(r["errors"], 0, "{r}");
    assert_eq!(r["accepted"], 1499, "{r}");
    assert_eq!(r["unexpected"], 0, "{r}");
    assert_eq!(r["refused_closed"], 0, "every refusal says why: {r}");
    let refused = r["refused_http_503"].as_u64().unwrap() + r["refused_rac_busy"].as_u64().unwrap();
    assert_eq!(refused, 501, "{r}");
    assert_eq!(r["active_ok"], 16, "{r}");
    assert_eq!(r["active_failed"], 0, "{r}");
    assert_eq!(r["idle_closed_meanwhile"], 0, "{r}");
    // An idle connection holds no read buffer: its task, socket registration and
    // timer only.
    let per_idle = r["rss_per_idle_conn_bytes"].as_u64().unwrap();
    assert!(
        per_idle <= IDLE_CONNECTION_BYTES_MAX,
        "{per_idle} bytes of node RSS per idle connection, bound {IDLE_CONNECTION_BYTES_MAX}: {r}"
    );
    let text = String::from_utf8(http_get(&mut held, "/metrics").1).unwrap();
    let http = metric(
        &text,
        "netaccel_connections_refused_total{protocol=\"http\"}",
    );
    let rac = metric(
        &text,
        "netaccel_connections_refused_total{protocol=\"rac\"}",
    );
    assert_eq!(
        (http as u64, rac as u64),
        (
            r["refused_http_503"].as_u64().unwrap(),
            r["refused_rac_busy"].as_u64().unwrap()
        )
    );
}
