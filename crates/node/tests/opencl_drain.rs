//! SIGTERM drains a node that shares OpenCL devices, as it drains one that does not:
//! the task a remote OpenCL client has in flight finishes and its result is sent, the
//! client's session is closed, its shared-memory regions are unlinked, and the node
//! exits 0. (An OpenCL runtime built on LLVM installs handlers that re-raise SIGTERM;
//! before the fix the node died with status 143 and left its regions behind.)

mod common;
#[path = "../../ocl-remote/tests/common/mod.rs"]
mod ocl;

use std::time::{Duration, Instant};

use common::{free_addr, TestNode};
use ocl::{Client, Frame};
use ocl_remote::cl;
use ocl_remote::proto::{Command, KernelArg, NdRange, Request};

/// A kernel slow enough that the test can signal the node while it runs.
const SPIN: &[u8] = b"__kernel void spin(__global float *v, int rounds) {
    size_t i = get_global_id(0); float x = v[i];
    for (int r = 0; r < rounds; r++) x = x * 0.999f + 0.5f;
    v[i] = x;
}";
const FLOATS: u64 = 1 << 20;

/// The shared-memory regions the node process `pid` holds open by name.
fn regions_of(pid: u32) -> Vec<String> {
    let prefix = format!("netaccel-ocl-{pid}-");
    std::fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

fn ocl_queue_depth(node: &TestNode) -> f64 {
    let text = ureq::get(&node.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    text.lines()
        .filter(|l| l.contains("ocl_queue_depth{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn call_ok(c: &mut Client, request: Request<'_>) {
    let (status, _) = c.call(&request);
    assert_eq!(status, cl::CL_SUCCESS);
}

#[test]
fn sigterm_with_remote_opencl_finishes_tasks_closes_sessions_and_exits_zero() {
    if !common::opencl_runtime_present() {
        return;
    }
    // The runtime in the node's process (`tests/opencl_isolation.rs` drains isolated
    // runtime processes).
    let (mut node, ocl_addr) = TestNode::start_with(|| {
        let ocl_addr = free_addr();
        (
            format!("opencl = \"{ocl_addr}\"\nopencl_isolation = \"none\"\n"),
            ocl_addr,
        )
    });
    // A client on the node's host: its buffers live in shared memory regions.
    let mut c = Client::connect_with(ocl_addr, &ocl_remote::shm::host_id())
        .expect("the node shares its OpenCL devices");
    let device = c.info.1[0][0];
    call_ok(
        &mut c,
        Request::CreateContext {
            id: 1,
            devices: vec![device],
        },
    );
    call_ok(
        &mut c,
        Request::CreateQueue {
            id: 2,
            context: 1,
            device,
            properties: 0,
        },
    );
    call_ok(
        &mut c,
        Request::CreateBuffer {
            id: 3,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size: FLOATS * 4,
            data: &[],
        },
    );
    call_ok(
        &mut c,
        Request::CreateProgramWithSource {
            id: 4,
            context: 1,
            source: SPIN,
        },
    );
    call_ok(
        &mut c,
        Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b"",
        },
    );
    call_ok(
        &mut c,
        Request::CreateKernel {
            id: 5,
            program: 4,
            name: b"spin",
        },
    );
    let pid = node.pid() as u32;
    assert!(
        !regions_of(pid).is_empty(),
        "the same-host buffer should live in a shared memory region"
    );

    let rounds = 400i32.to_le_bytes();
    c.send(&Request::enqueue(vec![Command::NdRange(NdRange {
        queue: 2,
        event: 0,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [FLOATS, 0, 0],
        local: None,
        args: vec![KernelArg::Mem(3), KernelArg::Bytes(&rounds)],
    })]));
    let flush = c.send(&Request::Flush);
    let deadline = Instant::now() + Duration::from_secs(10);
    while ocl_queue_depth(&node) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the task never reached the device"
        );
        std::thread::sleep(Duration::from_millis(2));
    }

    let status = node.terminate();
    assert!(status.success(), "the node exited with {status}, not 0");
    match c.read_frame() {
        (id, Frame::TaskDone(status, _)) if id == flush => assert_eq!(status, cl::CL_SUCCESS),
        (id, _) => panic!("expected the in-flight task's result, got a frame for {id}"),
    }
    // The session was closed: the connection ends after the last result.
    let mut rest = Vec::new();
    let read = std::io::Read::read_to_end(&mut c.stream, &mut rest);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "the node kept the session open: {read:?}"
    );
    assert_eq!(
        regions_of(pid),
        Vec::<String>::new(),
        "shared memory regions left behind"
    );
}
