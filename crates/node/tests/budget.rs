//! The per-call budget (issue 28): what one small call costs the node, in counts that do
//! not depend on how busy the machine is, so that a change that adds a system call, an
//! allocation, a wake-up of another thread or a timer to the inline path of a small call
//! fails here and says which, instead of showing up later as microseconds nobody can
//! place.
//!
//! For a 64 B and a 4 KiB `echo` over RAC and over HTTP keep-alive (and HTTP's
//! `/health`, the request `bench/http` compares with the C responder), one call at a
//! time on one connection, on an idle node with one network thread, on each network
//! path, per call:
//!
//! | count | budget on epoll (`epoll`, `tokio`) | on io_uring | how it is counted |
//! | --- | --- | --- | --- |
//! | reads (`read`, `recvfrom`, …) of the network thread | 1 | 0 | `strace -f` |
//! | writes (`write`, `sendto`, `writev`, …) of the network thread | 1 | 1 | `strace -f` |
//! | event waits (`epoll_wait`) of the network thread | 1 | 0 | `strace -f` |
//! | `io_uring_enter` of the network thread | 0 | 1 | `strace -f` |
//! | any other system call of the network thread (`futex` wakes, `epoll_ctl`, …) | 0 | 0 | `strace -f` |
//! | system calls of the slot workers and every other node thread (wake-ups) | 0 | 0 | `strace -f` |
//! | heap allocations (`alloc` and `realloc`) of the node | RAC 0, HTTP 1, `/health` 0 | RAC 0, HTTP 1, `/health` 0 | a counting global allocator |
//! | timers armed by the network paths | 0 | 0 | `netaccel_node::net::timers_armed` |
//!
//! HTTP's one allocation is the boxed future of the request's handling
//! (`front::http::conn`, issue 15): unboxed, every idle connection carried its 4 KiB. A
//! health check without a body is answered without it, so `/health` makes none.
//! io_uring's two system calls per call are what its path makes today: the thread
//! sleeps in the ring, in an `io_uring_enter` that waits for the call's bytes (the
//! ring receives them), and sends the answer with one `send` when it is the turn's
//! only one (a busy turn's answers go through the ring together instead). Until the
//! loop slept in the ring it took three: an `epoll_wait` on the ring's eventfd, and
//! two `io_uring_enter`, one to take the call's bytes, one to submit the answer.
//!
//! Why these mechanisms: `strace` sees every system call of every thread whatever the
//! build, and the order of the lines places each call in its phase; `perf stat`'s
//! tracepoints would cost less, but need privileges CI may not give. A counting
//! allocator needs the node in the same process, so the node runs in-process in a
//! child process (this test binary again, its `budget_probe` test) that `strace`
//! follows; the client there allocates nothing per call, and what it allocates is
//! not counted anyway. The counts are totals over [`CALLS`] calls on one connection,
//! so the fixed costs (an accept, a buffer's first allocation, a timer's first arming)
//! fit in a small slack ([`SLACK`]) while one more per call adds [`CALLS`].
//!
//! `strace` missing (Debian package `strace`) or refused (no ptrace), or a kernel that
//! refuses io_uring (the node then serves on epoll), skips the test, or its io_uring
//! half, locally and fails it under CI (`CI=true`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use netaccel_node::config::Network;

/// Calls per protocol that are counted, after [`WARM_UP`] that are not.
const CALLS: u64 = 1000;
const WARM_UP: u64 = 100;
/// What a whole run may add over the per-call budget, all calls together: a
/// connection's fixed costs, and what comes once every few dozen calls (on io_uring a
/// 4 KiB call takes one more `io_uring_enter` about every 33 calls). One more per call
/// adds [`CALLS`], twenty times this.
const SLACK: u64 = 16 + CALLS / 20;
/// Payload bytes of each call.
const PAYLOAD: usize = 64;

/// Where the probe writes its counts; set only in the probe's process.
const OUT_ENV: &str = "NETACCEL_BUDGET_OUT";

struct Counting;

/// Heap allocations (`alloc`, `alloc_zeroed`, `realloc`) of every thread.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Allocations of this thread: the client's, taken out of the node's count.
    static MINE: Cell<u64> = const { Cell::new(0) };
}

fn counted() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    let _ = MINE.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to the system allocator unchanged; counting touches
// an atomic and a const-initialised thread-local without a destructor, neither of
// which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The node's allocations so far: everyone's but this thread's.
fn node_allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed) - MINE.with(Cell::get)
}

/// A line in the `strace` output that separates the phases: a system call nothing
/// else in the process makes.
fn marker() {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() };
}

/// The calls, as the client sends and reads them: the 64 B and 4 KiB echo over RAC and
/// HTTP (the sizes of `bench/rac`), and HTTP's `/health`, what `bench/http` compares
/// with the C responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Rac,
    Http,
    Health,
    Rac4k,
    Http4k,
}

/// The network paths, in the order the probe runs them.
const NETWORKS: [Network; 3] = [Network::Epoll, Network::Tokio, Network::IoUring];

fn network_name(network: Network) -> &'static str {
    match network {
        Network::Epoll => "epoll",
        Network::Tokio => "tokio",
        Network::IoUring => "io_uring",
    }
}

/// The network thread's system calls per call on `network`, by kind (see [`kind`]).
fn system_calls_per_call(network: Network) -> [(&'static str, u64); 5] {
    match network {
        Network::Epoll | Network::Tokio => [
            ("read", 1),
            ("write", 1),
            ("wait", 1),
            ("ring", 0),
            ("other", 0),
        ],
        Network::IoUring => [
            ("read", 0),
            ("write", 1),
            ("wait", 0),
            ("ring", 1),
            ("other", 0),
        ],
    }
}

impl Protocol {
    const ALL: [Protocol; 5] = [
        Protocol::Rac,
        Protocol::Http,
        Protocol::Health,
        Protocol::Rac4k,
        Protocol::Http4k,
    ];

    fn name(self) -> &'static str {
        match self {
            Protocol::Rac => "RAC",
            Protocol::Http => "HTTP",
            Protocol::Health => "HTTP /health",
            Protocol::Rac4k => "RAC 4 KiB",
            Protocol::Http4k => "HTTP 4 KiB",
        }
    }

    fn rac(self) -> bool {
        matches!(self, Protocol::Rac | Protocol::Rac4k)
    }

    /// Heap allocations the node may make per call.
    fn allocations_per_call(self) -> u64 {
        match self {
            Protocol::Rac | Protocol::Rac4k | Protocol::Health => 0,
            Protocol::Http | Protocol::Http4k => 1,
        }
    }

    /// Payload bytes of a call.
    fn payload(self) -> usize {
        match self {
            Protocol::Rac | Protocol::Http => PAYLOAD,
            Protocol::Rac4k | Protocol::Http4k => 4096,
            Protocol::Health => 0,
        }
    }

    /// Body bytes of an answer.
    fn answer_len(self) -> usize {
        match self {
            Protocol::Health => br#"{"status":"ok"}"#.len(),
            _ => self.payload(),
        }
    }
}

/// One connection that sends calls one at a time, allocating nothing per call.
struct Client {
    protocol: Protocol,
    stream: TcpStream,
    request: Vec<u8>,
    response: Vec<u8>,
}

impl Client {
    fn connect(protocol: Protocol, running: &netaccel_node::Running) -> Client {
        let addr = if protocol.rac() {
            running.rac_addr
        } else {
            running.http_addr
        };
        let payload = protocol.payload();
        let stream = TcpStream::connect(addr).expect("connecting to the node");
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let request = match protocol {
            Protocol::Rac | Protocol::Rac4k => {
                let mut r = Vec::with_capacity(64 + payload);
                r.extend_from_slice(b"RAC1");
                r.extend_from_slice(&[0x01, 0]);
                r.extend_from_slice(&1u16.to_le_bytes()); // echo
                r.extend_from_slice(&(payload as u32).to_le_bytes());
                r.extend_from_slice(&[0; 8]); // request id (set per call), no deadline
                r.resize(64, 0);
                r.resize(64 + payload, b'x');
                r
            }
            Protocol::Http | Protocol::Http4k => {
                let mut r = format!(
                    "POST /v1/fn/echo HTTP/1.1\r\nHost: node\r\nContent-Length: {payload}\r\n\r\n"
                )
                .into_bytes();
                r.resize(r.len() + payload, b'x');
                r
            }
            Protocol::Health => b"GET /health HTTP/1.1\r\nHost: node\r\n\r\n".to_vec(),
        };
        Client {
            protocol,
            stream,
            request,
            response: vec![0; 64 * 1024],
        }
    }

    /// One call and its whole answer, checked.
    fn call(&mut self, id: u32) {
        if self.protocol.rac() {
            self.request[12..16].copy_from_slice(&id.to_le_bytes());
        }
        self.stream
            .write_all(&self.request)
            .expect("sending a call");
        if self.protocol.rac() {
            self.read_result();
        } else {
            self.read_response();
        }
    }

    /// A RAC result: its header, then its payload.
    fn read_result(&mut self) {
        self.stream.read_exact(&mut self.response[..64]).unwrap();
        assert_eq!(&self.response[..4], b"RAC1");
        assert_eq!(self.response[4], 0x02, "a result");
        let status = u16::from_le_bytes([self.response[6], self.response[7]]);
        let len = u32::from_le_bytes(self.response[8..12].try_into().unwrap()) as usize;
        assert_eq!(
            (status, len),
            (0, self.protocol.payload()),
            "an OK result of the payload's size"
        );
        self.stream
            .read_exact(&mut self.response[64..64 + len])
            .unwrap();
    }

    /// An HTTP response: its head, then the body its size says.
    fn read_response(&mut self) {
        let len = self.protocol.answer_len();
        let mut have = 0;
        loop {
            let n = self.stream.read(&mut self.response[have..]).unwrap();
            assert!(n > 0, "the node closed the connection");
            have += n;
            let got = &self.response[..have];
            if let Some(head) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
                if have >= head + 4 + len {
                    assert_eq!(have, head + 4 + len, "one answer, whole");
                    return;
                }
            }
        }
    }
}

/// What the probe measured in one phase.
struct Phase {
    allocations: u64,
    timers: u64,
}

/// Runs in the child that `strace` follows (see the module docs): a node in this
/// process, then each protocol's calls between markers, then the counts in the file
/// named by `NETACCEL_BUDGET_OUT`.
#[test]
#[ignore = "the probe of small_calls_stay_within_the_budget, which runs it under strace"]
fn budget_probe() {
    let out = std::env::var(OUT_ENV).expect("run by small_calls_stay_within_the_budget");
    let mut report = String::new();
    for network in NETWORKS {
        probe_node(network, &mut report);
    }
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) };
    writeln!(report, "client {me}").unwrap();
    std::fs::write(out, report).unwrap();
}

/// One node on `network`: each protocol's calls between markers; the counts and the
/// node's threads into `report`.
fn probe_node(network: Network, report: &mut String) {
    let config = netaccel_node::Config {
        http: "127.0.0.1:0".parse().unwrap(),
        rac: "127.0.0.1:0".parse().unwrap(),
        grpc: None,
        io_threads: 1,
        network,
        log_level: "warn".to_string(),
        ..netaccel_node::Config::default()
    };
    let running = netaccel_node::start(config).expect("starting the node");
    for protocol in Protocol::ALL {
        let mut client = Client::connect(protocol, &running);
        for id in 0..WARM_UP as u32 {
            client.call(id);
        }
        let (allocations, timers) = (node_allocations(), netaccel_node::net::timers_armed());
        marker();
        for id in 0..CALLS as u32 {
            client.call(WARM_UP as u32 + id);
        }
        marker();
        let phase = Phase {
            allocations: node_allocations() - allocations,
            timers: netaccel_node::net::timers_armed() - timers,
        };
        writeln!(
            report,
            "phase {} {} {}",
            protocol.name(),
            phase.allocations,
            phase.timers
        )
        .unwrap();
    }
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap();
        let tid = task.file_name().unwrap().to_string_lossy().into_owned();
        writeln!(report, "thread {tid} {}", name.trim()).unwrap();
    }
    running.shutdown();
}

/// The system calls of one phase, by thread and by name.
type Calls = HashMap<u32, HashMap<String, u64>>;

/// Splits `strace -f` output at the probe's markers: the calls made between each pair
/// of markers, each counted at its start (`<... resumed>` lines are not new calls).
fn phases(trace: &str) -> Vec<Calls> {
    let mut phases = Vec::new();
    let mut current: Option<Calls> = None;
    for line in trace.lines() {
        let Some((tid, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(tid) = tid.parse::<u32>() else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(name) = rest.split_once('(').map(|(name, _)| name) else {
            continue;
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            continue; // "<... read resumed>", "+++ exited", "--- SIGCHLD"
        }
        if name == "getppid" {
            match current.take() {
                Some(calls) => phases.push(calls),
                None => current = Some(Calls::new()),
            }
            continue;
        }
        if let Some(calls) = current.as_mut() {
            *calls
                .entry(tid)
                .or_default()
                .entry(name.to_string())
                .or_default() += 1;
        }
    }
    phases
}

/// The kinds of system call the budget counts on the network thread.
fn kind(name: &str) -> &'static str {
    match name {
        "read" | "readv" | "recvfrom" | "recvmsg" | "recvmmsg" => "read",
        "write" | "writev" | "sendto" | "sendmsg" | "sendmmsg" => "write",
        "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => "wait",
        "io_uring_enter" => "ring",
        _ => "other",
    }
}

/// Checks one protocol's phase against the budget; the failures, in words.
fn check(
    network: Network,
    protocol: Protocol,
    calls: &Calls,
    phase: &Phase,
    threads: &HashMap<u32, String>,
    client: u32,
) -> Vec<String> {
    let name = format!("{} on {}", protocol.name(), network_name(network));
    let mut failures = Vec::new();
    let net = network_thread(calls, threads);
    let empty = HashMap::new();
    let on_net = calls.get(&net).unwrap_or(&empty);
    let mut by_kind: HashMap<&str, u64> = HashMap::new();
    for (call, n) in on_net {
        *by_kind.entry(kind(call)).or_default() += n;
    }
    for (kind, per_call) in system_calls_per_call(network) {
        let n = by_kind.get(kind).copied().unwrap_or(0);
        if n > per_call * CALLS + SLACK {
            failures.push(format!(
                "{name}: the network thread made {n} {kind} system calls over {CALLS} calls \
                 (budget: {per_call} per call); its calls: {on_net:?}"
            ));
        }
    }
    for (tid, made) in calls {
        let thread = threads.get(tid).map_or("?", String::as_str);
        // The watchdog looks at the slots on its own clock, not per call.
        if *tid == net || *tid == client || thread == "slot-watchdog" {
            continue;
        }
        let n: u64 = made.values().sum();
        if n > SLACK {
            failures.push(format!(
                "{name}: thread {thread} ({tid}) made {n} system calls over {CALLS} calls, \
                 woken by the inline path (budget: none): {made:?}"
            ));
        }
    }
    let allowed = protocol.allocations_per_call() * CALLS + SLACK;
    if phase.allocations > allowed {
        failures.push(format!(
            "{name}: the node made {} heap allocations over {CALLS} calls (budget: {} per call)",
            phase.allocations,
            protocol.allocations_per_call()
        ));
    }
    if phase.timers > 0 {
        failures.push(format!(
            "{name}: the network paths armed {} timers over {CALLS} calls (budget: none)",
            phase.timers
        ));
    }
    failures
}

/// The phase's network thread: of the node's network threads (one per node), the one
/// that made the most system calls in it.
fn network_thread(calls: &Calls, threads: &HashMap<u32, String>) -> u32 {
    let busiest = threads
        .iter()
        .filter(|(_, name)| name.starts_with("net-"))
        .map(|(&tid, _)| (calls.get(&tid).map_or(0, |c| c.values().sum::<u64>()), tid))
        .max();
    busiest.expect("the node has a network thread").1
}

/// Whether `strace` can follow a child here; missing or refused, the test is skipped
/// locally and fails under CI.
fn strace_works() -> bool {
    let works = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "strace is missing or cannot trace (Debian package strace; ptrace allowed): CI needs it"
        );
        eprintln!("SKIP: strace is missing or cannot trace (Debian package strace)");
    }
    works
}

#[test]
fn small_calls_stay_within_the_budget() {
    if !strace_works() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("netaccel-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (trace, out) = (dir.join("trace"), dir.join("counts"));
    let exe = std::env::current_exe().unwrap();
    let status = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&trace)
        .arg(&exe)
        .args(["budget_probe", "--exact", "--ignored", "--nocapture"])
        .env(OUT_ENV, &out)
        .status()
        .expect("running strace");
    assert!(status.success(), "the probe failed under strace: {status}");
    let failures = judge(&trace, &out);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "over the per-call budget:\n{}",
        failures.join("\n")
    );
}

/// Reads the probe's counts and trace and checks every phase.
fn judge(trace: &Path, out: &Path) -> Vec<String> {
    let report = std::fs::read_to_string(out).unwrap();
    let mut threads = HashMap::new();
    let mut client = 0;
    let mut measured = Vec::new();
    for line in report.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["phase", .., allocations, timers] => measured.push(Phase {
                allocations: allocations.parse().unwrap(),
                timers: timers.parse().unwrap(),
            }),
            ["client", tid] => client = tid.parse().unwrap(),
            ["thread", tid, ref name @ ..] => {
                threads.insert(tid.parse::<u32>().unwrap(), name.join(" "));
            }
            _ => panic!("unexpected probe line {line:?}"),
        }
    }
    let calls = phases(&std::fs::read_to_string(trace).unwrap());
    let runs: Vec<(Network, Protocol)> = NETWORKS
        .into_iter()
        .flat_map(|n| Protocol::ALL.map(|p| (n, p)))
        .collect();
    assert_eq!(
        calls.len(),
        runs.len(),
        "one traced phase per network and protocol"
    );
    assert_eq!(measured.len(), runs.len());
    let mut failures = Vec::new();
    for (i, (network, protocol)) in runs.into_iter().enumerate() {
        if network == Network::IoUring && !on_the_ring(&calls[i], &threads) {
            continue;
        }
        eprintln!(
            "{} on {}: {} calls: {} allocations, {} timers armed; system calls by thread: {:?}",
            protocol.name(),
            network_name(network),
            CALLS,
            measured[i].allocations,
            measured[i].timers,
            calls[i]
                .iter()
                .map(|(tid, c)| (threads.get(tid).cloned().unwrap_or_default(), c))
                .collect::<Vec<_>>()
        );
        failures.extend(check(
            network,
            protocol,
            &calls[i],
            &measured[i],
            &threads,
            client,
        ));
    }
    failures
}

/// Whether an io_uring phase ran on the ring: a kernel that refuses io_uring makes the
/// node serve on epoll (and say so in its log); that skips the phase locally and fails
/// under CI, as `tests/uring.rs` does.
fn on_the_ring(calls: &Calls, threads: &HashMap<u32, String>) -> bool {
    let net = network_thread(calls, threads);
    let ring = calls
        .get(&net)
        .is_some_and(|c| c.contains_key("io_uring_enter"));
    if !ring {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the kernel refuses io_uring; CI needs it"
        );
        eprintln!("SKIP (io_uring half): the kernel refuses io_uring here");
    }
    ring
}

#[test]
fn the_trace_is_split_at_the_markers_and_resumed_calls_count_once() {
    let trace = "\
10 epoll_wait(3, [], 1024, 5) = 0
11 getppid() = 1
10 recvfrom(5, \"x\", 4096, 0, NULL, NULL) = 1
10 epoll_wait(3,  <unfinished ...>
12 futex(0x1, FUTEX_WAKE_PRIVATE, 1) = 0
10 <... epoll_wait resumed>[], 1024, 5) = 1
11 getppid() = 1
10 sendto(5, \"x\", 1, 0, NULL, 0) = 1
11 getppid() = 1
10 +++ exited with 0 +++
11 getppid() = 1
";
    let phases = phases(trace);
    assert_eq!(phases.len(), 2);
    assert_eq!(phases[0][&10]["recvfrom"], 1);
    assert_eq!(phases[0][&10]["epoll_wait"], 1);
    assert_eq!(phases[0][&12]["futex"], 1);
    assert!(phases[1].is_empty());
    let threads = HashMap::from([(10, "net-0".to_string()), (12, "slot-0".to_string())]);
    let phase = Phase {
        allocations: 0,
        timers: 0,
    };
    // A slot woken once per call is over the budget, and named.
    let mut woken = phases[0].clone();
    woken.get_mut(&12).unwrap().insert("futex".into(), CALLS);
    let failures = check(Network::Epoll, Protocol::Rac, &woken, &phase, &threads, 11);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("slot-0"), "{failures:?}");
    assert!(check(
        Network::Epoll,
        Protocol::Rac,
        &phases[0],
        &phase,
        &threads,
        11
    )
    .is_empty());
    // A read, a write and an `epoll_wait` per call are epoll's budget; the read and
    // the wait are over io_uring's: it receives through the ring, and sleeps in it.
    let per_call = Calls::from([(
        10,
        HashMap::from([
            ("epoll_wait".to_string(), CALLS),
            ("recvfrom".to_string(), CALLS),
            ("sendto".to_string(), CALLS),
        ]),
    )]);
    let epoll = check(
        Network::Epoll,
        Protocol::Rac,
        &per_call,
        &phase,
        &threads,
        11,
    );
    assert!(epoll.is_empty(), "{epoll:?}");
    let uring = check(
        Network::IoUring,
        Protocol::Rac,
        &per_call,
        &phase,
        &threads,
        11,
    );
    assert_eq!(uring.len(), 2, "{uring:?}");
    assert!(uring[0].contains("on io_uring"), "{uring:?}");
}
