//! Hostile kernels run in isolated runtime processes: each ends its own session only.
//! The kernel out-of-bounds store, null store, unbounded recursion, trap and endless
//! loop below would end the test process with the runtime in-process (try
//! `isolation: Isolation::InProcess`: the test binary dies of the signal); isolated, the
//! hostile client's connection ends, a bystander client of the same device keeps its
//! results, the service lives on, counts the crash and removes the dead process's
//! shared memory. Needs an OpenCL runtime with a device (PoCL).

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{inc, read_cmd, service, Client};
use ocl_remote::cl;
use ocl_remote::proto::{Command, KernelArg, NdRange, Request};
use ocl_remote::service::{Isolation, ServiceConfig};
use prometheus_client::registry::Registry;

fn isolated(kernel_time_max: Duration) -> ServiceConfig {
    ServiceConfig {
        isolation: Isolation::PerSession,
        runtime_program: Some(PathBuf::from(env!("CARGO_BIN_EXE_netaccel-ocl-service"))),
        runtime_spares: 1,
        kernel_time_max,
        ..ServiceConfig::default()
    }
}

/// A bystander: its own context, buffer and kernel; each round adds 1 to its 16 ints.
struct Bystander {
    client: Client,
    rounds: u8,
}

impl Bystander {
    fn new(addr: SocketAddr) -> Bystander {
        let mut client = Client::connect(addr).expect("bystander connects");
        client.setup(0);
        Bystander { client, rounds: 0 }
    }

    /// One round: the kernel runs and the read shows every round so far.
    fn round(&mut self) {
        let (status, _, reads) = self.client.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
        assert_eq!(status, cl::CL_SUCCESS);
        self.rounds += 1;
        let data = &reads[0].1;
        for i in 0..16 {
            let v = i32::from_le_bytes(data[i * 4..i * 4 + 4].try_into().unwrap());
            assert_eq!(
                v,
                i32::from(self.rounds),
                "int {i} after {} rounds",
                self.rounds
            );
        }
    }
}

/// Builds `source`'s kernel `k` with a 64-byte buffer argument (ints 0, 1, 0, ...) and
/// runs it; returns the shared-memory region the buffer lives in (empty if none) and
/// whether the connection ended instead of answering.
fn run_hostile(addr: SocketAddr, host_id: &[u8], source: &[u8]) -> (String, bool) {
    let mut c = Client::connect_with(addr, host_id).expect("hostile client connects");
    let device = c.info.1[0][0];
    c.setup_context();
    let mut data = [0u8; 64];
    data[4] = 1;
    assert_eq!(
        c.call(&Request::CreateQueue {
            id: 2,
            context: 1,
            device,
            properties: 0
        })
        .0,
        cl::CL_SUCCESS
    );
    let (status, region) = c.call(&Request::CreateBuffer {
        id: 3,
        context: 1,
        flags: cl::CL_MEM_READ_WRITE | cl::CL_MEM_COPY_HOST_PTR,
        size: 64,
        data: &data,
    });
    assert_eq!(status, cl::CL_SUCCESS);
    let region = String::from_utf8_lossy(&region)
        .trim_start_matches('/')
        .to_string();
    for request in [
        Request::CreateProgramWithSource {
            id: 4,
            context: 1,
            source,
        },
        Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b"",
        },
        Request::CreateKernel {
            id: 5,
            program: 4,
            name: b"k",
        },
    ] {
        // A runtime may already die building the program (PoCL aborts generating code
        // for unbounded recursion): then the connection ends here.
        match call_or_end(&mut c, &request) {
            Some(status) => assert_eq!(status, cl::CL_SUCCESS, "{request:?}"),
            None => return (region, true),
        }
    }
    c.send(&Request::enqueue(vec![Command::NdRange(NdRange {
        queue: 2,
        event: 0,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [1, 0, 0],
        local: None,
        args: vec![KernelArg::Mem(3)],
    })]));
    c.send(&Request::Flush);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = Vec::new();
    let ended = match c.stream.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    (region, ended)
}

/// `request`'s status, or `None` when the connection ended instead.
fn call_or_end(c: &mut Client, request: &Request<'_>) -> Option<i32> {
    use ocl_remote::proto::{self, Decoded, Response};
    let id = c.send(request);
    let mut head = [0u8; proto::HEADER_LEN];
    c.stream.read_exact(&mut head).ok()?;
    let Ok(Decoded::Complete(h, _)) = proto::decode_header(&head, u32::MAX) else {
        panic!("bad frame header")
    };
    let mut body = vec![0u8; h.body_len as usize];
    c.stream.read_exact(&mut body).ok()?;
    assert_eq!(h.id, id);
    match Response::decode(h.kind, &body).unwrap() {
        Response::Reply { status, .. } => Some(status),
        _ => panic!("expected a reply to {id}"),
    }
}

fn metric(registry: &Registry, line_start: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text.lines()
        .filter(|l| l.starts_with(line_start))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Polls `f` until it holds or `within` has passed.
fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Kernels that end the process running them, and the signal. (An integer division by
/// zero does not: PoCL 5's code for it does not trap on x86-64, the kernel just runs.)
const CRASHERS: &[(&str, &[u8], &[&str])] = &[
    (
        "out-of-bounds stores over 1 TiB",
        b"__kernel void k(__global int *v) {
            for (long i = 0; i < (1L << 38); i += 1024) v[i * (1 + v[0])] = (int)i;
        }",
        &["SIGSEGV"],
    ),
    (
        "a store through a null pointer",
        b"__kernel void k(__global int *v) {
            __global int *p = (__global int *)(size_t)v[0];
            *p = 42;
        }",
        &["SIGSEGV"],
    ),
    (
        "unbounded recursion",
        b"int f(__global int *v, int n) {
            if (n <= 0) return v[0];
            int r = f(v, n - 1);
            v[0] += r;
            return r * 3 + v[n & 1];
        }
        __kernel void k(__global int *v) { v[0] = f(v, v[1] << 26); }",
        // PoCL aborts generating code for it (a stack overflow if it did not).
        &["SIGABRT", "SIGSEGV"],
    ),
    (
        "a trap",
        b"__kernel void k(__global int *v) { if (v[1] == 1) __builtin_trap(); v[0] = 1; }",
        &["SIGILL"],
    ),
];

#[test]
fn crashing_kernels_end_only_their_own_session() {
    let Some((svc, registry)) = service(isolated(Duration::from_secs(60))) else {
        return;
    };
    let addr = svc.local_addr();
    let mut bystander = Bystander::new(addr);
    bystander.round();
    let host_id = ocl_remote::shm::host_id();
    for (what, source, signals) in CRASHERS {
        let crashes = metric(&registry, "ocl_runtime_crashes_total");
        // On the node's host, so that its buffer lives in shared memory.
        let (region, ended) = run_hostile(addr, &host_id, source);
        assert!(ended, "{what}: the hostile client's connection should end");
        assert!(
            eventually(Duration::from_secs(10), || metric(
                &registry,
                "ocl_runtime_crashes_total"
            ) > crashes),
            "{what}: the crash was not counted"
        );
        assert!(
            signals.iter().any(|signal| metric(
                &registry,
                &format!("ocl_runtime_crashes_total{{signal=\"{signal}\"}}")
            ) >= 1.0),
            "{what}: expected a death by {signals:?}"
        );
        if !region.is_empty() {
            let path = PathBuf::from("/dev/shm").join(&region);
            assert!(
                eventually(Duration::from_secs(10), || !path.exists()),
                "{what}: the dead process's region {region} was left behind"
            );
        }
        // The device's other client carries on with correct results.
        bystander.round();
        // And a new client is served.
        let mut newcomer = Client::connect(addr).expect("a new client is served");
        newcomer.setup(0);
    }
    assert!(svc.shutdown(Instant::now() + Duration::from_secs(30)));
}

#[test]
fn an_endless_kernel_is_killed_at_the_time_bound() {
    let bound = Duration::from_secs(1);
    let Some((svc, registry)) = service(isolated(bound)) else {
        return;
    };
    let addr = svc.local_addr();
    let mut bystander = Bystander::new(addr);
    let started = Instant::now();
    let (_, ended) = run_hostile(
        addr,
        b"",
        b"__kernel void k(__global int *v) { while (v[1] == 1) v[0]++; }",
    );
    let took = started.elapsed();
    assert!(ended, "the endless kernel's connection should end");
    assert!(
        took >= bound && took < Duration::from_secs(30),
        "ended after {took:?}"
    );
    assert_eq!(metric(&registry, "ocl_runtime_kernel_timeouts_total"), 1.0);
    assert_eq!(metric(&registry, "ocl_runtime_crashes_total"), 0.0);
    bystander.round();
    bystander.round();
    assert!(svc.shutdown(Instant::now() + Duration::from_secs(30)));
}

#[test]
fn a_drain_lets_isolated_sessions_finish_and_ends_their_processes() {
    let Some((svc, registry)) = service(isolated(Duration::from_secs(60))) else {
        return;
    };
    let mut bystander = Bystander::new(svc.local_addr());
    bystander.round();
    assert_eq!(svc.clients_connected(), 1);
    assert!(svc.shutdown(Instant::now() + Duration::from_secs(30)));
    assert_eq!(metric(&registry, "ocl_runtime_processes"), 0.0);
    // The session was ended: the connection closes.
    let mut rest = Vec::new();
    let read = bystander.client.stream.read_to_end(&mut rest);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "still open: {read:?}"
    );
}

#[test]
fn a_same_host_client_moving_to_the_unix_socket_takes_one_runtime_process() {
    use ocl_remote::proto::{self, Decoded, HelloInfo, Response};
    use std::io::Write;
    let Some((svc, _registry)) = service(isolated(Duration::from_secs(60))) else {
        return;
    };
    // As the ICD does: Hello over TCP; the node answers it and names its Unix socket.
    let host_id = ocl_remote::shm::host_id();
    let tcp = Client::connect_with(svc.local_addr(), &host_id).expect("greeted over TCP");
    // Then Hello over the Unix socket, which a runtime process serves.
    let name = format!(
        "netaccel-ocl-{}-{}",
        std::process::id(),
        svc.local_addr().port()
    );
    let mut local = ocl_remote::stream::Stream::connect_local(name.as_bytes()).unwrap();
    let mut hello = Vec::new();
    Request::Hello {
        version: proto::PROTOCOL_VERSION,
        host_id: &host_id,
        tenant: b"",
        token: b"",
    }
    .encode(1, &mut hello);
    local.write_all(&hello).unwrap();
    let mut head = [0u8; proto::HEADER_LEN];
    local.read_exact(&mut head).unwrap();
    let Ok(Decoded::Complete(h, _)) = proto::decode_header(&head, u32::MAX) else {
        panic!("bad header")
    };
    let mut body = vec![0; h.body_len as usize];
    local.read_exact(&mut body).unwrap();
    let Ok(Response::Reply { status, payload }) = Response::decode(h.kind, &body) else {
        panic!("expected a reply")
    };
    assert_eq!(status, cl::CL_SUCCESS);
    assert_eq!(HelloInfo::decode(payload).unwrap().platforms, tcp.info.1);
    // Only the Unix connection took a runtime process: the TCP one, still open, was
    // greeted by the node itself (a runtime process started only to answer it would
    // count as a second client until the client left it).
    assert_eq!(svc.clients_connected(), 1);
    drop(tcp);
    assert!(svc.shutdown(Instant::now() + Duration::from_secs(30)));
}

#[test]
fn a_runtime_process_that_cannot_start_fails_the_service_start_as_a_missing_runtime() {
    // Needs no OpenCL: the program exits at once instead of saying ready.
    let config = ServiceConfig {
        runtime_program: Some(PathBuf::from("/bin/false")),
        ..isolated(Duration::ZERO)
    };
    let started = Instant::now();
    let result = ocl_remote::service::spawn(
        "127.0.0.1:0".parse().unwrap(),
        config,
        &mut Registry::default(),
    );
    match result {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}"),
        Ok(_) => panic!("a service without a runtime process started"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
