//! The per-client memory bound (`buffer_bytes_max`) counts storage, not objects: a buffer
//! released while a sub-buffer or a 1D image on it still holds it keeps its memory
//! allocated, so its bytes stay counted until the last object on it goes. (Before, the
//! release gave the bytes back at once, and a client repeating "buffer, sub-buffer,
//! release the buffer" allocated past its bound.) Needs an OpenCL runtime with a device
//! (PoCL); without one the test says so and passes without checking anything, except in
//! CI (`CI=true`), where a missing prerequisite fails the test.

mod common;

use std::time::{Duration, Instant};

use common::{service, Client};
use ocl_remote::cl;
use ocl_remote::proto::Request;
use ocl_remote::service::{ServiceConfig, ServiceHandle};

const MIB: u64 = 1 << 20;
const QUOTA_MIB: u64 = 4;

/// How a client keeps a buffer's storage alive after releasing the buffer itself.
#[derive(Clone, Copy, Debug)]
enum Holder {
    SubBuffer,
    Image1dBuffer,
}

fn create_buffer(c: &mut Client, id: u64) -> i32 {
    c.call(&Request::CreateBuffer {
        id,
        context: 1,
        flags: cl::CL_MEM_READ_WRITE,
        size: MIB,
        data: &[],
    })
    .0
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
        let status = create_buffer(&mut c, buffer);
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
        assert_eq!(
            create_buffer(&mut c, 200 + id),
            0,
            "{holder:?}: buffer {id}"
        );
    }
    assert_eq!(svc.client_buffer_bytes(), (QUOTA_MIB * MIB) as i64);
    assert_eq!(create_buffer(&mut c, 300), cl::CL_OUT_OF_RESOURCES);
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
