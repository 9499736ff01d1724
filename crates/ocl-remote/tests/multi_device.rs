//! A client's tasks run in the order it flushed them, also when they go to different
//! devices: a task may use what an earlier one computed on another device. (Within and
//! across tasks the commands' wait lists also travel on the wire and reach the runtime;
//! this rule orders whole tasks.)
//!
//! A session admitted to some devices only (a gate's `DeviceMask`) sees those in its
//! `Hello` answer and is refused the others with `CL_INVALID_DEVICE` wherever a
//! request names one, and the gate hears of it: in the service's process, in a
//! runtime process of its own, and in one shared with a session of all devices.
//!
//! Its own test binary: PoCL is asked for two CPU devices (`POCL_DEVICES`) before the
//! runtime is loaded, which must happen once per process. Without an OpenCL runtime, or
//! with one that ignores the variable, the test says so and passes.

mod common;

use std::time::Duration;

use common::{service, Client, Frame};
use ocl_remote::cl;
use ocl_remote::proto::{Command, KernelArg, NdRange, Request};
use ocl_remote::service::gate::{Admission, Caller, DeviceMask, Gate};
use ocl_remote::service::{Isolation, ServiceConfig, ServiceHandle};
use prometheus_client::registry::Registry;

const SRC: &[u8] = b"
__kernel void slow(__global int *v, int n, int value) {
    float a = 0.0f;
    for (int i = 0; i < n; i++) a = a * 0.999f + 1.0f;
    v[get_global_id(0)] = value + (a < 0.0f);
}
__kernel void copy(__global const int *src, __global int *dst) {
    dst[get_global_id(0)] = src[get_global_id(0)];
}";

/// Asks PoCL for two CPU devices, once, before any test of this binary loads it.
fn two_devices() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("POCL_DEVICES", "pthread pthread"));
}

fn ok(c: &mut Client, request: Request<'_>) {
    assert_eq!(c.call(&request).0, cl::CL_SUCCESS, "{request:?}");
}

fn slow(queue: u64, kernel: u64, buffer: u64, n: i32, value: i32) -> Command<'static> {
    let n: &'static [u8] = Box::leak(Box::new(n.to_le_bytes()));
    let value: &'static [u8] = Box::leak(Box::new(value.to_le_bytes()));
    Command::NdRange(NdRange {
        queue,
        event: 0,
        kernel,
        work_dim: 1,
        offset: [0; 3],
        global: [1, 0, 0],
        local: None,
        args: vec![
            KernelArg::Mem(buffer),
            KernelArg::Bytes(n),
            KernelArg::Bytes(value),
        ],
    })
}

/// Context 1 on `devices`, a queue per device (ids 10, 11, …), int buffers 20 and 21,
/// program 30 with kernels `slow` (31) and `copy` (32).
fn setup(c: &mut Client, devices: &[u32]) {
    ok(
        c,
        Request::CreateContext {
            id: 1,
            devices: devices.to_vec(),
        },
    );
    for (i, &device) in devices.iter().enumerate() {
        ok(
            c,
            Request::CreateQueue {
                id: 10 + i as u64,
                context: 1,
                device,
                properties: 0,
            },
        );
    }
    for id in [20, 21] {
        ok(
            c,
            Request::CreateBuffer {
                id,
                context: 1,
                flags: 1,
                size: 4,
                data: &[0; 4],
            },
        );
    }
    ok(
        c,
        Request::CreateProgramWithSource {
            id: 30,
            context: 1,
            source: SRC,
        },
    );
    ok(
        c,
        Request::BuildProgram {
            program: 30,
            devices: vec![],
            options: b"",
        },
    );
    for (id, name) in [(31, &b"slow"[..]), (32, b"copy")] {
        ok(
            c,
            Request::CreateKernel {
                id,
                program: 30,
                name,
            },
        );
    }
}

/// A service with two devices, a client of it and the devices' indices; `None` (after
/// saying why) without an OpenCL runtime or a second device.
fn two_device_service() -> Option<(ServiceHandle, Registry, Client, Vec<u32>)> {
    two_devices();
    let (svc, registry) = service(ServiceConfig::default())?;
    let client = Client::connect(svc.local_addr()).unwrap();
    let devices = client.info.1.first().cloned().unwrap_or_default();
    if devices.len() < 2 {
        common::missing_prerequisite("the OpenCL runtime offers one device only");
        return None;
    }
    Some((svc, registry, client, devices))
}

/// Another client, whose task of `n` rounds on `device` is running (on an idle device it
/// runs at once) when this returns; its `TaskDone` will carry the returned id.
fn start_hog(svc: &ServiceHandle, device: u32, n: i32) -> (Client, u64) {
    let mut hog = Client::connect(svc.local_addr()).unwrap();
    setup(&mut hog, &[device]);
    hog.send(&Request::enqueue(vec![slow(10, 31, 20, n, 1)]));
    let task = hog.send(&Request::Flush);
    std::thread::sleep(Duration::from_millis(20));
    (hog, task)
}

#[test]
fn tasks_on_two_devices_run_in_flush_order() {
    let Some((svc, _registry, mut a, devices)) = two_device_service() else {
        return;
    };
    // Another client keeps device 0 busy for a while.
    let (_hog, _) = start_hog(&svc, devices[0], 100_000_000);
    setup(&mut a, &devices[..2]);
    // Task 1, device 0 (queued behind the hog): buffer 20 = 42.
    a.send(&Request::enqueue(vec![slow(10, 31, 20, 10, 42)]));
    let first = a.send(&Request::Flush);
    // Task 2, device 1 (idle): buffer 21 = buffer 20, then read it.
    a.send(&Request::enqueue(vec![
        Command::NdRange(NdRange {
            queue: 11,
            event: 0,
            kernel: 32,
            work_dim: 1,
            offset: [0; 3],
            global: [1, 0, 0],
            local: None,
            args: vec![KernelArg::Mem(20), KernelArg::Mem(21)],
        }),
        Command::Read {
            queue: 11,
            event: 0,
            buffer: 21,
            offset: 0,
            size: 4,
            token: 1,
        },
    ]));
    let second = a.send(&Request::Flush);
    let mut done = Vec::new();
    let mut value = None;
    while done.len() < 2 {
        match a.read_frame() {
            (id, Frame::TaskDone(status, _)) => {
                assert_eq!(status, cl::CL_SUCCESS);
                done.push(id);
            }
            (id, Frame::ReadData(_, data)) if id == second => {
                value = Some(i32::from_le_bytes(data[..4].try_into().unwrap()));
            }
            _ => panic!("unexpected frame"),
        }
    }
    assert_eq!(done, [first, second], "tasks completed out of order");
    assert_eq!(
        value,
        Some(42),
        "task 2 ran before task 1 on the other device"
    );
}

#[test]
fn a_task_on_two_devices_runs_while_another_client_uses_one_of_them() {
    let Some((svc, _registry, mut a, devices)) = two_device_service() else {
        return;
    };
    // Another client's long task runs on device 1 (the task below must take device 1
    // too once that task is over, and give both devices back; PoCL runs one kernel at a
    // time, so the order of the answers cannot show more).
    let (mut hog, hog_task) = start_hog(&svc, devices[1], 20_000_000);
    setup(&mut a, &devices[..2]);
    let read = |queue, buffer, token| Command::Read {
        queue,
        event: 0,
        buffer,
        offset: 0,
        size: 4,
        token,
    };
    let (status, _, reads) = a.task(vec![
        slow(10, 31, 20, 10, 5),
        slow(11, 31, 21, 10, 6),
        read(10, 20, 1),
        read(11, 21, 2),
    ]);
    assert_eq!(status, cl::CL_SUCCESS);
    assert_eq!(
        reads,
        [
            (1, 5i32.to_le_bytes().to_vec()),
            (2, 6i32.to_le_bytes().to_vec())
        ]
    );
    let (id, frame) = hog.read_frame();
    assert!(matches!(frame, Frame::TaskDone(0, _)) && id == hog_task);
    // Both devices are free again: single-device tasks on each still run.
    for (queue, buffer) in [(10, 20), (11, 21)] {
        let (status, _, _) = a.task(vec![slow(queue, 31, buffer, 10, 7)]);
        assert_eq!(status, cl::CL_SUCCESS);
    }
}

/// Admits tenant `one` to the first device and `both` to every device (whatever their
/// token); remembers the device names it was asked about and the refused devices it
/// was told of.
#[derive(Debug, Default)]
struct FirstDeviceGate {
    names: std::sync::Mutex<Vec<String>>,
    refused: std::sync::Mutex<Vec<(String, u32)>>,
}

impl Gate for FirstDeviceGate {
    fn admit(
        &self,
        _caller: &Caller,
        tenant: &str,
        _token: &str,
        devices: &[String],
    ) -> Result<Admission, String> {
        *self.names.lock().unwrap() = devices.to_vec();
        let devices = match tenant {
            "one" => DeviceMask::from_fn(devices.len(), |i| i == 0),
            "both" => DeviceMask::from_fn(devices.len(), |_| true),
            _ => return Err(format!("no session for `{tenant}`")),
        };
        Ok(Admission {
            tenant: tenant.to_string(),
            devices,
            memory: None,
        })
    }

    fn refused_device(&self, _caller: &Caller, tenant: &str, device: u32) {
        self.refused
            .lock()
            .unwrap()
            .push((tenant.to_string(), device));
    }
}

/// Every request that names a device, naming `device`, from a session that holds
/// context 1 (on its own device 0), program 30 and kernel 31: their statuses.
fn device_requests(c: &mut Client, device: u32) -> Vec<(&'static str, i32)> {
    let binary: &[u8] = b"not a binary";
    let requests = [
        (
            "GetDeviceInfo",
            Request::GetDeviceInfo {
                device,
                param: cl::CL_DEVICE_NAME,
            },
        ),
        (
            "CreateContext",
            Request::CreateContext {
                id: 50,
                devices: vec![device],
            },
        ),
        (
            "CreateContext (mixed)",
            Request::CreateContext {
                id: 51,
                devices: vec![0, device],
            },
        ),
        (
            "CreateQueue",
            Request::CreateQueue {
                id: 52,
                context: 1,
                device,
                properties: 0,
            },
        ),
        (
            "CreateProgramWithBinary",
            Request::CreateProgramWithBinary {
                id: 53,
                context: 1,
                binaries: vec![(device, binary)],
            },
        ),
        (
            "BuildProgram",
            Request::BuildProgram {
                program: 30,
                devices: vec![device],
                options: b"",
            },
        ),
        (
            "CompileProgram",
            Request::CompileProgram {
                program: 30,
                devices: vec![device],
                options: b"",
                headers: vec![],
            },
        ),
        (
            "LinkProgram",
            Request::LinkProgram {
                id: 54,
                context: 1,
                devices: vec![device],
                options: b"",
                inputs: vec![30],
            },
        ),
        (
            "GetProgramBuildInfo",
            Request::GetProgramBuildInfo {
                program: 30,
                device,
                param: cl::CL_PROGRAM_BUILD_STATUS,
            },
        ),
        (
            "GetKernelWorkGroupInfo",
            Request::GetKernelWorkGroupInfo {
                kernel: 31,
                device,
                param: cl::CL_KERNEL_WORK_GROUP_SIZE,
            },
        ),
    ];
    requests
        .iter()
        .map(|(name, r)| (*name, c.call(r).0))
        .collect()
}

#[test]
fn a_session_sees_and_uses_only_the_devices_of_its_admission() {
    let Some((svc, _registry, _client, devices)) = two_device_service() else {
        return;
    };
    assert_eq!(devices, [0, 1], "PoCL's two devices, node-wide 0 and 1");
    drop(svc);
    for isolation in [
        Isolation::InProcess,
        Isolation::PerSession,
        Isolation::Shared,
    ] {
        let gate = std::sync::Arc::new(FirstDeviceGate::default());
        let config = ServiceConfig {
            isolation,
            runtime_program: Some(env!("CARGO_BIN_EXE_netaccel-ocl-service").into()),
            runtime_spares: 1,
            gate: Some(gate.clone()),
            ..ServiceConfig::default()
        };
        let (svc, _registry) = service(config).expect("the runtime was there a moment ago");
        let addr = svc.local_addr();
        let mut both = Client::connect_as(addr, b"", "both", "").unwrap();
        assert_eq!(both.info.1, vec![vec![0, 1]], "{isolation:?}");
        assert_eq!(
            gate.names.lock().unwrap().len(),
            2,
            "the gate knows both devices"
        );
        setup(&mut both, &[0, 1]);
        let mut one = Client::connect_as(addr, b"", "one", "").unwrap();
        assert_eq!(one.info.1, vec![vec![0]], "{isolation:?}: only device 0");
        setup(&mut one, &[0]);
        // Device 1 is never the session's, however a request names it.
        for (request, status) in device_requests(&mut one, 1) {
            assert_eq!(status, cl::CL_INVALID_DEVICE, "{isolation:?}: {request}");
        }
        // A device index past the node's is refused the same way.
        for (request, status) in device_requests(&mut one, 7) {
            assert_eq!(
                status,
                cl::CL_INVALID_DEVICE,
                "{isolation:?}: {request} of 7"
            );
        }
        // The gate hears of device 1 once (a runtime process's report comes through
        // its log, a moment later); of device 7, which is no device, never.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while gate.refused.lock().unwrap().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "{isolation:?}: no refusal"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        let refused = gate.refused.lock().unwrap().clone();
        assert_eq!(refused, [("one".to_string(), 1)], "{isolation:?}");
        // The session's own device works, and so does device 1 for `both`.
        let (status, _, _) = one.task(vec![slow(10, 31, 20, 10, 3)]);
        assert_eq!(status, cl::CL_SUCCESS, "{isolation:?}");
        let info = |c: &mut Client, device| {
            c.call(&Request::GetDeviceInfo {
                device,
                param: cl::CL_DEVICE_NAME,
            })
            .0
        };
        assert_eq!(info(&mut one, 0), cl::CL_SUCCESS);
        assert_eq!(info(&mut both, 1), cl::CL_SUCCESS);
        let (status, _, _) = both.task(vec![slow(11, 31, 21, 10, 4)]);
        assert_eq!(status, cl::CL_SUCCESS, "{isolation:?}");
    }
}
