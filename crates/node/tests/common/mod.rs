//! Black-box test harness: starts the real `netaccel-node` binary on a free loopback
//! port with a given configuration and talks to it with real clients.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct TestNode {
    pub child: Child,
    pub addr: SocketAddr,
    pub rac_addr: SocketAddr,
    pub dir: PathBuf,
    /// Connections the harness opened (and closed at once) to see the node listen:
    /// the node accepts and counts them too, a moment later, maybe on another thread.
    pub probe_connections: u64,
}

/// Whether an OpenCL platform is installed for the tests that share one. Missing, the
/// test says why and passes; in CI (`CI=true`) a missing platform is a failure.
pub fn opencl_runtime_present() -> bool {
    // netaccel's own ICD is not a platform the node can share.
    let present = std::fs::read_dir("/etc/OpenCL/vendors")
        .map(|rd| {
            rd.filter_map(Result::ok)
                .any(|e| !e.file_name().to_string_lossy().contains("netaccel"))
        })
        .unwrap_or(false);
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no OpenCL platform installed (/etc/OpenCL/vendors is empty); CI needs PoCL"
        );
        eprintln!("SKIP: no OpenCL platform installed (/etc/OpenCL/vendors is empty)");
    }
    present
}

/// `NETACCEL_TEST_NETWORK=io_uring` (or `tokio`) runs a test's nodes on that network
/// path (`network = "io_uring"`): test.sh runs the front-end, overload and drain
/// suites once per path with the same tests.
/// A test whose `config` names its network path keeps it.
pub fn network_line(config: &str) -> String {
    if config.contains("network =") {
        return String::new();
    }
    match std::env::var("NETACCEL_TEST_NETWORK") {
        Ok(network) if !network.is_empty() => format!("network = \"{network}\"\n"),
        _ => String::new(),
    }
}

/// A loopback address free when picked (see `testkit`). Another process may take it
/// before the node binds it: name it in a config made by [`TestNode::start_with`] (or
/// [`TestNode::start_logging_with`]), which picks again when the node cannot bind.
#[allow(unused_imports)]
pub use testkit::{free_addr, free_port};

/// The harness's own `grpc` line (a port the kernel picks), unless `config` sets the
/// key at its top level (before any table).
fn grpc_line(config: &str) -> &'static str {
    let names_grpc = config
        .lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .any(|l| l.trim_start().starts_with("grpc ") || l.trim_start().starts_with("grpc="));
    if names_grpc {
        ""
    } else {
        "grpc = \"127.0.0.1:0\"\n"
    }
}

impl TestNode {
    /// Starts a node with `config` (TOML, without the `http` key).
    pub fn start(config: &str) -> TestNode {
        TestNode::launch(config, &[], false)
    }

    /// Starts a node with `config` and extra command-line `args` (`--log-level debug`
    /// overrides the harness's `log_level = "warn"`); its stderr goes to a file that
    /// [`TestNode::log`] reads.
    pub fn start_logging(config: &str, args: &[&str]) -> TestNode {
        TestNode::launch(config, args, true)
    }

    /// As [`TestNode::start_logging`], with the kernel refusing io_uring to the node
    /// (`io_uring_setup` fails with ENOSYS under a seccomp filter, as a container
    /// runtime's default profile makes it fail).
    pub fn start_logging_without_io_uring(config: &str, args: &[&str]) -> TestNode {
        TestNode::launch_with(
            &mut || config.to_string(),
            args,
            true,
            Some(refuse_io_uring),
        )
    }

    /// What the node has written on stderr so far (nodes from `start_logging`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// As [`TestNode::start`] with the config `make` returns, asked anew for each
    /// attempt: for configs naming addresses of their own (picked free, they may be
    /// taken by the time the node binds them; the next attempt picks others). The
    /// value beside the config (those addresses) is the last attempt's.
    #[allow(dead_code)]
    pub fn start_with<T>(make: impl FnMut() -> (String, T)) -> (TestNode, T) {
        TestNode::launch_making(make, &[], false)
    }

    /// As [`TestNode::start_with`], with extra `args` and stderr kept for
    /// [`TestNode::log`] (as [`TestNode::start_logging`]).
    #[allow(dead_code)]
    pub fn start_logging_with<T>(
        make: impl FnMut() -> (String, T),
        args: &[&str],
    ) -> (TestNode, T) {
        TestNode::launch_making(make, args, true)
    }

    fn launch_making<T>(
        mut make: impl FnMut() -> (String, T),
        args: &[&str],
        capture_stderr: bool,
    ) -> (TestNode, T) {
        let mut value = None;
        let node = TestNode::launch_with(
            &mut || {
                let (config, v) = make();
                value = Some(v);
                config
            },
            args,
            capture_stderr,
            None,
        );
        (node, value.expect("made at least once"))
    }

    fn launch(config: &str, args: &[&str], capture_stderr: bool) -> TestNode {
        TestNode::launch_with(&mut || config.to_string(), args, capture_stderr, None)
    }

    /// Starts the node, trying again with other ports (and a config made anew) when
    /// it exits during start-up (a port picked free was taken meanwhile) or does not
    /// listen within 10 s.
    fn launch_with(
        make_config: &mut dyn FnMut() -> String,
        args: &[&str],
        capture_stderr: bool,
        before_exec: Option<fn() -> std::io::Result<()>>,
    ) -> TestNode {
        let mut exited = None;
        for _ in 0..5 {
            let config = make_config();
            let config = config.as_str();
            let port = free_port();
            let rac_port = free_port();
            let dir =
                std::env::temp_dir().join(format!("netaccel-test-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("node.toml");
            std::fs::write(
                &path,
                format!("http = \"127.0.0.1:{port}\"\nrac = \"127.0.0.1:{rac_port}\"\n{}log_level = \"warn\"\n{}{config}", grpc_line(config), network_line(config)),
            )
            .unwrap();
            let stderr = if capture_stderr {
                Stdio::from(std::fs::File::create(dir.join("stderr.log")).unwrap())
            } else {
                Stdio::inherit()
            };
            let mut command = Command::new(env!("CARGO_BIN_EXE_netaccel-node"));
            command
                .arg("--config")
                .arg(&path)
                .args(args)
                .stdout(Stdio::null())
                .stderr(stderr);
            if let Some(hook) = before_exec {
                use std::os::unix::process::CommandExt;
                // SAFETY: the hook only makes system calls (prctl), which are safe
                // between fork and exec.
                unsafe { command.pre_exec(hook) };
            }
            let mut child = command.spawn().expect("starting netaccel-node");
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let rac_addr: SocketAddr = format!("127.0.0.1:{rac_port}").parse().unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut probe_connections = 0;
            while Instant::now() < deadline {
                if let Some(status) = child.try_wait().unwrap() {
                    exited = Some(status);
                    break;
                }
                let http = TcpStream::connect(addr).is_ok();
                let rac = http && TcpStream::connect(rac_addr).is_ok();
                probe_connections += u64::from(http) + u64::from(rac);
                if rac {
                    return TestNode {
                        child,
                        addr,
                        rac_addr,
                        dir,
                        probe_connections,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        match exited {
            Some(status) => panic!("node exited during start-up, five times: {status}"),
            None => panic!("node did not start"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `GET path` as JSON.
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        ureq::get(&self.url(path))
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    }

    /// The value of an unlabelled metric, or of the first series starting with `prefix`.
    pub fn metric(&self, prefix: &str) -> f64 {
        let text = ureq::get(&self.url("/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .unwrap_or_else(|| panic!("no metric {prefix}"))
            .parse()
            .unwrap()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Resident set size of the node, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Sends raw bytes on a new connection and reads until the node closes it or
    /// `quiet` passes without new bytes.
    pub fn raw(&self, request: &[u8], quiet: Duration) -> Vec<u8> {
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.write_all(request).unwrap();
        read_until_quiet(&mut s, quiet)
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "node did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn read_until_quiet(s: &mut TcpStream, quiet: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(quiet)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    out
}

/// A parsed response: status, headers (lower-case names), body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
}

/// Splits a byte stream holding several responses (Content-Length framed, or no body
/// for 1xx/204/304) into parsed responses.
pub fn parse_responses(mut data: &[u8]) -> Vec<Resp> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let end = data
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("complete head")
            + 4;
        let head = std::str::from_utf8(&data[..end]).unwrap();
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once(':').unwrap();
                (k.trim().to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        let len = if status < 200 || status == 204 || status == 304 {
            0
        } else {
            len
        };
        out.push(Resp {
            status,
            headers,
            body: data[end..end + len].to_vec(),
        });
        data = &data[end + len..];
    }
    out
}

/// Runs curl with `args`; returns (HTTP status, body).
pub fn curl(args: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-S",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "--max-time",
            "20",
        ])
        .args(args)
        .output()
        .expect("curl is installed");
    assert!(
        out.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut body = out.stdout;
    let nl = body.iter().rposition(|&b| b == b'\n').unwrap();
    let status = std::str::from_utf8(&body[nl + 1..])
        .unwrap()
        .parse()
        .unwrap();
    body.truncate(nl);
    (status, body)
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A tiny deterministic PRNG (xorshift64*), so tests need no extra crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Runs the node with `config` (TOML; `http` and `rac` on free ports are added) and
/// the extra command-line `args`, expecting it to refuse to start. Returns its exit
/// code and everything it printed on stderr.
pub fn start_refused(config: &str, args: &[&str]) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!(
        "netaccel-refused-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.toml");
    let (port, rac_port) = (free_port(), free_port());
    std::fs::write(
        &path,
        format!("http = \"127.0.0.1:{port}\"\nrac = \"127.0.0.1:{rac_port}\"\n{config}"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel-node"))
        .arg("--config")
        .arg(&path)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting netaccel-node");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node started with {config:?} {args:?}; it should have refused");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// In the child before exec: a seccomp filter under which `io_uring_setup` fails with
/// ENOSYS and every other system call is allowed (x86-64; elsewhere nothing is
/// refused).
fn refuse_io_uring() -> std::io::Result<()> {
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    let stmt = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump_unless = |k: u32, skip: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt: 0,
        jf: skip,
        k,
    };
    let load = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    let filter = [
        stmt(load, 4), // seccomp_data.arch
        jump_unless(AUDIT_ARCH_X86_64, 3),
        stmt(load, 0), // seccomp_data.nr
        jump_unless(libc::SYS_io_uring_setup as u32, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with valid arguments; the program outlives the call, which
    // copies it into the kernel.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `libnetaccel_opencl.so` as cargo built it beside the node (`cargo test --workspace`
/// and test.sh build it; `deps/` holds it after `cargo test`, the directory above after
/// `cargo build`): the newer of the two, so that a library left by an earlier `cargo
/// build` does not stand in for the one this test run built (it once spoke an older
/// protocol than the node, whose Hello then refused it).
pub fn icd_library() -> Option<PathBuf> {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_netaccel-node"));
    let dir = bin.parent()?;
    [
        dir.join("libnetaccel_opencl.so"),
        dir.join("deps/libnetaccel_opencl.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(modified, _)| *modified)
    .map(|(_, p)| p)
}

/// An OpenCL program of `tests/c/` built against the ICD loader, and the vendors
/// folder naming netaccel's ICD (for `OCL_ICD_VENDORS`).
pub struct IcdProgram {
    pub exe: PathBuf,
    pub vendors: PathBuf,
}

/// Builds `tests/c/NAME.c` into `dir` (once: a build there is reused) with a vendors
/// folder naming the ICD; `Err` says what is missing (gcc, the ICD), for the caller's
/// skip — a failure under CI.
pub fn icd_program(dir: &std::path::Path, name: &str) -> Result<IcdProgram, &'static str> {
    let vendors = dir.join("vendors");
    let exe = dir.join(name);
    if exe.exists() {
        return Ok(IcdProgram { exe, vendors });
    }
    if Command::new("gcc").arg("--version").output().is_err() {
        return Err("gcc not found");
    }
    let Some(icd) = icd_library() else {
        return Err("libnetaccel_opencl.so not built (cargo build -p ocl-icd)");
    };
    std::fs::create_dir_all(&vendors).unwrap();
    std::fs::write(vendors.join("netaccel.icd"), format!("{}\n", icd.display())).unwrap();
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg("-lOpenCL")
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(IcdProgram { exe, vendors })
}
