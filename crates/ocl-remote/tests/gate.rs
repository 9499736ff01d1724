//! A service with a gate (`ServiceConfig::gate`, what the node gives it: see
//! `ocl_remote::service::gate`), in the service's own process and with runtime
//! processes, over TCP, over the local Unix socket and for a connection handed in
//! (`ServiceHandle::serve_connection`): a refused `Hello` gets the gate's sentence and
//! nothing else, an admitted one a session bounded by its admission's memory, and the
//! gate sees each connection's caller; a runtime process that dies (one session's, or
//! a shared one) gives its tenant's memory back. Needs an OpenCL runtime with a
//! device (PoCL).

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use common::{service, Client};
use ocl_remote::cl;
use ocl_remote::proto::{self, Decoded, HelloInfo, Request, Response};
use ocl_remote::service::account::TenantMemory;
use ocl_remote::service::gate::{Admission, Caller, DeviceMask, Gate, REFUSED};
use ocl_remote::service::{Isolation, ServiceConfig};
use ocl_remote::stream::Stream;

/// Admits `team-a` with token `right`, its sessions bounded to 1 KiB together;
/// remembers every caller.
#[derive(Debug)]
struct TeamA {
    callers: Mutex<Vec<Caller>>,
    memory: Arc<TenantMemory>,
}

impl Default for TeamA {
    fn default() -> TeamA {
        TeamA {
            callers: Mutex::default(),
            memory: TenantMemory::create(1024).unwrap(),
        }
    }
}

impl Gate for TeamA {
    fn admit(
        &self,
        caller: &Caller,
        tenant: &str,
        token: &str,
        _devices: &[String],
    ) -> Result<Admission, String> {
        self.callers.lock().unwrap().push(caller.clone());
        if tenant == "team-a" && token == "right" {
            Ok(Admission {
                tenant: tenant.to_string(),
                devices: DeviceMask::ALL,
                memory: Some(Arc::clone(&self.memory)),
            })
        } else {
            Err(format!("no session for `{tenant}`"))
        }
    }
}

fn config(isolation: Isolation, gate: &Arc<TeamA>) -> ServiceConfig {
    ServiceConfig {
        isolation,
        runtime_program: Some(PathBuf::from(env!("CARGO_BIN_EXE_netaccel-ocl-service"))),
        runtime_spares: 1,
        gate: Some(Arc::clone(gate) as Arc<dyn Gate>),
        ..ServiceConfig::default()
    }
}

/// Says `Hello` on `stream` and returns the reply's status and payload.
fn hello(mut stream: Stream, tenant: &str, token: &str) -> (i32, Vec<u8>) {
    let mut out = Vec::new();
    Request::Hello {
        version: proto::PROTOCOL_VERSION,
        host_id: b"",
        tenant: tenant.as_bytes(),
        token: token.as_bytes(),
    }
    .encode(3, &mut out);
    stream.write_all(&out).unwrap();
    let mut head = [0u8; proto::HEADER_LEN];
    stream.read_exact(&mut head).unwrap();
    let Ok(Decoded::Complete(h, _)) = proto::decode_header(&head, u32::MAX) else {
        panic!("a header")
    };
    let mut body = vec![0; h.body_len as usize];
    stream.read_exact(&mut body).unwrap();
    let Ok(Response::Reply { status, payload }) = Response::decode(h.kind, &body) else {
        panic!("a reply")
    };
    (status, payload.to_vec())
}

fn sessions_are_gated(isolation: Isolation) {
    let gate = Arc::new(TeamA::default());
    let Some((svc, _registry)) = service(config(isolation, &gate)) else {
        return;
    };
    let addr: SocketAddr = svc.local_addr();
    // Over TCP.
    let refused = Client::connect_as(addr, b"", "team-b", "right").err();
    assert_eq!(
        refused,
        Some((REFUSED, "no session for `team-b`".to_string()))
    );
    let mut a = Client::connect_as(addr, b"", "team-a", "right").expect("admitted");
    a.setup_context();
    assert_eq!(a.create_buffer(2, 1000), cl::CL_SUCCESS);
    assert_eq!(a.create_buffer(3, 25), cl::CL_OUT_OF_RESOURCES);
    // A second session of the tenant shares the bound, and sees what the first gives
    // back.
    let mut again = Client::connect_as(addr, b"", "team-a", "right").expect("admitted");
    again.setup_context();
    assert_eq!(again.create_buffer(2, 25), cl::CL_OUT_OF_RESOURCES);
    assert_eq!(again.create_buffer(2, 24), cl::CL_SUCCESS);
    assert_eq!(gate.memory.used(), 1024);
    a.send(&Request::Release { id: 2 });
    drop(a);
    let given_back = std::time::Instant::now();
    while gate.memory.used() != 24 {
        assert!(given_back.elapsed().as_secs() < 20, "{:?}", gate.memory);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(again.create_buffer(3, 1000), cl::CL_SUCCESS);
    drop(again);
    // Over the local Unix socket.
    let local = format!("netaccel-ocl-{}-{}", std::process::id(), addr.port());
    let unix = || Stream::connect_local(local.as_bytes()).unwrap();
    assert_eq!(hello(unix(), "", "").0, REFUSED);
    let (status, payload) = hello(unix(), "team-a", "right");
    assert_eq!(status, cl::CL_SUCCESS);
    assert!(HelloInfo::decode(&payload).is_ok());
    // Handed in, with the caller the program that accepted it names.
    let handed = Caller {
        peer: Some("192.0.2.7:4000".parse().unwrap()),
        certificate: Some("team-a".to_string()),
    };
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    svc.serve_connection(Stream::Unix(theirs), handed.clone());
    assert_eq!(hello(Stream::Unix(ours), "team-a", "wrong").0, REFUSED);
    let callers = gate.callers.lock().unwrap().clone();
    assert!(
        callers[0].peer.is_some_and(|p| p.ip().is_loopback()),
        "{callers:?}"
    );
    assert!(
        callers.contains(&Caller::default()),
        "the Unix socket's caller: {callers:?}"
    );
    assert_eq!(callers.last(), Some(&handed));
}

#[test]
fn in_process_sessions_are_gated() {
    sessions_are_gated(Isolation::InProcess);
}

#[test]
fn isolated_sessions_are_gated_before_the_hand_over() {
    sessions_are_gated(Isolation::PerSession);
}

/// A session holding most of its tenant's bound dies with its runtime process (its
/// kernel stores through a null pointer): the node gives the tenant's memory back, so
/// the tenant's next session may hold the whole bound.
fn memory_is_given_back_when_a_runtime_process_dies(isolation: Isolation) {
    let gate = Arc::new(TeamA::default());
    let Some((svc, _registry)) = service(config(isolation, &gate)) else {
        return;
    };
    let addr = svc.local_addr();
    let mut doomed = Client::connect_as(addr, b"", "team-a", "right").expect("admitted");
    doomed.setup(0); // buffer 3: 64 zero bytes, the kernel's null pointer
    assert_eq!(doomed.create_buffer(10, 900), cl::CL_SUCCESS);
    assert_eq!(gate.memory.used(), 964);
    let source = b"__kernel void k(__global int *v) { *(__global int *)(size_t)v[0] = 42; }";
    let calls = [
        Request::CreateProgramWithSource {
            id: 20,
            context: 1,
            source,
        },
        Request::BuildProgram {
            program: 20,
            devices: vec![],
            options: b"",
        },
        Request::CreateKernel {
            id: 21,
            program: 20,
            name: b"k",
        },
    ];
    for call in &calls {
        assert_eq!(doomed.call(call).0, cl::CL_SUCCESS, "{call:?}");
    }
    doomed.send(&Request::Enqueue {
        commands: vec![common::inc(2, 21, 3, 0).into()],
    });
    doomed.send(&Request::Flush);
    let mut rest = Vec::new();
    let _ = doomed.stream.read_to_end(&mut rest); // the process died
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while gate.memory.used() != 0 {
        assert!(std::time::Instant::now() < deadline, "{:?}", gate.memory);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut next = Client::connect_as(addr, b"", "team-a", "right").expect("admitted");
    next.setup_context();
    assert_eq!(next.create_buffer(2, 1024), cl::CL_SUCCESS);
}

#[test]
fn a_dead_session_process_gives_its_tenant_memory_back() {
    memory_is_given_back_when_a_runtime_process_dies(Isolation::PerSession);
}

#[test]
fn a_dead_shared_process_gives_its_tenants_memory_back() {
    memory_is_given_back_when_a_runtime_process_dies(Isolation::Shared);
}
