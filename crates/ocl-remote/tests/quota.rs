//! The per-client memory bound (`buffer_bytes_max`) and the sizes the node presents
//! within it. The bound counts storage, not objects: a buffer released while a
//! sub-buffer or a 1D image on it still holds it keeps its memory allocated, so its
//! bytes stay counted until the last object on it goes. (Before, the release gave the
//! bytes back at once, and a client repeating "buffer, sub-buffer, release the buffer"
//! allocated past its bound.) The largest allocation presented is a proportion of the
//! bound, and the node allocates nothing larger. Needs an OpenCL runtime with a device
//! (PoCL); without one the test says so and passes without checking anything, except in
//! CI (`CI=true`), where a missing prerequisite fails the test.

mod common;

use std::time::{Duration, Instant};

use common::{service, Client};
use ocl_remote::cl;
use ocl_remote::proto::{Command, Request};
use ocl_remote::service::{ServiceConfig, ServiceHandle};

const MIB: u64 = 1 << 20;
const QUOTA_MIB: u64 = 4;

/// How a client keeps a buffer's storage alive after releasing the buffer itself.
#[derive(Clone, Copy, Debug)]
enum Holder {
    SubBuffer,
    Image1dBuffer,
}

fn create_holder(c: &mut Client, holder: Holder, id: u64, buffer: u64) -> i32 {
    let request = match holder {
        Holder::SubBuffer => Request::CreateSubBuffer {
            id,
            parent: buffer,
            flags: cl::CL_MEM_READ_WRITE,
            offset: 0,
            size: 64,
        },
        // CL_RGBA, CL_UNORM_INT8: 16 pixels of 4 bytes at the buffer's start.
        Holder::Image1dBuffer => Request::CreateImage {
            id,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            format: [0x10B5, 0x10D2],
            desc: [cl::CL_MEM_OBJECT_IMAGE1D_BUFFER as u64, 16, 0, 0, buffer],
            data: &[],
        },
    };
    c.call(&request).0
}

fn round_trip(c: &mut Client) {
    let name = c.call(&Request::GetPlatformInfo {
        platform: 0,
        param: cl::CL_PLATFORM_NAME,
    });
    assert_eq!(name.0, cl::CL_SUCCESS);
}

/// Polls until the service has no client, object or counted byte left.
fn wait_idle(svc: &ServiceHandle) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while (svc.clients_connected() > 0 || svc.client_objects() > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(svc.clients_connected(), 0);
    assert_eq!(svc.client_objects(), 0);
    assert_eq!(svc.client_buffer_bytes(), 0);
}

fn storage_held_by(holder: Holder) {
    let config = ServiceConfig {
        buffer_bytes_max: QUOTA_MIB * MIB,
        ..ServiceConfig::default()
    };
    let Some((svc, _registry)) = service(config) else {
        return;
    };
    let mut c = Client::connect(svc.local_addr()).unwrap();
    c.setup_context();

    // Buffer, holder on it, release the buffer: each round leaves 1 MiB allocated.
    let mut holders = Vec::new();
    for round in 0..QUOTA_MIB + 2 {
        let buffer = 100 + 2 * round;
        let status = c.create_buffer(buffer, MIB);
        if round == QUOTA_MIB {
            assert_eq!(
                status,
                cl::CL_OUT_OF_RESOURCES,
                "{holder:?}: round {round} went past the quota with {QUOTA_MIB} MiB still allocated"
            );
            break;
        }
        assert_eq!(status, cl::CL_SUCCESS, "{holder:?}: round {round}");
        assert_eq!(create_holder(&mut c, holder, buffer + 1, buffer), 0);
        c.send(&Request::Release { id: buffer });
        holders.push(buffer + 1);
        // A round trip after the release (which has no answer), so that the gauge is
        // read after the service handled it.
        round_trip(&mut c);
        assert_eq!(
            svc.client_buffer_bytes(),
            ((round + 1) * MIB) as i64,
            "{holder:?}: the gauge counts the storage still allocated"
        );
    }

    // Releasing the holders frees the storage: its bytes are given back.
    for id in holders {
        c.send(&Request::Release { id });
    }
    for id in 0..QUOTA_MIB {
        assert_eq!(c.create_buffer(200 + id, MIB), 0, "{holder:?}: buffer {id}");
    }
    assert_eq!(svc.client_buffer_bytes(), (QUOTA_MIB * MIB) as i64);
    assert_eq!(c.create_buffer(300, MIB), cl::CL_OUT_OF_RESOURCES);
    drop(c);
    wait_idle(&svc);
}

#[test]
fn a_buffer_held_by_a_sub_buffer_stays_counted() {
    storage_held_by(Holder::SubBuffer);
}

#[test]
fn a_buffer_held_by_a_1d_image_stays_counted() {
    storage_held_by(Holder::Image1dBuffer);
}

/// Under a quota smaller than the device, the device looks like a smaller device of the
/// same kind: the largest allocation keeps its proportion to the memory, so a program
/// that takes the largest buffer allowed still has room for more (the whole quota as
/// one allocation left none).
#[test]
fn the_largest_allocation_leaves_room_for_more() {
    /// (global memory, largest allocation) a client of a service with `quota` sees.
    fn sizes(quota: u64) -> Option<(ServiceHandle, Client, u64, u64)> {
        let config = ServiceConfig {
            buffer_bytes_max: quota,
            ..ServiceConfig::default()
        };
        let (svc, _registry) = service(config)?;
        let mut c = Client::connect(svc.local_addr()).unwrap();
        let device = c.info.1[0][0];
        let mut size = |param: u32| {
            let (status, bytes) = c.call(&Request::GetDeviceInfo { device, param });
            assert_eq!(status, cl::CL_SUCCESS);
            u64::from_ne_bytes(bytes.try_into().unwrap())
        };
        let global = size(cl::CL_DEVICE_GLOBAL_MEM_SIZE);
        let max_alloc = size(cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE);
        Some((svc, c, global, max_alloc))
    }
    // Without a quota in the way: the device's own sizes.
    let Some((_, _, device_global, device_max_alloc)) = sizes(u64::MAX) else {
        return;
    };
    let quota = 1u64 << 30;
    let (_svc, mut c, global, max_alloc) = sizes(quota).unwrap();
    assert_eq!(global, device_global.min(quota));
    assert!(max_alloc <= global && max_alloc <= device_max_alloc);
    assert!(max_alloc >= (global / 4).max(128 << 20).min(device_max_alloc));
    c.setup_context();
    assert_eq!(c.create_buffer(10, max_alloc), cl::CL_SUCCESS);
    // A size a program can fill with a pattern (a native device's are round too).
    let queue = Request::CreateQueue {
        id: 2,
        context: 1,
        device: c.info.1[0][0],
        properties: 0,
    };
    assert_eq!(c.call(&queue).0, cl::CL_SUCCESS);
    let (status, _, _) = c.task(vec![Command::Fill {
        queue: 2,
        event: 0,
        buffer: 10,
        pattern: &[0; 16],
        offset: 0,
        size: max_alloc,
    }]);
    assert_eq!(status, cl::CL_SUCCESS, "filling {max_alloc} bytes");
    // PoCL's CPU device allows 8 of its 21.5 GiB in one allocation: 380 MiB of 1 GiB.
    // The rest of the quota, in allocations no larger than the largest.
    if device_max_alloc < device_global && device_global > quota {
        assert!(max_alloc < global, "{max_alloc} of {global}");
        let mut left = global - max_alloc;
        let mut id = 11;
        while left > 0 {
            let size = left.min(max_alloc);
            assert_eq!(
                c.create_buffer(id, size),
                cl::CL_SUCCESS,
                "{size} of {left} left"
            );
            (left, id) = (left - size, id + 1);
        }
        assert_eq!(c.create_buffer(id, 1), cl::CL_OUT_OF_RESOURCES);
    } else {
        eprintln!("SKIP (in part): the device allows all its memory in one allocation");
    }
}

/// Nothing larger than the largest allocation the node presents is allocated, on the
/// network path and the shared-memory one: a buffer one byte larger fails with
/// `CL_INVALID_BUFFER_SIZE`, as OpenCL specifies, and an image with
/// `CL_INVALID_IMAGE_SIZE`. (Before, the runtime, whose own bound is the device's,
/// accepted them, and the quota refused a second one: the CTS's `async_copy_*` made
/// one of 582 MB, with 380 MiB presented, and then failed on the next.)
#[test]
fn nothing_larger_than_the_largest_allocation_presented_is_allocated() {
    // The quota that was the default (1 GiB): the device presented smaller than it is.
    let config = ServiceConfig {
        buffer_bytes_max: 1 << 30,
        ..ServiceConfig::default()
    };
    let Some((svc, _registry)) = service(config) else {
        return;
    };
    for host_id in [Vec::new(), ocl_remote::shm::host_id()] {
        let mut c = Client::connect_with(svc.local_addr(), &host_id).unwrap();
        let device = c.info.1[0][0];
        let (status, bytes) = c.call(&Request::GetDeviceInfo {
            device,
            param: cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE,
        });
        assert_eq!(status, cl::CL_SUCCESS);
        let max_alloc = u64::from_ne_bytes(bytes.try_into().unwrap());
        c.setup_context();
        assert_eq!(
            c.create_buffer(2, max_alloc + 1),
            cl::CL_INVALID_BUFFER_SIZE,
            "one byte above {max_alloc}, host id {host_id:?}"
        );
        assert_eq!(c.create_buffer(3, max_alloc), cl::CL_SUCCESS);
        c.send(&Request::Release { id: 3 });
        // CL_RGBA, CL_FLOAT (16 bytes a pixel), 8192 pixels wide: 128 KiB a row, and
        // the largest allocation is in whole MiB.
        const ROW: u64 = 16 * 8192;
        let image = |c: &mut Client, id, rows| {
            c.call(&Request::CreateImage {
                id,
                context: 1,
                flags: cl::CL_MEM_READ_WRITE,
                format: [0x10B5, 0x10DE],
                desc: [cl::CL_MEM_OBJECT_IMAGE2D as u64, 8192, rows, 0, 0],
                data: &[],
            })
            .0
        };
        assert_eq!(
            image(&mut c, 4, max_alloc / ROW + 1),
            cl::CL_INVALID_IMAGE_SIZE
        );
        assert_eq!(image(&mut c, 5, max_alloc / ROW), cl::CL_SUCCESS);
    }
    wait_idle(&svc);
}
