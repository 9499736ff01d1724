//! The remote OpenCL service's bounds come from node.toml: a client of a node whose
//! file sets `opencl_buffer_bytes_max` sees it as the device's memory and largest
//! allocation, gets buffers up to it, and is refused one byte more
//! (`CL_INVALID_BUFFER_SIZE`, in the node's default runtime process per session).

mod common;
#[path = "../../ocl-remote/tests/common/mod.rs"]
mod ocl;

use std::net::{SocketAddr, TcpListener};

use common::TestNode;
use ocl::Client;
use ocl_remote::cl;
use ocl_remote::proto::Request;

#[test]
fn opencl_bounds_in_node_toml_reach_the_service() {
    if !common::opencl_runtime_present() {
        return;
    }
    let ocl_addr: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let quota: u64 = 3 << 20;
    let _node = TestNode::start(&format!(
        "opencl = \"{ocl_addr}\"\nopencl_buffer_bytes_max = {quota}\nopencl_clients_max = 1\n"
    ));
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
    let ocl_addr: SocketAddr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mib: u64 = 1 << 20;
    let _node = TestNode::start(&format!(
        "opencl = \"{ocl_addr}\"\nopencl_isolation = \"session\"\nopencl_buffer_bytes_max = {}\n",
        3 * mib
    ));
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
