//! Per-device OpenCL grants (issue 31): the real node binary under the production
//! profile, sharing two OpenCL devices (PoCL's CPU device twice, `POCL_DEVICES`), with
//! tenants whose `opencl_devices` differ. Protocol clients (`ocl-remote`'s test
//! client) and a real OpenCL program through the ICD (`tests/c/devices.c`) check:
//!
//! - team A (`opencl_devices = ["0"]`) sees device 0 only, in its `Hello` answer and in
//!   the program's `clGetDeviceIDs`, and runs a kernel there; team B (`["0", "1"]`)
//!   sees and uses both; team C (`[]`) is refused at `Hello`, with an audit line;
//! - A's forged requests naming device 1 (device info, context, a context with both
//!   devices) get `CL_INVALID_DEVICE`, and the node logs the refusal and writes an
//!   audit line (`forbidden`, `use OpenCL device 1`);
//! - SIGHUP giving A device 1 instead of 0: A's next session sees device 1 only and is
//!   refused device 0, while the session A opened before keeps what it was admitted
//!   to (device 0, and still not device 1).
//!
//! Its own test binary: the node it starts inherits `POCL_DEVICES`, set once before.

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

const A_TOKEN: &str = "dev-a-Secret-5e1c";
const B_TOKEN: &str = "dev-b-Secret-0a97";
const C_TOKEN: &str = "dev-c-Secret-c4d2";

/// A on `a_devices`, B on both devices, C on none.
fn tenants(a_devices: &str) -> String {
    format!(
        "anonymous = \"refuse\"\n\
         [[tenants]]\nname = \"team-a\"\ntoken = \"{A_TOKEN}\"\nopencl = true\nopencl_devices = {a_devices}\n\
         [[tenants]]\nname = \"team-b\"\ntoken = \"{B_TOKEN}\"\nopencl = true\nopencl_devices = [\"0\", \"1\"]\n\
         [[tenants]]\nname = \"team-c\"\ntoken = \"{C_TOKEN}\"\nopencl = true\nopencl_devices = []\n"
    )
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn session(addr: std::net::SocketAddr, tenant: &str, token: &str) -> Client {
    Client::connect_as(addr, b"", tenant, token)
        .unwrap_or_else(|(status, reason)| panic!("{tenant} refused ({status}): {reason}"))
}

#[test]
fn tenants_see_and_use_only_their_devices() {
    if !common::opencl_runtime_present() {
        return;
    }
    // Before the node starts (it inherits it), and before any thread of this binary.
    std::env::set_var("POCL_DEVICES", "pthread pthread");
    let (mut node, addr) = TestNode::start_logging_with(
        || {
            let addr = free_addr();
            let config = format!(
                "log_refusals_per_second_max = 1000\n{}[opencl]\nlisten = \"{addr}\"\n",
                tenants("[\"0\"]")
            );
            (config, addr)
        },
        &["--log-level", "warn,netaccel_node::audit=info"],
    );
    let mut b = session(addr, "team-b", B_TOKEN);
    if b.info.1.concat().len() < 2 {
        ocl::missing_prerequisite("the OpenCL runtime ignores POCL_DEVICES: one device only");
        return;
    }
    assert_eq!(b.info.1, vec![vec![0, 1]], "B sees both devices");
    let mut a = session(addr, "team-a", A_TOKEN);
    assert_eq!(a.info.1, vec![vec![0]], "A sees device 0 only");
    a.setup(7);
    forged(&mut a, 1);
    wait_until("the refused device is logged and audited", || {
        let log = node.log();
        log.contains("tenant `team-a`: request for OpenCL device 1 refused")
            && log.lines().any(|l| {
                l.contains("\"event\":\"forbidden\"")
                    && l.contains("\"tenant\":\"team-a\"")
                    && l.contains("\"action\":\"use OpenCL device 1\"")
            })
    });
    // A's kernel runs on its device; B's on device 1.
    assert_eq!(incremented(&mut a), i32::from_le_bytes([7; 4]) + 1);
    // `setup` takes the first device listed: device 1 for B's.
    b.info.1 = vec![vec![1]];
    b.setup(1);
    assert_eq!(incremented(&mut b), i32::from_le_bytes([1; 4]) + 1);

    let Err((status, reason)) = Client::connect_as(addr, b"", "team-c", C_TOKEN) else {
        panic!("team-c, granted no device, was admitted");
    };
    assert_eq!(status, REFUSED);
    assert_eq!(
        reason,
        "tenant `team-c` may use none of this node's OpenCL devices: its opencl_devices \
         match none of them"
    );
    through_the_icd(&node, addr);
    wait_until("C's refusal is audited", || {
        node.log().lines().any(|l| {
            l.contains("\"event\":\"forbidden\"")
                && l.contains("\"protocol\":\"opencl\"")
                && l.contains("team-c")
        })
    });
    reload(&mut node, addr, a);
}

/// Requests of `c` naming `device`, not its own: each refused with `CL_INVALID_DEVICE`.
fn forged(c: &mut Client, device: u32) {
    let requests = [
        Request::GetDeviceInfo {
            device,
            param: cl::CL_DEVICE_NAME,
        },
        Request::CreateContext {
            id: 40,
            devices: vec![device],
        },
        Request::CreateContext {
            id: 41,
            devices: vec![0, 1],
        },
        Request::GetKernelWorkGroupInfo {
            kernel: 5,
            device,
            param: cl::CL_KERNEL_WORK_GROUP_SIZE,
        },
    ];
    for request in &requests {
        assert_eq!(c.call(request).0, cl::CL_INVALID_DEVICE, "{request:?}");
    }
}

/// Runs `inc` on buffer 3 of a session set up by `Client::setup`: its first int after.
fn incremented(c: &mut Client) -> i32 {
    let (status, _, reads) = c.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    i32::from_le_bytes(reads[0].1[..4].try_into().unwrap())
}

/// Runs `tests/c/devices.c` through the ICD as `tenant`: its success and output;
/// `None` (said why) without gcc or the ICD.
fn program(
    node: &TestNode,
    addr: std::net::SocketAddr,
    tenant: &str,
    token: &str,
) -> Option<(bool, String)> {
    let common::IcdProgram { exe, vendors } = match common::icd_program(&node.dir, "devices") {
        Ok(program) => program,
        Err(why) => {
            ocl::missing_prerequisite(why);
            return None;
        }
    };
    let out = Command::new(&exe)
        .env("OCL_ICD_VENDORS", &vendors)
        .env(ocl_remote::NODES_ENV, addr.to_string())
        .env(ocl_remote::TENANT_ENV, tenant)
        .env(ocl_remote::TENANT_TOKEN_ENV, token)
        .output()
        .expect("run the OpenCL program");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), text))
}

fn through_the_icd(node: &TestNode, addr: std::net::SocketAddr) {
    let Some((ok, out)) = program(node, addr, "team-a", A_TOKEN) else {
        return;
    };
    assert!(ok && out == "devices: 1\ndevice 0: ok\n", "{out}");
    let (ok, out) = program(node, addr, "team-b", B_TOKEN).unwrap();
    assert!(
        ok && out == "devices: 2\ndevice 0: ok\ndevice 1: ok\n",
        "{out}"
    );
    let (ok, out) = program(node, addr, "team-c", C_TOKEN).unwrap();
    assert!(
        !ok && out.contains("may use none of this node's OpenCL devices"),
        "{out}"
    );
}

/// A's grant moved from device 0 to device 1, SIGHUP: A's next session has device 1
/// only; `before`, A's session from before the reload, keeps device 0 and no more.
fn reload(node: &mut TestNode, addr: std::net::SocketAddr, mut before: Client) {
    let path = node.dir.join("node.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let (from, to) = (
        text.find("anonymous = ").unwrap(),
        text.find("[opencl]").unwrap(),
    );
    let moved = tenants("[\"1\"]");
    std::fs::write(&path, format!("{}{moved}{}", &text[..from], &text[to..])).unwrap();
    // SAFETY: a signal to the node this test started.
    unsafe { libc::kill(node.pid(), libc::SIGHUP) };
    wait_until("the reload is audited", || {
        node.log().contains("\"event\":\"policy_reload\"")
    });
    let mut after = session(addr, "team-a", A_TOKEN);
    assert_eq!(after.info.1, vec![vec![1]], "A sees device 1 only now");
    after.setup(3);
    forged(&mut after, 0);
    assert_eq!(incremented(&mut after), i32::from_le_bytes([3; 4]) + 1);
    // The session from before runs on with what it was admitted to.
    assert_eq!(incremented(&mut before), i32::from_le_bytes([7; 4]) + 2);
    forged(&mut before, 1);
}
