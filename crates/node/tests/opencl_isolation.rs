//! The node's default: remote OpenCL clients' kernels run in runtime processes of their
//! own. Hostile kernels (stores far out of bounds, a store through a null pointer, a
//! trap, an endless loop) end their own client's session; the node stays up, its HTTP
//! clients and the device's other OpenCL client keep getting correct results, the
//! crash is in the log and in /metrics. (With `opencl_isolation = "none"` the first of
//! these kernels kills the node.) SIGTERM drains the runtime processes; SIGKILL of the
//! node takes them with it.

mod common;
#[path = "../../ocl-remote/tests/common/mod.rs"]
mod ocl;

use std::io::Read;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{free_addr, TestNode};
use ocl::{inc, read_cmd, Client, Frame};
use ocl_remote::cl;
use ocl_remote::proto::{Command, KernelArg, NdRange, Request};

fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

fn metrics_sum(node: &TestNode, prefix: &str) -> f64 {
    let text = ureq::get(&node.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn http_upper(node: &TestNode) {
    let body = ureq::post(&node.url("/v1/fn/to_uppercase"))
        .send_bytes(b"still here")
        .expect("the node answers HTTP")
        .into_string()
        .unwrap();
    assert_eq!(body, "STILL HERE");
}

/// Runs `round`th increment of the bystander's buffer and checks all of it.
fn bystander_round(c: &mut Client, round: i32) {
    let (status, _, reads) = c.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    for i in 0..16 {
        let v = i32::from_le_bytes(reads[0].1[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(v, round, "bystander int {i} after {round} rounds");
    }
}

/// Builds kernel `k` of `source` on a 64-byte buffer (ints 0, 1, 0, ...), runs it and
/// returns whether the connection ended instead of answering, and the buffer's
/// shared-memory region (empty if none).
fn run_hostile(addr: SocketAddr, source: &[u8]) -> (bool, String) {
    let mut c = Client::connect_with(addr, &ocl_remote::shm::host_id()).expect("connects");
    let device = c.info.1[0][0];
    c.setup_context();
    let mut data = [0u8; 64];
    data[4] = 1;
    assert_eq!(
        c.call(&Request::CreateQueue {
            id: 2,
            context: 1,
            device,
            properties: 0
        })
        .0,
        0
    );
    let (status, region) = c.call(&Request::CreateBuffer {
        id: 3,
        context: 1,
        flags: cl::CL_MEM_READ_WRITE | cl::CL_MEM_COPY_HOST_PTR,
        size: 64,
        data: &data,
    });
    assert_eq!(status, 0);
    for request in [
        Request::CreateProgramWithSource {
            id: 4,
            context: 1,
            source,
        },
        Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b"",
        },
        Request::CreateKernel {
            id: 5,
            program: 4,
            name: b"k",
        },
    ] {
        assert_eq!(c.call(&request).0, 0, "{request:?}");
    }
    c.send(&Request::enqueue(vec![Command::NdRange(NdRange {
        queue: 2,
        event: 0,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [1, 0, 0],
        local: None,
        args: vec![KernelArg::Mem(3)],
    })]));
    c.send(&Request::Flush);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = Vec::new();
    let ended = match c.stream.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    let region = String::from_utf8_lossy(&region)
        .trim_start_matches('/')
        .to_string();
    (ended, region)
}

const HOSTILE: &[(&str, &[u8], &str)] = &[
    (
        "out-of-bounds stores over 1 TiB",
        b"__kernel void k(__global int *v) {
            for (long i = 0; i < (1L << 38); i += 1024) v[i * (1 + v[0])] = (int)i;
        }",
        "died of SIGSEGV",
    ),
    (
        "a store through a null pointer",
        b"__kernel void k(__global int *v) { *(__global int *)(size_t)v[0] = 42; }",
        "died of SIGSEGV",
    ),
    (
        "a trap",
        b"__kernel void k(__global int *v) { if (v[1] == 1) __builtin_trap(); v[0] = 1; }",
        "died of SIGILL",
    ),
    (
        "an endless loop",
        b"__kernel void k(__global int *v) { while (v[1] == 1) v[0]++; }",
        "ran longer than kernel_time_max",
    ),
];

#[test]
fn hostile_kernels_end_their_own_session_and_the_node_serves_on() {
    if !common::opencl_runtime_present() {
        return;
    }
    let (node, ocl_addr) = TestNode::start_logging_with(
        || {
            let ocl_addr = free_addr();
            (
                format!("opencl = \"{ocl_addr}\"\nopencl_kernel_time_ms = 1000\n"),
                ocl_addr,
            )
        },
        &[],
    );
    let mut bystander = Client::connect(ocl_addr).expect("the node shares its devices");
    bystander.setup(0);
    let mut round = 0;
    for (what, source, logged) in HOSTILE {
        let (ended, region) = run_hostile(ocl_addr, source);
        assert!(ended, "{what}: the hostile client's connection should end");
        assert!(
            eventually(Duration::from_secs(10), || node.log().contains(logged)),
            "{what}: the log should say {logged:?}:\n{}",
            node.log()
        );
        assert!(
            region.is_empty()
                || eventually(Duration::from_secs(10), || !std::path::Path::new(
                    "/dev/shm"
                )
                .join(&region)
                .exists()),
            "{what}: region {region} left behind"
        );
        http_upper(&node);
        round += 1;
        bystander_round(&mut bystander, round);
    }
    assert_eq!(
        metrics_sum(&node, "netaccel_ocl_runtime_crashes_total"),
        3.0
    );
    assert_eq!(
        metrics_sum(&node, "netaccel_ocl_runtime_kernel_timeouts_total"),
        1.0
    );
    assert_eq!(metrics_sum(&node, "netaccel_ocl_clients_connected"), 1.0);
}

/// The runtime processes the node `pid` started (its children that are alive).
fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                // pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
                    == Some(pid)
                    && !rest_state_is_zombie(&stat)
            })
        })
        .collect()
}

fn rest_state_is_zombie(stat: &str) -> bool {
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        == Some("Z")
}

/// A kernel slow enough that the test can signal the node while it runs.
const SPIN: &[u8] = b"__kernel void spin(__global float *v, int rounds) {
    size_t i = get_global_id(0); float x = v[i];
    for (int r = 0; r < rounds; r++) x = x * 0.999f + 0.5f;
    v[i] = x;
}";

#[test]
fn sigterm_drains_runtime_processes_and_sigkill_takes_them_along() {
    if !common::opencl_runtime_present() {
        return;
    }
    // SIGTERM: the task running still answers, the session closes, the runtime
    // process ends and its shared memory is gone, the node exits 0.
    let (mut node, ocl_addr) = TestNode::start_with(|| {
        let ocl_addr = free_addr();
        (format!("opencl = \"{ocl_addr}\"\n"), ocl_addr)
    });
    let mut c = Client::connect_with(ocl_addr, &ocl_remote::shm::host_id()).expect("connects");
    let device = c.info.1[0][0];
    c.setup_context();
    let floats: u64 = 1 << 20;
    let mut region = Vec::new();
    for request in [
        Request::CreateQueue {
            id: 2,
            context: 1,
            device,
            properties: 0,
        },
        Request::CreateBuffer {
            id: 3,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size: floats * 4,
            data: &[],
        },
        Request::CreateProgramWithSource {
            id: 4,
            context: 1,
            source: SPIN,
        },
        Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b"",
        },
        Request::CreateKernel {
            id: 5,
            program: 4,
            name: b"spin",
        },
    ] {
        let (status, payload) = c.call(&request);
        assert_eq!(status, 0, "{request:?}");
        if matches!(request, Request::CreateBuffer { .. }) {
            region = payload;
        }
    }
    let region = std::path::Path::new("/dev/shm")
        .join(String::from_utf8_lossy(&region).trim_start_matches('/'));
    assert!(
        region.is_file(),
        "the same-host buffer should be in shared memory"
    );
    let runtimes = children_of(node.pid());
    assert!(!runtimes.is_empty(), "no runtime process runs");
    // Long enough (about 2 s on PoCL here) to be seen by the busy gauge, which the
    // node samples every 250 ms: at 400 rounds (0.18 s) only a flush held back by the
    // test client's Nagle delay (40 ms) let the gauge catch the task.
    let rounds = 4000i32.to_le_bytes();
    c.send(&Request::enqueue(vec![Command::NdRange(NdRange {
        queue: 2,
        event: 0,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [floats, 0, 0],
        local: None,
        args: vec![KernelArg::Mem(3), KernelArg::Bytes(&rounds)],
    })]));
    let flush = c.send(&Request::Flush);
    assert!(
        eventually(Duration::from_secs(20), || metrics_sum(
            &node,
            "netaccel_ocl_runtime_tasks_running"
        ) >= 1.0),
        "the task never reached the device"
    );
    let status = node.terminate();
    assert!(status.success(), "the node exited with {status}");
    match c.read_frame() {
        (id, Frame::TaskDone(status, _)) if id == flush => assert_eq!(status, cl::CL_SUCCESS),
        (id, _) => panic!("expected the task's result, got a frame for {id}"),
    }
    let mut rest = Vec::new();
    let read = c.stream.read_to_end(&mut rest);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "still open: {read:?}"
    );
    assert!(!region.exists(), "{} left behind", region.display());
    for pid in runtimes {
        // SAFETY: signal 0 only checks that the process exists.
        assert!(
            unsafe { libc::kill(pid, 0) != 0 },
            "runtime process {pid} outlived the node: {:?} {:?}",
            std::fs::read_to_string(format!("/proc/{pid}/stat")),
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        );
    }

    // SIGKILL: the node cannot drain; its runtime processes die with it.
    let (mut node, _) = TestNode::start_with(|| {
        let ocl_addr = free_addr();
        (format!("opencl = \"{ocl_addr}\"\n"), ocl_addr)
    });
    let runtimes = children_of(node.pid());
    assert!(!runtimes.is_empty(), "no runtime process runs");
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    for pid in runtimes {
        assert!(
            eventually(Duration::from_secs(10), || {
                // SAFETY: as above.
                let gone = unsafe { libc::kill(pid, 0) != 0 };
                gone || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| rest_state_is_zombie(&s))
            }),
            "runtime process {pid} outlived the killed node"
        );
    }
}

/// Runs `cmd` to its end within `within`, or kills it and fails the test.
fn run_bounded(mut cmd: std::process::Command, within: Duration) -> (bool, String) {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the test program");
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.success(), format!("{out}{err}[{status}]"));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not end within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn hostile_programs_through_the_icd_get_errors_while_a_bystander_program_runs() {
    if !common::opencl_runtime_present() {
        return;
    }
    let (node, ocl_addr) = TestNode::start_with(|| {
        let ocl_addr = free_addr();
        (
            format!("opencl = \"{ocl_addr}\"\nopencl_kernel_time_ms = 1000\n"),
            ocl_addr,
        )
    });
    let common::IcdProgram { exe, vendors } = match common::icd_program(&node.dir, "hostile") {
        Ok(program) => program,
        Err(why) => {
            ocl::missing_prerequisite(why);
            return;
        }
    };
    let program = |args: &[&str]| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(args)
            .env("OCL_ICD_VENDORS", &vendors)
            .env(ocl_remote::NODES_ENV, ocl_addr.to_string());
        cmd
    };

    // A well-behaved program of the same device runs round after round meanwhile.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bystander = {
        let stop = std::sync::Arc::clone(&stop);
        let good = program(&["good", "20"]);
        let (exe, envs): (std::path::PathBuf, Vec<_>) = (
            good.get_program().into(),
            good.get_envs()
                .map(|(k, v)| (k.to_owned(), v.unwrap().to_owned()))
                .collect(),
        );
        std::thread::spawn(move || {
            let mut runs = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) || runs.is_empty() {
                let mut cmd = std::process::Command::new(&exe);
                cmd.args(["good", "20"]).envs(envs.iter().cloned());
                runs.push(run_bounded(cmd, Duration::from_secs(120)));
            }
            runs
        })
    };
    for kind in ["oob", "null", "trap", "loop"] {
        let (ok, output) = run_bounded(program(&[kind]), Duration::from_secs(120));
        assert!(ok, "{kind}: the hostile program itself failed: {output}");
        let status: i32 = output
            .lines()
            .find_map(|l| l.strip_prefix("finish: "))
            .unwrap_or_else(|| panic!("{kind}: no status in {output}"))
            .parse()
            .unwrap();
        // The ICD's answer to a lost connection.
        assert_eq!(
            status,
            cl::CL_OUT_OF_RESOURCES,
            "{kind}: clFinish should fail as the connection is lost"
        );
        http_upper(&node);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for (ok, output) in bystander.join().unwrap() {
        assert!(ok && output.starts_with("good: ok"), "bystander: {output}");
    }
}

#[test]
fn a_node_started_after_one_was_killed_removes_its_shared_memory() {
    if !common::opencl_runtime_present() {
        return;
    }
    // A same-host session with a buffer in shared memory, created by a runtime process.
    let (mut node, ocl_addr) = TestNode::start_with(|| {
        let ocl_addr = free_addr();
        (format!("opencl = \"{ocl_addr}\"\n"), ocl_addr)
    });
    let mut c = Client::connect_with(ocl_addr, &ocl_remote::shm::host_id()).expect("connects");
    c.setup_context();
    let (status, name) = c.call(&Request::CreateBuffer {
        id: 3,
        context: 1,
        flags: cl::CL_MEM_READ_WRITE,
        size: 1 << 16,
        data: &[],
    });
    assert_eq!(status, 0);
    let region = std::path::Path::new("/dev/shm")
        .join(String::from_utf8_lossy(&name).trim_start_matches('/'));
    assert!(region.is_file(), "the buffer should be in shared memory");
    let runtimes = children_of(node.pid());
    // SIGKILL: neither the node nor its runtime processes (which die with it) can
    // unlink anything.
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    for pid in runtimes {
        assert!(
            eventually(Duration::from_secs(10), || {
                // SAFETY: signal 0 only checks that the process exists.
                let gone = unsafe { libc::kill(pid, 0) != 0 };
                gone || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| rest_state_is_zombie(&s))
            }),
            "runtime process {pid} outlived the killed node"
        );
    }
    assert!(
        region.exists(),
        "the killed session's region should still be there (or this test shows nothing)"
    );
    drop(c);
    // The next node on the host removes what the killed one left.
    let _next = TestNode::start(&format!("opencl = \"{}\"\n", free_addr()));
    assert!(!region.exists(), "{} left behind", region.display());
}

#[test]
fn runtime_processes_log_json_lines_through_the_node() {
    if !common::opencl_runtime_present() {
        return;
    }
    let (node, ocl_addr) = TestNode::start_logging_with(
        || {
            let ocl_addr = free_addr();
            (
                format!("opencl = \"{ocl_addr}\"\nlog_format = \"json\"\n"),
                ocl_addr,
            )
        },
        &[],
    );
    // A client of another host (its connection goes to a runtime process as it is)
    // that sends garbage after its Hello: the runtime process's session logs why it
    // closed the connection, on its stderr.
    let mut c = Client::connect(ocl_addr).expect("connects");
    let runtimes = children_of(node.pid());
    std::io::Write::write_all(&mut c.stream, &[0xA5; 64]).unwrap();
    let mut rest = Vec::new();
    let _ = c.stream.read_to_end(&mut rest);
    // A crash: the node's own line about it.
    let (ended, _) = run_hostile(
        ocl_addr,
        b"__kernel void k(__global int *v) { *(__global int *)(size_t)v[0] = 42; }",
    );
    assert!(ended);
    let parsed = |log: &str| -> Vec<serde_json::Value> {
        log.lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{log}"))
            })
            .collect()
    };
    let forwarded = |v: &serde_json::Value| {
        v["target"] == "ocl_remote::runtime"
            && v["fields"]["isolation"] == "session"
            && v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("client connection closed"))
            && v["fields"]["pid"]
                .as_i64()
                .is_some_and(|p| runtimes.contains(&(p as i32)))
    };
    let crash = |v: &serde_json::Value| {
        v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("died of SIGSEGV"))
            && v["fields"]["pid"].is_i64()
            && v["level"] == "WARN"
            && v["target"] == "ocl_remote::service::isolate"
    };
    assert!(
        eventually(Duration::from_secs(10), || {
            let lines = parsed(&node.log());
            lines.iter().any(forwarded) && lines.iter().any(crash)
        }),
        "no runtime process line or crash line in the node's JSON log:\n{}",
        node.log()
    );
    for line in parsed(&node.log()) {
        for field in ["timestamp", "level", "target"] {
            assert!(line[field].is_string(), "{field} missing in {line}");
        }
    }
}

/// Without runtime processes (`opencl_isolation = "none"`) the sessions run in the
/// node's process, and their lines are the node's events too: a JSON-format node
/// writes nothing but JSON (they were plain `ocl-remote: …` lines on its stderr).
#[test]
fn in_process_sessions_log_json_lines_too() {
    if !common::opencl_runtime_present() {
        return;
    }
    let (node, ocl_addr) = TestNode::start_logging_with(
        || {
            let ocl_addr = free_addr();
            (
                format!(
                    "opencl = \"{ocl_addr}\"\nopencl_isolation = \"none\"\nlog_format = \"json\"\n"
                ),
                ocl_addr,
            )
        },
        &[],
    );
    // A client that sends garbage after its Hello: its session says why it closed it.
    let mut c = Client::connect(ocl_addr).expect("connects");
    std::io::Write::write_all(&mut c.stream, &[0xA5; 64]).unwrap();
    let mut rest = Vec::new();
    let _ = c.stream.read_to_end(&mut rest);
    let closed = |v: &serde_json::Value| {
        v["target"] == "ocl_remote::service"
            && v["level"] == "WARN"
            && v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("client connection closed"))
    };
    let lines = || -> Vec<serde_json::Value> {
        let log = node.log();
        log.lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{log}"))
            })
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(10), || lines().iter().any(closed)),
        "no session line in the node's JSON log:\n{}",
        node.log()
    );
}
