//! Remote OpenCL with identities (issue 31): the real node binary under the production
//! profile (`anonymous = "refuse"`), its OpenCL port on PoCL with the default runtime
//! processes. Protocol clients (`ocl-remote`'s test client) and a real OpenCL program
//! through the ICD (`tests/c/hostile.c`, its well-behaved mode) try it:
//!
//! - a tenant with `opencl = true` and its token works, by protocol and through the
//!   ICD (the token hashed, as in production);
//! - no credential, a wrong token, a tenant without its token, and a tenant whose
//!   policy has no `opencl` are refused at `Hello` with the node's sentence, the ICD
//!   logs that sentence once and `clGetPlatformIDs` fails; each refusal is an audit
//!   line (protocol `opencl`), and no token is logged;
//! - a tenant over its `opencl_bytes_max` (over all its sessions together) gets
//!   `CL_OUT_OF_RESOURCES` (and the node logs why) while another tenant allocates far
//!   more at the same time;
//! - a session guessing ids reaches none of another tenant's objects;
//! - SIGHUP: a token removed from the file is refused at its next session, while the
//!   session it opened before runs on.

mod common;
#[path = "../../ocl-remote/tests/common/mod.rs"]
mod ocl;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_addr, TestNode};
use ocl::{inc, read_cmd, Client};
use ocl_remote::cl;
use ocl_remote::proto::Request;
use ocl_remote::service::gate::REFUSED;

const A_TOKEN: &str = "ocl-a-Secret-2b81";
const B_TOKEN: &str = "ocl-b-Secret-93fe";
const B_ROTATED: &str = "ocl-b-Rotated-77c0";
const C_TOKEN: &str = "ocl-c-Secret-0d5a";
/// Team A's sessions may hold this many bytes of buffers.
const A_BYTES_MAX: u64 = 2048;

/// `netaccel-node hash-token`, as a user runs it.
fn hash_token(token: &str) -> String {
    testkit::hash_token(env!("CARGO_BIN_EXE_netaccel-node").as_ref(), token)
}

/// A: OpenCL with a small memory quota; B: OpenCL and the metrics (its token hashed);
/// C: calls only.
fn tenants(b_hash: &str) -> String {
    format!(
        "anonymous = \"refuse\"\n\
         [[tenants]]\nname = \"team-a\"\ntoken = \"{A_TOKEN}\"\nopencl = true\n\
         [tenants.quota]\nopencl_bytes_max = {A_BYTES_MAX}\n\
         [[tenants]]\nname = \"team-b\"\ntoken_hash = \"{b_hash}\"\nopencl = true\nmetrics = true\n\
         [[tenants]]\nname = \"team-c\"\ntoken = \"{C_TOKEN}\"\ncall = [\"to_uppercase\"]\n"
    )
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn opencl_sessions_belong_to_tenants() {
    if !common::opencl_runtime_present() {
        return;
    }
    let b_hash = hash_token(B_TOKEN);
    let (mut node, ocl_addr) = TestNode::start_logging_with(
        || {
            let ocl_addr = free_addr();
            // Every refusal's audit line, not the default's few a second; every
            // made-up token checked (the check budget is hostile_tenants.rs' test).
            let config = format!(
                "log_refusals_per_second_max = 1000\ntoken_check_ms_per_second_max = 60000\n{}[opencl]\nlisten = \"{ocl_addr}\"\n",
                tenants(&b_hash)
            );
            (config, ocl_addr)
        },
        &["--log-level", "warn,netaccel_node::audit=info"],
    );
    refusals(ocl_addr);
    quotas_and_guessed_handles(ocl_addr);
    through_the_icd(&node, ocl_addr);
    // The refusals of A's quota are counted per tenant, and what A's sessions held is
    // all given back once they have ended.
    let series = |name: &str| format!("netaccel_{name}{{tenant=\"team-a\"}}");
    assert!(b_metric(&node, &series("ocl_tenant_memory_refusals_total")) >= 3.0);
    wait_until("A's sessions hold nothing", || {
        b_metric(&node, &series("ocl_tenant_memory_bytes")) == 0.0
    });
    rotation(&mut node, ocl_addr);
    let log = node.log();
    for token in [A_TOKEN, B_TOKEN, B_ROTATED, C_TOKEN] {
        assert!(!log.contains(token), "a token in the log:\n{log}");
    }
}

/// The value of `series` in `/metrics`, read as team B (which may).
fn b_metric(node: &TestNode, series: &str) -> f64 {
    let text = ureq::get(&node.url("/metrics"))
        .set("Authorization", &format!("Bearer {B_TOKEN}"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{text}"))
}

/// A session of `tenant` with `token` over TCP (no shared memory).
fn session(addr: std::net::SocketAddr, tenant: &str, token: &str) -> Result<Client, (i32, String)> {
    Client::connect_as(addr, b"", tenant, token)
}

fn refused(addr: std::net::SocketAddr, tenant: &str, token: &str) -> String {
    match session(addr, tenant, token) {
        Ok(_) => panic!("{tenant:?} with {token:?} was admitted"),
        Err((status, reason)) => {
            assert_eq!(status, REFUSED, "{reason}");
            reason
        }
    }
}

fn refusals(addr: std::net::SocketAddr) {
    let anonymous = refused(addr, "", "");
    assert!(
        anonymous.starts_with("this node refuses anonymous callers")
            && anonymous.ends_with("(remote OpenCL: NETACCEL_TENANT and NETACCEL_TENANT_TOKEN)"),
        "{anonymous}"
    );
    let unknown = "tenant `team-a` is unknown or its token does not match";
    assert_eq!(refused(addr, "team-a", B_TOKEN), unknown);
    assert_eq!(refused(addr, "team-a", ""), unknown);
    assert_eq!(refused(addr, "team-a", "ocl-a-Secret-2b8"), unknown);
    assert_eq!(
        refused(addr, "", "not-a-token"),
        "the token given is not this node's admin token nor any tenant's token"
    );
    assert_eq!(
        refused(addr, "team-c", C_TOKEN),
        "tenant `team-c` may not use the remote OpenCL devices: its policy does not allow it"
    );
    // A token alone names its tenant, as a bearer token does on HTTP.
    assert!(session(addr, "", A_TOKEN).is_ok());
}

fn quotas_and_guessed_handles(addr: std::net::SocketAddr) {
    let mut a = session(addr, "team-a", A_TOKEN).expect("team-a is admitted");
    let mut b = session(addr, "team-b", B_TOKEN).expect("team-b is admitted");
    a.setup(7); // context 1, queue 2, a 64-byte buffer 3, program 4, kernel 5
    b.setup_context();
    assert_eq!(a.create_buffer(10, A_BYTES_MAX), cl::CL_OUT_OF_RESOURCES);
    assert_eq!(a.create_buffer(10, A_BYTES_MAX - 64), cl::CL_SUCCESS);
    assert_eq!(a.create_buffer(11, 1), cl::CL_OUT_OF_RESOURCES);
    // Meanwhile B, without a quota of its own, holds 64 MiB.
    assert_eq!(b.create_buffer(2, 64 << 20), cl::CL_SUCCESS);
    // The quota is A's, over all its sessions: a second one has nothing left until the
    // first releases a buffer.
    let mut a2 = session(addr, "team-a", A_TOKEN).expect("team-a is admitted");
    a2.setup_context();
    assert_eq!(a2.create_buffer(2, 1), cl::CL_OUT_OF_RESOURCES);
    a.send(&Request::Release { id: 10 });
    wait_until("A's second session may allocate", || {
        a2.create_buffer(2, A_BYTES_MAX - 64) == cl::CL_SUCCESS
    });
    drop(a2);

    // A third session, of B, holding nothing, guesses A's ids (and B's own first
    // session's): none is a buffer, program, context or kernel of its.
    let mut guesser = session(addr, "team-b", B_TOKEN).expect("team-b is admitted");
    for id in 1..=64u64 {
        let sub = guesser.call(&Request::CreateSubBuffer {
            id: 1000 + id,
            parent: id,
            flags: cl::CL_MEM_READ_WRITE,
            offset: 0,
            size: 16,
        });
        assert_eq!(sub.0, cl::CL_INVALID_MEM_OBJECT, "buffer id {id}");
        let kernel = guesser.call(&Request::CreateKernel {
            id: 2000 + id,
            program: id,
            name: b"inc",
        });
        assert_eq!(kernel.0, cl::CL_INVALID_PROGRAM, "program id {id}");
        let buffer = guesser.call(&Request::CreateBuffer {
            id: 3000 + id,
            context: id,
            flags: cl::CL_MEM_READ_WRITE,
            size: 16,
            data: &[],
        });
        assert_eq!(buffer.0, cl::CL_INVALID_CONTEXT, "context id {id}");
    }
    let (status, _, _) = guesser.task(vec![inc(2, 5, 3, 0)]);
    assert_ne!(
        status,
        cl::CL_SUCCESS,
        "a task on A's queue, kernel and buffer"
    );
    // A's buffer is as A left it, and A's kernel runs on it.
    let (status, _, reads) = a.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    let ints: Vec<i32> = reads[0]
        .1
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(ints, vec![i32::from_le_bytes([7; 4]) + 1; 16]);
    crash_gives_back(addr, a);
}

/// A session of A holding A's whole quota dies with its runtime process (its kernel
/// stores through a null pointer): the node gives A's memory back, and A's next
/// session may hold the whole quota. `a` is A's first session, ended here.
fn crash_gives_back(addr: std::net::SocketAddr, a: Client) {
    drop(a);
    let mut doomed = session(addr, "team-a", A_TOKEN).expect("team-a is admitted");
    doomed.setup(0); // buffer 3: 64 zero bytes
    wait_until("A's first session has given its memory back", || {
        doomed.create_buffer(10, A_BYTES_MAX - 64) == cl::CL_SUCCESS
    });
    let null_store = b"__kernel void k(__global int *v) { *(__global int *)(size_t)v[0] = 42; }";
    let calls = [
        Request::CreateProgramWithSource {
            id: 20,
            context: 1,
            source: null_store,
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
        commands: vec![inc(2, 21, 3, 0).into()],
    });
    doomed.send(&Request::Flush);
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut doomed.stream, &mut rest);
    wait_until("the dead session's memory is A's again", || {
        std::thread::sleep(Duration::from_millis(100));
        let mut next = session(addr, "team-a", A_TOKEN).expect("team-a is admitted");
        next.setup_context();
        next.create_buffer(2, A_BYTES_MAX) == cl::CL_SUCCESS
    });
}

/// Runs the well-behaved OpenCL program (`hostile good 2`) as `tenant` with `token`
/// (unset when empty): whether it succeeded, and its output.
fn program(
    node: &TestNode,
    addr: std::net::SocketAddr,
    tenant: &str,
    token: &str,
) -> Option<(bool, String)> {
    let common::IcdProgram { exe, vendors } = match common::icd_program(&node.dir, "hostile") {
        Ok(program) => program,
        Err(why) => {
            ocl::missing_prerequisite(why);
            return None;
        }
    };
    let mut cmd = Command::new(&exe);
    cmd.args(["good", "2"])
        .env("OCL_ICD_VENDORS", &vendors)
        .env(ocl_remote::NODES_ENV, addr.to_string())
        .env_remove(ocl_remote::TENANT_ENV)
        .env_remove(ocl_remote::TENANT_TOKEN_ENV);
    for (key, value) in [
        (ocl_remote::TENANT_ENV, tenant),
        (ocl_remote::TENANT_TOKEN_ENV, token),
    ] {
        if !value.is_empty() {
            cmd.env(key, value);
        }
    }
    let out = cmd.output().expect("run the OpenCL program");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), text))
}

fn through_the_icd(node: &TestNode, addr: std::net::SocketAddr) {
    let Some((ok, out)) = program(node, addr, "team-b", B_TOKEN) else {
        return;
    };
    assert!(ok && out.starts_with("good: ok"), "{out}");
    // Same host: the ICD says Hello on TCP, then on the node's Unix socket; the same
    // token opens both.
    let (ok, out) = program(node, addr, "team-b", "wrong").unwrap();
    assert!(!ok, "{out}");
    let reason = "refused: tenant `team-b` is unknown or its token does not match";
    assert_eq!(out.matches(reason).count(), 1, "the reason, once: {out}");
    assert!(
        out.contains(&format!(
            "clGetPlatformIDs(1, &platform, NULL) -> {}",
            cl::CL_PLATFORM_NOT_FOUND_KHR
        )),
        "{out}"
    );
    let (ok, out) = program(node, addr, "", "").unwrap();
    assert!(!ok && out.contains("refuses anonymous callers"), "{out}");
    // A's quota (2 KiB) is below the program's 4 KiB buffer.
    let (ok, out) = program(node, addr, "team-a", A_TOKEN).unwrap();
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("err -> {}", cl::CL_OUT_OF_RESOURCES)),
        "clCreateBuffer should fail: {out}"
    );
    wait_until("the node logs the quota's refusal", || {
        node.log()
            .contains("tenant `team-a`: allocation of 4096 bytes refused")
    });
    let log = node.log();
    for event in ["authentication_failed", "forbidden"] {
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("\"event\":\"{event}\""))
                    && l.contains("\"protocol\":\"opencl\"")),
            "no {event} audit line for OpenCL:\n{log}"
        );
    }
}

/// B's token replaced in the file, SIGHUP: B's old token is refused at its next
/// session, the session B opened before runs on, and the new token works.
fn rotation(node: &mut TestNode, addr: std::net::SocketAddr) {
    let mut before = session(addr, "team-b", B_TOKEN).expect("team-b is admitted");
    before.setup(1);
    let path = node.dir.join("node.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let (from, to) = (
        text.find("anonymous = ").unwrap(),
        text.find("[opencl]").unwrap(),
    );
    let rotated = tenants(&hash_token(B_ROTATED));
    std::fs::write(&path, format!("{}{rotated}{}", &text[..from], &text[to..])).unwrap();
    // SAFETY: a signal to the node this test started.
    unsafe { libc::kill(node.pid(), libc::SIGHUP) };
    wait_until("the reload is audited", || {
        node.log().contains("\"event\":\"policy_reload\"")
    });
    assert_eq!(
        refused(addr, "team-b", B_TOKEN),
        "tenant `team-b` is unknown or its token does not match"
    );
    assert!(session(addr, "team-b", B_ROTATED).is_ok());
    let (status, _, reads) = before.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    assert_eq!(
        reads[0].1[..4],
        (i32::from_le_bytes([1; 4]) + 1).to_le_bytes()
    );
}
