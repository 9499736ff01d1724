//! The remote OpenCL service's bounds come from node.toml: a client of a node whose
//! file sets `opencl_buffer_bytes_max` sees it as the device's memory and largest
//! allocation, gets buffers up to it, and is refused one byte more
//! (`CL_INVALID_BUFFER_SIZE`, in the node's default runtime process per session).

mod common;
#[path = "../../ocl-remote/tests/common/mod.rs"]
mod ocl;

use common::{free_addr, TestNode};
use ocl::Client;
use ocl_remote::cl;
use ocl_remote::proto::Request;

#[test]
fn opencl_bounds_in_node_toml_reach_the_service() {
    if !common::opencl_runtime_present() {
        return;
    }
    let quota: u64 = 3 << 20;
    let (_node, ocl_addr) = TestNode::start_with(|| {
        let ocl_addr = free_addr();
        (
            format!(
        "opencl = \"{ocl_addr}\"\nopencl_buffer_bytes_max = {quota}\nopencl_clients_max = 1\n"
    ),
            ocl_addr,
        )
    });
    let mut c = Client::connect(ocl_addr).expect("the node shares its OpenCL devices");
    assert_eq!(
        Client::connect(ocl_addr).err(),
        Some(cl::CL_OUT_OF_RESOURCES),
        "opencl_clients_max = 1"
    );
    let device = c.info.1[0][0];
    for param in [
        cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE,
        cl::CL_DEVICE_GLOBAL_MEM_SIZE,
    ] {
        let (status, bytes) = c.call(&Request::GetDeviceInfo { device, param });
        assert_eq!(status, cl::CL_SUCCESS);
        assert_eq!(u64::from_ne_bytes(bytes.try_into().unwrap()), quota);
    }
    c.setup_context();
    let mut create = |id, size| {
        c.call(&Request::CreateBuffer {
            id,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size,
            data: &[],
        })
        .0
    };
    // Above the largest allocation presented: the size is wrong, as OpenCL says (the
    // runtime, whose bound is the device's, accepted it, and the quota refused it
    // with CL_OUT_OF_RESOURCES).
    assert_eq!(create(2, quota + 1), cl::CL_INVALID_BUFFER_SIZE);
    assert_eq!(create(3, quota), cl::CL_SUCCESS);
}

/// In the default isolation (`session`: the client's runtime process keeps its quota), a
/// buffer released while a sub-buffer still holds it stays counted: buffer, sub-buffer,
/// release of the buffer, repeated, is refused once the storage still allocated fills
/// the quota (it was not, before storage was counted instead of objects).
#[test]
fn storage_held_by_a_sub_buffer_counts_against_the_quota_in_a_runtime_process() {
    if !common::opencl_runtime_present() {
        return;
    }
    let mib: u64 = 1 << 20;
    let (_node, ocl_addr) = TestNode::start_with(|| {
        let ocl_addr = free_addr();
        (
            format!(
        "opencl = \"{ocl_addr}\"\nopencl_isolation = \"session\"\nopencl_buffer_bytes_max = {}\n",
        3 * mib
    ),
            ocl_addr,
        )
    });
    let mut c = Client::connect(ocl_addr).expect("the node shares its OpenCL devices");
    c.setup_context();
    for round in 0..4u64 {
        let buffer = 10 + 2 * round;
        let status = c
            .call(&Request::CreateBuffer {
                id: buffer,
                context: 1,
                flags: cl::CL_MEM_READ_WRITE,
                size: mib,
                data: &[],
            })
            .0;
        if round == 3 {
            assert_eq!(status, cl::CL_OUT_OF_RESOURCES, "3 MiB are still allocated");
            break;
        }
        assert_eq!(status, cl::CL_SUCCESS, "round {round}");
        let sub = c.call(&Request::CreateSubBuffer {
            id: buffer + 1,
            parent: buffer,
            flags: cl::CL_MEM_READ_WRITE,
            offset: 0,
            size: 64,
        });
        assert_eq!(sub.0, cl::CL_SUCCESS);
        c.send(&Request::Release { id: buffer });
    }
    // The storage goes with its last object, and its bytes with it.
    c.send(&Request::Release { id: 11 });
    let status = c
        .call(&Request::CreateBuffer {
            id: 20,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size: mib,
            data: &[],
        })
        .0;
    assert_eq!(status, cl::CL_SUCCESS);
}

/// An `opencl` address the node cannot listen on is an error at start, naming the
/// address (as for the HTTP and RAC listeners), not a node serving without the
/// OpenCL devices it was asked to share. A host without an OpenCL runtime is another
/// case: the node serves the rest and says so in its log.
#[test]
fn an_opencl_address_in_use_stops_the_node_at_start() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap();
    let dir = std::env::temp_dir().join(format!("netaccel-ocl-taken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        format!("http = \"127.0.0.1:0\"\nrac = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nopencl = \"{taken}\"\n"),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_netaccel-node"))
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the node kept running with its OpenCL address taken");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("cannot listen for remote OpenCL on {taken}")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
