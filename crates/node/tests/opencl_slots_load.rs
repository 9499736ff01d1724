//! OpenCL slots under load: reconfiguration while clients call (no call lost, none
//! run on the wrong kernel, the swap time reported), and one device used at once by
//! slot calls and a remote OpenCL client (all results correct, each keeps at least
//! [`STARVED`] of its throughput alone, the device's busy seconds count both): one caller
//! against one closed-loop program, a remote program that keeps tasks in flight
//! against a slot caller, and many slot callers against one program.
//!
//! The tests take turns (`LOAD`): each measures rates alone and shared, which another
//! test's load on the same cores would skew.
//!
//! Without an OpenCL platform the tests skip (and fail with `CI=true`).

mod common;
#[path = "../../ocl-remote/tests/common/mod.rs"]
mod ocl;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use ocl_remote::cl;
use ocl_remote::proto::{Command, KernelArg, NdRange, Queued, Request};

/// Held by each test while it runs (see the module doc).
static LOAD: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn take_turn() -> std::sync::MutexGuard<'static, ()> {
    LOAD.lock().unwrap_or_else(|p| p.into_inner())
}

fn programs_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("netaccel-oclload-{name}-{}", std::process::id()))
}

fn ocl_device(slots: &str, programs: &std::path::Path) -> String {
    format!(
        "opencl_program_dir = \"{}\"\n[[devices]]\nname = \"ocl0\"\nbackend = \"opencl\"\nplatform = \"Portable Computing Language\"\nslots = [{slots}]\n",
        programs.display()
    )
}

/// POST on a keep-alive agent: status and body.
fn post(agent: &ureq::Agent, url: &str, body: &[u8]) -> (u16, Vec<u8>) {
    match agent.post(url).send_bytes(body) {
        Ok(resp) => {
            let status = resp.status();
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut resp.into_reader(), &mut out).unwrap();
            (status, out)
        }
        Err(ureq::Error::Status(code, resp)) => {
            (code, resp.into_string().unwrap_or_default().into_bytes())
        }
        Err(e) => panic!("transport error (a call lost?): {e}"),
    }
}

#[test]
fn reconfiguration_under_load_loses_no_call_and_runs_none_on_the_wrong_kernel() {
    if !opencl_runtime_present() {
        return;
    }
    let _turn = take_turn();
    let programs = programs_dir("reconfig");
    let node = TestNode::start(&ocl_device("\"to_uppercase\", \"echo\"", &programs));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..3u64)
        .map(|t| {
            let (stop, ok, refused) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&refused));
            let base = node.url("/v1/fn/");
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(20))
                    .build();
                let mut rng = Rng(t + 7);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let len = 1 + rng.below(300) as usize;
                    let payload: Vec<u8> = (0..len).map(|_| b'a' + rng.below(26) as u8).collect();
                    let upper = i % 2 == 0;
                    let name = if upper { "to_uppercase" } else { "echo" };
                    let (status, out) = post(&agent, &format!("{base}{name}"), &payload);
                    match status {
                        200 => {
                            let want = if upper {
                                payload.to_ascii_uppercase()
                            } else {
                                payload
                            };
                            assert_eq!(out, want, "{name} answered by the wrong kernel");
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        // Echo's only slot is loading or holds to_uppercase meanwhile.
                        503 | 404 => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!(
                            "{name}: unexpected {other}: {}",
                            String::from_utf8_lossy(&out)
                        ),
                    }
                }
            })
        })
        .collect();
    // Let the load build up, then swap slot 1 back and forth under it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while ok.load(Ordering::Relaxed) < 50 {
        assert!(Instant::now() < deadline, "no calls answered");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut swaps = Vec::new();
    for target in [
        "to_uppercase",
        "echo",
        "to_uppercase",
        "echo",
        "to_uppercase",
        "echo",
    ] {
        let before = ok.load(Ordering::Relaxed);
        let url = node.url("/v1/slots/1");
        let body = format!(r#"{{"accelerator":"{target}"}}"#);
        let (status, resp) = curl(&["-s", "-X", "PUT", "-d", &body, &url]);
        let doc: serde_json::Value = serde_json::from_slice(&resp).unwrap();
        assert_eq!(status, 200, "{doc}");
        assert_eq!(
            doc["cached"], true,
            "the built-ins' program was built at start: {doc}"
        );
        swaps.push(doc["reconfig_ms"].as_f64().unwrap());
        // Calls keep being answered between swaps.
        let deadline = Instant::now() + Duration::from_secs(20);
        while ok.load(Ordering::Relaxed) < before + 20 {
            assert!(
                Instant::now() < deadline,
                "calls stopped after swapping to {target}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("a client saw a wrong or lost answer");
    }
    eprintln!(
        "reconfiguration under load: {} calls answered, {} refused while echo had no slot, swaps {:?} ms",
        ok.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        swaps
    );
    let slots = node.get_json("/v1/slots");
    assert_eq!(slots[1]["accelerator"], "echo");
    let _ = std::fs::remove_dir_all(&programs);
}

/// An integer kernel that takes a while and leaves every value one higher.
const WORK: &[u8] = b"__kernel void work(__global int *v, int rounds) {
    size_t i = get_global_id(0);
    int x = v[i];
    for (int r = 0; r < rounds; r++) x = x * 1103515245 + 12345;
    v[i] = v[i] + 1 + (x == 0x7fffffff && rounds < 0);
}";
const WORK_ITEMS: u64 = 1 << 16;

/// A remote OpenCL client on the node's device: context 1, queue 2, buffer 3 of
/// zeros, program 4, kernel 5.
fn remote_client(addr: SocketAddr) -> ocl::Client {
    let mut c = ocl::Client::connect(addr).expect("the node shares its OpenCL device");
    let device = c.info.1[0][0];
    let ok = |c: &mut ocl::Client, r: Request<'_>| assert_eq!(c.call(&r).0, cl::CL_SUCCESS);
    ok(
        &mut c,
        Request::CreateContext {
            id: 1,
            devices: vec![device],
        },
    );
    ok(
        &mut c,
        Request::CreateQueue {
            id: 2,
            context: 1,
            device,
            properties: 0,
        },
    );
    let zeros = vec![0u8; (WORK_ITEMS * 4) as usize];
    ok(
        &mut c,
        Request::CreateBuffer {
            id: 3,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size: WORK_ITEMS * 4,
            data: &zeros,
        },
    );
    ok(
        &mut c,
        Request::CreateProgramWithSource {
            id: 4,
            context: 1,
            source: WORK,
        },
    );
    ok(
        &mut c,
        Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b"",
        },
    );
    let (status, _) = c.call(&Request::CreateKernel {
        id: 5,
        program: 4,
        name: b"work",
    });
    assert_eq!(status, cl::CL_SUCCESS);
    c
}

/// The kernel as one command of a task.
fn work_cmd(rounds: &[u8; 4]) -> Command<'_> {
    Command::NdRange(NdRange {
        queue: 2,
        event: 0,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [WORK_ITEMS, 0, 0],
        local: Some([64, 0, 0]),
        args: vec![KernelArg::Mem(3), KernelArg::Bytes(rounds)],
    })
}

/// Keeps `IN_FLIGHT` remote tasks (the kernel alone) flushed and unanswered until
/// `stop`, as a program that enqueues ahead of its results does; each must be answered
/// once, in order, and a last read must show every task run. Returns the task count.
fn remote_pipelined(c: &mut ocl::Client, done: &mut i32, stop: &AtomicBool) -> u64 {
    const IN_FLIGHT: usize = 8;
    let rounds = 100i32.to_le_bytes();
    let mut flying = std::collections::VecDeque::new();
    let mut n = 0;
    loop {
        while !stop.load(Ordering::Relaxed) && flying.len() < IN_FLIGHT {
            c.send(&Request::Enqueue {
                commands: vec![Queued::from(work_cmd(&rounds))],
            });
            flying.push_back(c.send(&Request::Flush));
        }
        let Some(id) = flying.pop_front() else {
            break;
        };
        match c.read_frame() {
            (got, ocl::Frame::TaskDone(status, _)) => {
                assert_eq!(got, id, "tasks answered once each, in order");
                assert_eq!(status, cl::CL_SUCCESS);
            }
            _ => panic!("unexpected frame"),
        }
        *done += 1;
        n += 1;
    }
    let (status, _, reads) = c.task(vec![ocl::read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    let values = i32s(&reads[0].1);
    assert!(
        values.iter().all(|&v| v == *done),
        "remote result wrong: {values:?} after {done} tasks"
    );
    n
}

/// Runs remote tasks (the kernel, then a read of the first 16 values) until `stop`;
/// every read must show the number of tasks run so far. Returns the task count.
fn remote_load(c: &mut ocl::Client, done: &mut i32, stop: &AtomicBool) -> u64 {
    let rounds = 100i32.to_le_bytes();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let (status, _, reads) = c.task(vec![work_cmd(&rounds), ocl::read_cmd(2, 3, 0)]);
        assert_eq!(status, cl::CL_SUCCESS);
        *done += 1;
        let values = i32s(&reads[0].1);
        assert!(
            values.iter().all(|&v| v == *done),
            "remote result wrong: {values:?} after {done} tasks"
        );
        n += 1;
    }
    n
}

/// Sends sobel calls until `stop`, checking each against the CPU kernel; returns the count.
fn slot_load(node_url: &str, image: &[u8], want: &[u8], stop: &AtomicBool) -> u64 {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .build();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let (status, out) = post(&agent, node_url, image);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
        assert!(out == want, "sobel result wrong");
        n += 1;
    }
    n
}

fn device_busy_seconds(node: &TestNode) -> f64 {
    let text = ureq::get(&node.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("netaccel_ocl_device_busy_seconds_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Runs `f` for `secs` seconds with a stop flag it watches.
fn for_secs<T: Send>(secs: f64, f: impl FnOnce(&AtomicBool) -> T + Send) -> (T, f64) {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|s| {
        let h = s.spawn(|| f(&stop));
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        let out = h.join().unwrap();
        (out, started.elapsed().as_secs_f64())
    })
}

#[test]
fn slot_calls_and_remote_opencl_share_one_device_fifo_and_both_progress() {
    if !opencl_runtime_present() {
        return;
    }
    let _turn = take_turn();
    let programs = programs_dir("shared");
    let (node, ocl_addr) = TestNode::start_logging_with(
        || {
            let ocl_addr = free_addr();
            let config = format!(
                // In-process: the FIFO is shared only with the runtime in the node's process.
                "opencl = \"{ocl_addr}\"\nopencl_isolation = \"none\"\nopencl_local_socket = false\n{}",
                ocl_device("\"sobel\"", &programs)
            );
            (config, ocl_addr)
        },
        &["--log-level", "info"],
    );
    assert!(
        node.log().contains("shared_with_remote_clients=true"),
        "{}",
        node.log()
    );
    let (w, h) = (512usize, 512usize);
    let image = Rng(3).bytes(w * h);
    let want = accel::reference::sobel(&image, w, h);
    let url = node.url(&format!("/v1/fn/sobel?width={w}&height={h}"));
    let mut client = remote_client(ocl_addr);
    let mut done = 0;
    // Warm both paths (kernel compilation per work-group size), each alone.
    let busy0 = device_busy_seconds(&node);
    for_secs(0.3, |stop| slot_load(&url, &image, &want, stop));
    let busy1 = device_busy_seconds(&node);
    assert!(
        busy1 > busy0,
        "slot calls count in the device's busy seconds"
    );
    for_secs(0.3, |stop| remote_load(&mut client, &mut done, stop));
    let busy2 = device_busy_seconds(&node);
    assert!(
        busy2 > busy1,
        "remote tasks count in the device's busy seconds"
    );

    let rates = alone_and_shared(
        2.0,
        &|stop| slot_load(&url, &image, &want, stop),
        &mut |stop| remote_load(&mut client, &mut done, stop),
    );
    let what = format!(
        "one device, two users (slot sobel {w}x{h}; device busy {:.2} s)",
        device_busy_seconds(&node)
    );
    assert_both_progress(&what, STARVED, rates);
    let _ = std::fs::remove_dir_all(&programs);
}

/// Rates (per second) of `slots` and `remote`, each alone for `phase` seconds in all,
/// and together for 1.5 `phase`: `[slots alone, slots shared, remote alone, remote
/// shared]`. The three run in turn in `ROUNDS` short rounds, so that what else the
/// host runs meanwhile weighs on the rates alone and shared alike. Each function runs
/// until the flag it is given is set and returns its count.
fn alone_and_shared(
    phase: f64,
    slots: &(dyn Fn(&AtomicBool) -> u64 + Sync),
    remote: &mut (dyn FnMut(&AtomicBool) -> u64 + Send),
) -> [f64; 4] {
    const ROUNDS: u32 = 4;
    let part = phase / f64::from(ROUNDS);
    // Counts and seconds of: slots alone, slots shared, remote alone, remote shared.
    let mut n = [0u64; 4];
    let mut secs = [0f64; 4];
    for _ in 0..ROUNDS {
        let (count, t) = for_secs(part, |stop| slots(stop));
        (n[0], secs[0]) = (n[0] + count, secs[0] + t);
        let (count, t) = for_secs(part, |stop| remote(stop));
        (n[2], secs[2]) = (n[2] + count, secs[2] + t);
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let (slot_both, remote_both) = std::thread::scope(|s| {
            let a = s.spawn(|| slots(&stop));
            let b = s.spawn(|| remote(&stop));
            std::thread::sleep(Duration::from_secs_f64(part * 1.5));
            stop.store(true, Ordering::Relaxed);
            (a.join().unwrap(), b.join().unwrap())
        });
        let t = started.elapsed().as_secs_f64();
        (n[1], secs[1]) = (n[1] + slot_both, secs[1] + t);
        (n[3], secs[3]) = (n[3] + remote_both, secs[3] + t);
    }
    std::array::from_fn(|i| n[i] as f64 / secs[i])
}

/// Each side keeps at least `floor` of its rate alone.
fn assert_both_progress(
    what: &str,
    floor: f64,
    [slot_alone, slot_both, remote_alone, remote_both]: [f64; 4],
) {
    eprintln!(
        "{what}: slot calls {slot_alone:.0}/s alone, {slot_both:.0}/s shared; \
         remote tasks {remote_alone:.0}/s alone, {remote_both:.0}/s shared"
    );
    assert!(
        slot_both >= floor * slot_alone,
        "{what}: slot calls starved: {slot_both:.0}/s vs {slot_alone:.0}/s alone"
    );
    assert!(
        remote_both >= floor * remote_alone,
        "{what}: remote tasks starved: {remote_both:.0}/s vs {remote_alone:.0}/s alone"
    );
}

/// What each side must keep of its rate alone when both use the device. The device's
/// time is shared fairly (each side gets about half of it while both keep it busy:
/// release builds keep 0.46 and 0.41, docs/opencl-slots.md), but on a CPU device the
/// remote kernels also take the cores a slot call's HTTP work needs, so on a loaded
/// 2-core host the rates kept fall to 0.2-0.3 at times (0.21, 0.24, 0.29 in runs at load
/// average 5-6, debug builds). The one FIFO that fair shares replaced gave the slot
/// caller 0.11-0.15 of its rate alone against a closed-loop program and 0.036 against
/// the pipelining one: these checks catch that, the figures the share. (Under the FIFO
/// the check said 0.3, and held only because the test client's Nagle delay throttled
/// the remote program to 23 tasks a second.)
const STARVED: f64 = 0.2;

#[test]
fn a_remote_client_with_tasks_in_flight_and_many_slot_callers_cannot_starve_each_other() {
    if !opencl_runtime_present() {
        return;
    }
    let _turn = take_turn();
    let programs = programs_dir("flows");
    let ocl_addr = free_addr();
    let node = TestNode::start(&format!(
        "opencl = \"{ocl_addr}\"\nopencl_isolation = \"none\"\nopencl_local_socket = false\n{}",
        ocl_device("\"sobel\", \"sobel\"", &programs)
    ));
    let (w, h) = (512usize, 512usize);
    let image = Rng(5).bytes(w * h);
    let want = accel::reference::sobel(&image, w, h);
    let url = node.url(&format!("/v1/fn/sobel?width={w}&height={h}"));
    let mut client = remote_client(ocl_addr);
    let mut done = 0;
    let one_caller = |stop: &AtomicBool| slot_load(&url, &image, &want, stop);
    // Warm both paths (kernel compilation per work-group size).
    for_secs(0.3, one_caller);
    for_secs(0.3, |stop| remote_load(&mut client, &mut done, stop));

    // The program keeps tasks queued on the device all the time.
    let rates = alone_and_shared(2.0, &one_caller, &mut |stop| {
        remote_pipelined(&mut client, &mut done, stop)
    });
    assert_both_progress(
        "a slot caller, a remote program with 8 tasks in flight",
        STARVED,
        rates,
    );

    // Four slot callers keep both sobel slots, and so the device, busy.
    let callers = |stop: &AtomicBool| {
        std::thread::scope(|s| {
            let each: Vec<_> = (0..4).map(|_| s.spawn(|| one_caller(stop))).collect();
            each.into_iter().map(|c| c.join().unwrap()).sum::<u64>()
        })
    };
    let rates = alone_and_shared(2.0, &callers, &mut |stop| {
        remote_load(&mut client, &mut done, stop)
    });
    assert_both_progress(
        "4 slot callers on 2 slots, a closed-loop remote program",
        STARVED,
        rates,
    );
    let _ = std::fs::remove_dir_all(&programs);
}
