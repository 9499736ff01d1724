//! The OpenCL service driven over the wire by a minimal protocol client: per-client
//! namespaces, limits, hostile input and metrics. Needs an OpenCL runtime with a device
//! (PoCL); without one the tests say so and pass without checking anything, except in
//! CI (`CI=true`), where a missing prerequisite fails the test.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{inc, read_cmd, service, Client, SRC};
use ocl_remote::cl;
use ocl_remote::proto::{self, Command, Queued, Request};
use ocl_remote::service::{ServiceConfig, ServiceHandle};

#[test]
fn a_client_cannot_reach_another_clients_objects() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(0x11);
    let mut b = Client::connect(svc.local_addr()).unwrap();
    let device = b.info.1[0][0];

    // Control calls naming A's objects fail with the error of the expected type.
    assert_eq!(
        b.call(&Request::CreateQueue {
            id: 10,
            context: 1,
            device,
            properties: 0
        })
        .0,
        cl::CL_INVALID_CONTEXT
    );
    assert_eq!(
        b.call(&Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b""
        })
        .0,
        cl::CL_INVALID_PROGRAM
    );
    assert_eq!(
        b.call(&Request::GetKernelInfo {
            kernel: 5,
            param: cl::CL_KERNEL_NUM_ARGS
        })
        .0,
        cl::CL_INVALID_KERNEL
    );
    assert_eq!(
        b.call(&Request::CreateKernel {
            id: 11,
            program: 4,
            name: b"inc"
        })
        .0,
        cl::CL_INVALID_PROGRAM
    );

    // B's own context and queue, with ids that differ from A's.
    assert_eq!(
        b.call(&Request::CreateContext {
            id: 20,
            devices: vec![device]
        })
        .0,
        0
    );
    assert_eq!(
        b.call(&Request::CreateQueue {
            id: 21,
            context: 20,
            device,
            properties: 0
        })
        .0,
        0
    );
    // Commands naming A's buffer or kernel fail per command; a queue id of A's too.
    let (status, events, reads) = b.task(vec![
        read_cmd(21, 3, 100),
        Command::Write {
            queue: 21,
            event: 101,
            buffer: 3,
            offset: 0,
            data: &[0xff; 8],
        },
        inc(21, 5, 3, 102),
        read_cmd(2, 3, 103),
        // An id of the wrong type: B's queue used as a buffer.
        read_cmd(21, 21, 104),
    ]);
    assert_eq!(status, cl::CL_INVALID_MEM_OBJECT);
    assert!(reads.is_empty());
    let codes: Vec<(u64, i32)> = events.iter().map(|e| (e.event, e.status)).collect();
    assert_eq!(
        codes,
        vec![
            (100, cl::CL_INVALID_MEM_OBJECT),
            (101, cl::CL_INVALID_MEM_OBJECT),
            (102, cl::CL_INVALID_KERNEL),
            (103, cl::CL_INVALID_COMMAND_QUEUE),
            (104, cl::CL_INVALID_MEM_OBJECT),
        ]
    );

    // A's data is untouched and A's kernel still works.
    let (status, events, reads) = a.task(vec![inc(2, 5, 3, 1), read_cmd(2, 3, 2)]);
    assert_eq!(status, 0);
    assert!(events.iter().all(|e| e.status == cl::CL_COMPLETE));
    let mut expected = [0x11u8; 64];
    for word in expected.chunks_mut(4) {
        word.copy_from_slice(&(i32::from_le_bytes([0x11; 4]) + 1).to_le_bytes());
    }
    assert_eq!(reads, vec![(7, expected.to_vec())]);
}

#[test]
fn released_ids_and_unknown_ids_are_invalid() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(0);
    a.send(&Request::Release { id: 3 });
    let (status, events, _) = a.task(vec![read_cmd(2, 3, 1), read_cmd(2, 999, 2)]);
    assert_eq!(status, cl::CL_INVALID_MEM_OBJECT);
    assert!(events.iter().all(|e| e.status == cl::CL_INVALID_MEM_OBJECT));
    // Reusing a live id for a new object is refused.
    assert_eq!(
        a.call(&Request::CreateContext {
            id: 1,
            devices: vec![0]
        })
        .0,
        cl::CL_INVALID_VALUE
    );
    // Out-of-range access is refused before it reaches the device.
    let data = [0u8; 16];
    assert_eq!(
        a.call(&Request::CreateBuffer {
            id: 30,
            context: 1,
            flags: 1,
            size: 16,
            data: &data
        })
        .0,
        0
    );
    let (status, _, _) = a.task(vec![Command::Read {
        queue: 2,
        event: 0,
        buffer: 30,
        offset: 8,
        size: 16,
        token: 1,
    }]);
    assert_eq!(status, cl::CL_INVALID_VALUE);
}

#[test]
fn limits_give_clear_errors() {
    let config = ServiceConfig {
        buffer_bytes_max: 1 << 20,
        objects_max: 4,
        clients_max: 1,
        ..ServiceConfig::default()
    };
    let Some((svc, _registry)) = service(config) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    // Only one client at a time.
    assert_eq!(
        Client::connect(svc.local_addr()).err(),
        Some(cl::CL_OUT_OF_RESOURCES)
    );

    let device = a.info.1[0][0];
    assert_eq!(
        a.call(&Request::CreateContext {
            id: 1,
            devices: vec![device]
        })
        .0,
        0
    );
    let buffer = |id, size| Request::CreateBuffer {
        id,
        context: 1,
        flags: 1,
        size,
        data: &[],
    };
    // Larger than the largest allocation (here the whole quota): a wrong size.
    assert_eq!(a.call(&buffer(2, 2 << 20)).0, cl::CL_INVALID_BUFFER_SIZE);
    assert_eq!(a.call(&buffer(2, 1024)).0, 0);
    // Within it, but more than the quota has left.
    assert_eq!(a.call(&buffer(3, 1 << 20)).0, cl::CL_OUT_OF_RESOURCES);
    for id in 3..5 {
        assert_eq!(a.call(&buffer(id, 1024)).0, 0, "object {id}");
    }
    let fifth = buffer(5, 1024);
    assert_eq!(a.call(&fifth).0, cl::CL_OUT_OF_RESOURCES);
    assert_eq!(svc.client_objects(), 4);
    assert_eq!(svc.client_buffer_bytes(), 3 * 1024);
    // Releasing makes room again.
    a.send(&Request::Release { id: 4 });
    assert_eq!(a.call(&fifth).0, 0);
    drop(a);
    wait_idle(&svc);
    // The slot of the departed client is free again.
    Client::connect(svc.local_addr()).unwrap();
}

/// The device as a client sees it: OpenCL 3.0 (what the remote path implements) with
/// the optional features the remote path cannot carry unsupported, and no allocation
/// larger than the client may make.
#[test]
fn devices_are_presented_as_opencl_3_0_within_the_client_quota() {
    let config = ServiceConfig {
        buffer_bytes_max: 3 << 20,
        ..ServiceConfig::default()
    };
    let Some((svc, _registry)) = service(config) else {
        return;
    };
    let mut c = Client::connect(svc.local_addr()).unwrap();
    let device = c.info.1[0][0];
    let mut info = |param: u32| c.call(&Request::GetDeviceInfo { device, param });
    let text = |(status, bytes): (i32, Vec<u8>)| {
        assert_eq!(status, cl::CL_SUCCESS);
        String::from_utf8(bytes).unwrap()
    };
    let device_version = text(info(cl::CL_DEVICE_VERSION));
    assert!(
        device_version.starts_with("OpenCL 3.0 "),
        "{device_version}"
    );
    let numeric = info(cl::CL_DEVICE_NUMERIC_VERSION);
    assert_eq!(numeric.0, cl::CL_SUCCESS);
    assert_eq!(numeric.1, cl::make_version(3, 0, 0).to_ne_bytes());
    // Shared virtual memory, device-side enqueue, pipes, sub-groups: unsupported,
    // whatever the runtime says (PoCL has SVM).
    for param in [
        cl::CL_DEVICE_SVM_CAPABILITIES,
        cl::CL_DEVICE_DEVICE_ENQUEUE_CAPABILITIES,
    ] {
        assert_eq!(info(param), (cl::CL_SUCCESS, vec![0; 8]), "{param:#x}");
    }
    for param in [cl::CL_DEVICE_PIPE_SUPPORT, cl::CL_DEVICE_MAX_NUM_SUB_GROUPS] {
        assert_eq!(info(param), (cl::CL_SUCCESS, vec![0; 4]), "{param:#x}");
    }
    let extensions = text(info(cl::CL_DEVICE_EXTENSIONS));
    for needs_host_api in ["cl_khr_command_buffer", "cl_khr_il_program", "cl_khr_spir"] {
        assert!(!extensions.contains(needs_host_api), "{extensions}");
    }
    // The same extensions with their versions.
    let (status, with_version) = info(cl::CL_DEVICE_EXTENSIONS_WITH_VERSION);
    assert_eq!(status, cl::CL_SUCCESS);
    let entry = 4 + cl::CL_NAME_VERSION_MAX_NAME_SIZE;
    let names: Vec<String> = with_version
        .chunks(entry)
        .map(|e| {
            String::from_utf8_lossy(&e[4..])
                .trim_end_matches('\0')
                .to_string()
        })
        .collect();
    let listed: Vec<&str> = extensions
        .trim_end_matches('\0')
        .split_whitespace()
        .collect();
    assert_eq!(names, listed);
    let size = |(status, bytes): (i32, Vec<u8>)| {
        assert_eq!(status, cl::CL_SUCCESS);
        u64::from_ne_bytes(bytes.try_into().unwrap())
    };
    let max_alloc = size(info(cl::CL_DEVICE_MAX_MEM_ALLOC_SIZE));
    let global = size(info(cl::CL_DEVICE_GLOBAL_MEM_SIZE));
    assert_eq!((max_alloc, global), (3 << 20, 3 << 20));
    let mut platform = |param: u32| c.call(&Request::GetPlatformInfo { platform: 0, param });
    let platform_version = text(platform(cl::CL_PLATFORM_VERSION));
    assert!(
        platform_version.starts_with("OpenCL 3.0 "),
        "{platform_version}"
    );
    assert_eq!(
        platform(cl::CL_PLATFORM_HOST_TIMER_RESOLUTION),
        (cl::CL_SUCCESS, vec![0; 8])
    );
    // The advertised allocation is one the client can make.
    c.setup_context();
    assert_eq!(
        c.create_buffer(10, max_alloc + 8),
        cl::CL_INVALID_BUFFER_SIZE
    );
    assert_eq!(c.create_buffer(11, max_alloc), cl::CL_SUCCESS);
}

/// A read's bytes are the buffer's when the read ran, whether the node copies them or
/// (reads after the task's last write) sends them from the runtime's mapped memory; a
/// mapping is given back before the next task writes the buffer.
#[test]
fn reads_return_the_bytes_of_their_moment_in_the_task() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut c = Client::connect(svc.local_addr()).unwrap();
    c.setup(0);
    let write = |byte: u8| Command::Write {
        queue: 2,
        event: 0,
        buffer: 3,
        offset: 0,
        data: Box::leak(vec![byte; 64].into_boxed_slice()),
    };
    let read = |token| Command::Read {
        queue: 2,
        event: 0,
        buffer: 3,
        offset: 0,
        size: 64,
        token,
    };
    for round in 0..3u8 {
        let (status, _, reads) = c.task(vec![
            write(round * 10 + 1),
            read(1),
            write(round * 10 + 2),
            // The kernel adds one to each int: the low byte of each.
            inc(2, 5, 3, 0),
            read(2),
            read(3),
        ]);
        assert_eq!(status, cl::CL_SUCCESS);
        let first = vec![round * 10 + 1; 64];
        let mut last = vec![round * 10 + 2; 64];
        for int in last.chunks_mut(4) {
            int[0] += 1;
        }
        assert_eq!(
            reads,
            [(1, first), (2, last.clone()), (3, last)],
            "round {round}"
        );
    }
}

fn wait_idle(svc: &ServiceHandle) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while (svc.clients_connected() > 0 || svc.client_objects() > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(svc.clients_connected(), 0);
    assert_eq!(svc.client_objects(), 0);
    assert_eq!(svc.client_buffer_bytes(), 0);
}

#[test]
fn hostile_frames_close_only_that_connection() {
    let Some((svc, _registry)) = service(ServiceConfig {
        frame_body_max: 1 << 20,
        ..ServiceConfig::default()
    }) else {
        return;
    };
    // A body longer than the limit, an unknown kind, a request before Hello, garbage.
    let mut too_long = Vec::new();
    proto::encode_header(&mut too_long, proto::kind::ENQUEUE, 1, 2 << 20);
    let mut unknown = Vec::new();
    proto::encode_header(&mut unknown, 77, 1, 0);
    let mut no_hello = Vec::new();
    Request::Flush.encode(1, &mut no_hello);
    for bytes in [too_long, unknown, no_hello, vec![0xff; 40]] {
        let mut s = TcpStream::connect(svc.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&bytes).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            s.read(&mut buf).unwrap_or(0),
            0,
            "connection should be closed"
        );
    }
    wait_idle(&svc);
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(1);
}

#[test]
fn metrics_count_tasks_clients_and_bytes() {
    let Some((svc, registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(0);
    let (status, _, _) = a.task(vec![
        Command::Write {
            queue: 2,
            event: 0,
            buffer: 3,
            offset: 0,
            data: &[1; 64],
        },
        read_cmd(2, 3, 0),
    ]);
    assert_eq!(status, 0);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for needle in [
        "ocl_task_latency_seconds_count{device=\"0\"",
        "ocl_queue_depth{device=\"0\"",
        "ocl_clients_connected 1",
        "ocl_client_buffer_bytes 64",
        "ocl_bytes_total{direction=\"to_device\"} 128",
        "ocl_bytes_total{direction=\"from_device\"} 64",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
}

#[test]
fn a_program_already_built_on_the_node_is_not_compiled_again() {
    let Some((svc, registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(5);
    let mut b = Client::connect(svc.local_addr()).unwrap();
    // Same source and options as A's program: served from the cache, and it works.
    b.setup(5);
    let (status, _, reads) = b.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
    assert_eq!(status, 0);
    let expected = (i32::from_le_bytes([5; 4]) + 1).to_le_bytes();
    assert_eq!(reads[0].1[..4], expected);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains("ocl_program_cache_hits_total 1"), "{text}");
    assert!(text.contains("ocl_program_cache_misses_total 1"), "{text}");
    // Different options mean a different program.
    assert_eq!(
        b.call(&Request::CreateProgramWithSource {
            id: 40,
            context: 1,
            source: SRC
        })
        .0,
        0
    );
    assert_eq!(
        b.call(&Request::BuildProgram {
            program: 40,
            devices: vec![],
            options: b"-DX=1"
        })
        .0,
        0
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains("ocl_program_cache_misses_total 2"), "{text}");
}

#[test]
fn an_open_task_over_its_byte_bound_fails_instead_of_growing() {
    let config = ServiceConfig {
        pending_bytes_max: 4096,
        ..ServiceConfig::default()
    };
    let Some((svc, _registry)) = service(config) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(0);
    let big = vec![7u8; 8192];
    assert_eq!(
        a.call(&Request::CreateBuffer {
            id: 50,
            context: 1,
            flags: 1,
            size: 8192,
            data: &[]
        })
        .0,
        0
    );
    let (status, events, _) = a.task(vec![Command::Write {
        queue: 2,
        event: 1,
        buffer: 50,
        offset: 0,
        data: &big,
    }]);
    assert_eq!(status, cl::CL_OUT_OF_RESOURCES);
    assert_eq!(events[0].status, cl::CL_OUT_OF_RESOURCES);
    // The next task starts from zero again.
    let (status, _, reads) = a.task(vec![
        Command::Write {
            queue: 2,
            event: 0,
            buffer: 3,
            offset: 0,
            data: &[9; 64],
        },
        read_cmd(2, 3, 0),
    ]);
    assert_eq!(status, 0);
    assert_eq!(reads[0].1, vec![9u8; 64]);
}

/// Commands without data count too: an open task of markers with long wait lists
/// cannot grow the node's memory past the bound.
#[test]
fn an_open_task_of_commands_without_data_is_bounded_too() {
    let config = ServiceConfig {
        pending_bytes_max: 1 << 20,
        ..ServiceConfig::default()
    };
    let Some((svc, _registry)) = service(config) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(0);
    // 64 frames of 8 markers waiting for 16 Ki events each: 64 MiB of wait lists.
    let wait: Vec<u64> = (1..=16 << 10).collect();
    for frame in 0..64u64 {
        a.send(&Request::Enqueue {
            commands: (0..8)
                .map(|i| Queued {
                    wait: wait.clone(),
                    command: Command::Marker {
                        queue: 2,
                        event: 1 + frame * 8 + i,
                    },
                })
                .collect(),
        });
    }
    let (status, events, _) = a.task(vec![read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_OUT_OF_RESOURCES);
    // The first markers fit and ran; the rest failed.
    assert!(events.iter().any(|e| e.status == cl::CL_COMPLETE));
    assert!(events.iter().any(|e| e.status == cl::CL_OUT_OF_RESOURCES));
    // The next task starts from zero again.
    let (status, _, _) = a.task(vec![read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
}

#[test]
fn a_client_that_stops_reading_cannot_hold_the_device() {
    let stall = Duration::from_millis(500);
    let Some((svc, _registry)) = service(ServiceConfig {
        send_stall_max: stall,
        ..ServiceConfig::default()
    }) else {
        return;
    };
    // The hog asks for 128 MiB of reads in one task, far more than the socket buffers
    // hold, and never reads its socket.
    let mut hog = Client::connect(svc.local_addr()).unwrap();
    hog.setup(0);
    let size = 16u64 << 20;
    let (status, _) = hog.call(&Request::CreateBuffer {
        id: 10,
        context: 1,
        flags: 1,
        size,
        data: &[],
    });
    assert_eq!(status, cl::CL_SUCCESS);
    let reads = (0..8)
        .map(|token| Command::Read {
            queue: 2,
            event: 0,
            buffer: 10,
            offset: 0,
            size,
            token,
        })
        .collect();
    hog.send(&Request::enqueue(reads));
    hog.send(&Request::Flush);
    std::thread::sleep(Duration::from_millis(100));
    // Another client on the same device is served once the hog's connection is dropped.
    let started = Instant::now();
    let mut other = Client::connect(svc.local_addr()).unwrap();
    other.setup(5);
    let (status, _, reads) = other.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    assert_eq!(reads[0].1[..4], 0x0505_0506i32.to_le_bytes());
    let waited = started.elapsed();
    assert!(waited < stall * 10, "the other client waited {waited:?}");
    // The hog's connection was closed: what it can still read ends.
    hog.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sink = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        match hog.stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    assert!(total < 8 * size, "the hog got everything ({total} bytes)");
    drop(hog);
    drop(other);
    wait_idle(&svc);
}

#[test]
fn image_commands_are_checked_before_the_runtime_sees_them() {
    use ocl_remote::proto::{ImageCmd, ImageOp};
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(0);
    // An 8x4 RGBA/UNORM_INT8 image (4 bytes per pixel), filled from packed data.
    let pixels: Vec<u8> = (0..128u8).collect();
    let (status, _) = a.call(&Request::CreateImage {
        id: 20,
        context: 1,
        flags: 1,
        format: [0x10B5, 0x10D2],
        desc: [0x10F1, 8, 4, 0, 0],
        data: &pixels,
    });
    assert_eq!(status, cl::CL_SUCCESS);
    // Data of the wrong length, unknown formats and shapes are refused.
    for (format, desc, data, want) in [
        (
            [0x10B5, 0x10D2],
            [0x10F1, 8, 4, 0, 0],
            &pixels[..100],
            cl::CL_INVALID_VALUE,
        ),
        (
            [0x10B5, 0x1234],
            [0x10F1, 8, 4, 0, 0],
            &[][..],
            cl::CL_INVALID_IMAGE_FORMAT_DESCRIPTOR,
        ),
        (
            [0x10B5, 0x10D2],
            [0x1234, 8, 0, 0, 0],
            &[][..],
            cl::CL_INVALID_IMAGE_DESCRIPTOR,
        ),
        // 1D images on a buffer (the last entry is the buffer): none, an image, one
        // pixel past the 64-byte buffer's end, initial data of its own.
        (
            [0x10B5, 0x10D2],
            [0x10F6, 8, 0, 0, 0],
            &[][..],
            cl::CL_INVALID_MEM_OBJECT,
        ),
        (
            [0x10B5, 0x10D2],
            [0x10F6, 8, 0, 0, 20],
            &[][..],
            cl::CL_INVALID_MEM_OBJECT,
        ),
        (
            [0x10B5, 0x10D2],
            [0x10F6, 17, 0, 0, 3],
            &[][..],
            cl::CL_INVALID_MEM_OBJECT,
        ),
        (
            [0x10B5, 0x10D2],
            [0x10F6, 16, 0, 0, 3],
            &pixels[..64],
            cl::CL_INVALID_VALUE,
        ),
        (
            [0x10B5, 0x10D2],
            [0x10F1, 8, 0, 0, 0],
            &[][..],
            cl::CL_INVALID_IMAGE_SIZE,
        ),
        (
            [0x10B5, 0x10D2],
            [0x10F2, u64::MAX, 2, 2, 0],
            &[][..],
            cl::CL_INVALID_IMAGE_SIZE,
        ),
    ] {
        let (status, _) = a.call(&Request::CreateImage {
            id: 21,
            context: 1,
            flags: 1,
            format,
            desc,
            data,
        });
        assert_eq!(status, want, "{format:x?} {desc:x?}");
    }
    let image = |op, src, dst, region: [u64; 3], data: &'static [u8]| {
        Command::Image(ImageCmd {
            queue: 2,
            event: 1,
            op,
            src,
            dst,
            src_origin: [0; 3],
            dst_origin: [0; 3],
            region,
            offset: 0,
            token: 5,
            data,
        })
    };
    // A whole read comes back as packed; a region past the edge, write data of the wrong
    // length, a short fill colour and a buffer used as an image fail as commands.
    let (status, _, reads) = a.task(vec![image(ImageOp::Read, 20, 0, [8, 4, 1], &[])]);
    assert_eq!(status, cl::CL_SUCCESS);
    assert_eq!(reads, [(5, pixels.clone())]);
    // A 1D image on the whole buffer 3 reads what the buffer holds.
    let (status, _) = a.call(&Request::CreateImage {
        id: 22,
        context: 1,
        flags: 1,
        format: [0x10B5, 0x10D2],
        desc: [0x10F6, 16, 0, 0, 3],
        data: &[],
    });
    assert_eq!(status, cl::CL_SUCCESS);
    let (status, _, through_buffer) = a.task(vec![read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    let (status, _, through_image) = a.task(vec![image(ImageOp::Read, 22, 0, [16, 1, 1], &[])]);
    assert_eq!(status, cl::CL_SUCCESS);
    assert_eq!(through_image[0].1, through_buffer[0].1);
    for (cmd, want) in [
        (
            image(ImageOp::Read, 20, 0, [9, 4, 1], &[]),
            cl::CL_INVALID_VALUE,
        ),
        (
            image(ImageOp::Read, 20, 0, [8, 4, 0], &[]),
            cl::CL_INVALID_VALUE,
        ),
        (
            image(ImageOp::Write, 0, 20, [2, 2, 1], &[0; 15]),
            cl::CL_INVALID_VALUE,
        ),
        (
            image(ImageOp::Fill, 0, 20, [2, 2, 1], &[0; 8]),
            cl::CL_INVALID_VALUE,
        ),
        (
            image(ImageOp::Read, 3, 0, [1, 1, 1], &[]),
            cl::CL_INVALID_MEM_OBJECT,
        ),
        (
            image(ImageOp::Copy, 20, 3, [1, 1, 1], &[]),
            cl::CL_INVALID_MEM_OBJECT,
        ),
    ] {
        let (status, events, _) = a.task(vec![cmd.clone()]);
        assert_eq!((status, events[0].status), (want, want), "{cmd:?}");
    }
    // An image is not a buffer.
    let (status, _, _) = a.task(vec![read_cmd(2, 20, 0)]);
    assert_eq!(status, cl::CL_INVALID_MEM_OBJECT);
    // Another client can reach neither A's image nor its sampler.
    assert_eq!(
        a.call(&Request::CreateSampler {
            id: 30,
            context: 1,
            normalized: 0,
            addressing: 0x1131,
            filter: 0x1140,
        })
        .0,
        cl::CL_SUCCESS
    );
    let mut b = Client::connect(svc.local_addr()).unwrap();
    b.setup(1);
    assert_eq!(
        b.call(&Request::GetImageInfo {
            image: 20,
            param: 0x1114
        })
        .0,
        cl::CL_INVALID_MEM_OBJECT
    );
    let (status, _, _) = b.task(vec![Command::NdRange(proto::NdRange {
        queue: 2,
        event: 0,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [1, 0, 0],
        local: None,
        args: vec![proto::KernelArg::Sampler(30)],
    })]);
    assert_eq!(status, cl::CL_INVALID_SAMPLER);
    drop(a);
    drop(b);
    wait_idle(&svc);
}

/// In CI a missing prerequisite fails a test instead of skipping it: a test run by
/// itself where the OpenCL loader finds no platform must fail and say so.
#[test]
fn in_ci_a_missing_prerequisite_is_a_failure() {
    let no_platforms =
        std::env::temp_dir().join(format!("netaccel-no-icds-{}", std::process::id()));
    std::fs::create_dir_all(&no_platforms).unwrap();
    let run = |ci: &str| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "a_client_cannot_reach_another_clients_objects"])
            .env("CI", ci)
            .env("OCL_ICD_VENDORS", &no_platforms)
            .output()
            .unwrap()
    };
    let out = run("true");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "passed in CI without an OpenCL platform:\n{text}"
    );
    assert!(
        text.contains("prerequisite") && text.contains("OpenCL"),
        "{text}"
    );
    let out = run("");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = std::fs::remove_dir_all(&no_platforms);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SKIP: ") && text.contains("OpenCL"), "{text}");
}

/// The node refuses host reads and writes that a memory object's `CL_MEM_HOST_*` flag
/// forbids, whatever the client (not necessarily the ICD) sends and whether the runtime
/// checks or not; a sub-buffer made without a host flag has its parent's. The refused
/// commands fail alone: the connection and the other commands live on.
#[test]
fn host_access_flags_are_enforced_by_the_node() {
    use ocl_remote::proto::{ImageCmd, ImageOp};
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut a = Client::connect(svc.local_addr()).unwrap();
    a.setup(0);
    let create = |id, flags| Request::CreateBuffer {
        id,
        context: 1,
        flags,
        size: 64,
        data: &[],
    };
    let rw = cl::CL_MEM_READ_WRITE;
    for (id, flags) in [
        (30, rw | cl::CL_MEM_HOST_NO_ACCESS),
        (31, rw | cl::CL_MEM_HOST_READ_ONLY),
        (32, rw | cl::CL_MEM_HOST_WRITE_ONLY),
    ] {
        assert_eq!(a.call(&create(id, flags)).0, cl::CL_SUCCESS);
    }
    let sub = Request::CreateSubBuffer {
        id: 33,
        parent: 30,
        flags: 0,
        offset: 0,
        size: 32,
    };
    assert_eq!(a.call(&sub).0, cl::CL_SUCCESS);
    let (status, _) = a.call(&Request::CreateImage {
        id: 34,
        context: 1,
        flags: rw | cl::CL_MEM_HOST_READ_ONLY,
        format: [0x10B5, 0x10D2],
        desc: [0x10F1, 2, 2, 0, 0],
        data: &[],
    });
    assert_eq!(status, cl::CL_SUCCESS);
    let write = |buffer, event| Command::Write {
        queue: 2,
        event,
        buffer,
        offset: 0,
        data: &[1; 16],
    };
    let read = |buffer, event| Command::Read {
        queue: 2,
        event,
        buffer,
        offset: 0,
        size: 16,
        token: event,
    };
    let image_write = ImageCmd {
        queue: 2,
        event: 10,
        op: ImageOp::Write,
        src: 0,
        dst: 34,
        src_origin: [0; 3],
        dst_origin: [0; 3],
        region: [2, 2, 1],
        offset: 0,
        token: 0,
        data: &[7; 16],
    };
    let image_read = ImageCmd {
        event: 11,
        op: ImageOp::Read,
        src: 34,
        dst: 0,
        token: 11,
        data: &[],
        ..image_write
    };
    let (_, events, reads) = a.task(vec![
        write(30, 1),
        read(30, 2),
        write(31, 3),
        read(31, 4),
        write(32, 5),
        read(32, 6),
        write(33, 7),
        read(33, 8),
        Command::Image(image_write),
        Command::Image(image_read),
    ]);
    let status: Vec<(u64, i32)> = events.iter().map(|e| (e.event, e.status)).collect();
    let refused = cl::CL_INVALID_OPERATION;
    assert_eq!(
        status,
        [
            (1, refused),
            (2, refused),
            (3, refused),
            (4, cl::CL_COMPLETE),
            (5, cl::CL_COMPLETE),
            (6, refused),
            (7, refused),
            (8, refused),
            (10, refused),
            (11, cl::CL_COMPLETE),
        ]
    );
    assert_eq!(reads.iter().map(|r| r.0).collect::<Vec<_>>(), [4, 11]);
}
