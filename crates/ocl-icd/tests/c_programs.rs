//! Black-box test of the ICD: C programs built against `-lOpenCL` run once on the local
//! OpenCL platform and once through `libnetaccel_opencl.so` and a service started in this
//! process; their outputs must be byte-identical.
//!
//! Needs gcc, the OpenCL headers, the ICD loader and one OpenCL platform (PoCL); without
//! them the test says so and passes without checking anything, except in CI (`CI=true`),
//! where a missing prerequisite fails the test.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::missing_prerequisite;
use ocl_remote::service::{spawn, ServiceConfig, ServiceHandle};
use prometheus_client::registry::Registry;

struct Fixture {
    service: ServiceHandle,
    node: String,
    dir: PathBuf,
    vendors_local: PathBuf,
    vendors_net: PathBuf,
}

/// The cdylib cargo built with this test: `cargo test` leaves it in `deps/` beside the
/// test binary (`cargo build` also copies it one level up).
fn icd_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .expect("deps directory")
        .join("libnetaccel_opencl.so")
}

fn fixture(name: &str) -> Option<Fixture> {
    fixture_with(name, ServiceConfig::default())
}

/// A fixture whose service runs with `config`.
fn fixture_with(name: &str, config: ServiceConfig) -> Option<Fixture> {
    if Command::new("gcc").arg("--version").output().is_err() {
        missing_prerequisite("gcc not found");
        return None;
    }
    let local_icds: Vec<PathBuf> = std::fs::read_dir("/etc/OpenCL/vendors")
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| !p.ends_with("netaccel.icd"))
                .collect()
        })
        .unwrap_or_default();
    if local_icds.is_empty() {
        missing_prerequisite("no OpenCL platform installed (/etc/OpenCL/vendors is empty)");
        return None;
    }
    let service = match spawn(
        "127.0.0.1:0".parse().unwrap(),
        config,
        &mut Registry::default(),
    ) {
        Ok(s) if !s.device_names().is_empty() => s,
        Ok(_) => {
            missing_prerequisite("the OpenCL runtime has no device");
            return None;
        }
        Err(e) => {
            missing_prerequisite(&format!("no OpenCL runtime: {e}"));
            return None;
        }
    };
    let lib = icd_library();
    assert!(lib.exists(), "{} not built", lib.display());
    let dir = std::env::temp_dir().join(format!("netaccel-ocl-{name}-{}", std::process::id()));
    let vendors_local = dir.join("vendors-local");
    let vendors_net = dir.join("vendors-net");
    std::fs::create_dir_all(&vendors_local).unwrap();
    std::fs::create_dir_all(&vendors_net).unwrap();
    for icd in local_icds {
        std::fs::copy(&icd, vendors_local.join(icd.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        vendors_net.join("netaccel.icd"),
        format!("{}\n", lib.display()),
    )
    .unwrap();
    let node = service.local_addr().to_string();
    Some(Fixture {
        service,
        node,
        dir,
        vendors_local,
        vendors_net,
    })
}

fn build_c(fx: &Fixture, program: &str) -> PathBuf {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let exe = fx.dir.join(program);
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src_dir.join(format!("{program}.c")))
        .args(["-lOpenCL", "-lpthread"])
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc {program}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn remote_command(fx: &Fixture, exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("OCL_ICD_VENDORS", &fx.vendors_net)
        .env(ocl_remote::NODES_ENV, &fx.node);
    cmd
}

/// How long one run of a test program may take before it counts as hung.
const RUN_DEADLINE: Duration = Duration::from_secs(180);

/// Runs `cmd` to its end, or kills it at [`RUN_DEADLINE`] and fails the test: a program
/// that hangs (waiting forever in the ICD, say) fails instead of stalling the suite.
fn output(mut cmd: Command) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run test program");
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().unwrap()));
    let stderr = pipe(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + RUN_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for test program") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} still running after {RUN_DEADLINE:?}; stdout so far:\n{}",
                String::from_utf8_lossy(&stdout.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn check_output(what: &str, out: &std::process::Output) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{what} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.clone()
}

fn run_local(fx: &Fixture, exe: &Path) -> Vec<u8> {
    let mut cmd = Command::new(exe);
    cmd.env("OCL_ICD_VENDORS", &fx.vendors_local);
    let out = output(cmd);
    check_output(&format!("{} on the local platform", exe.display()), &out)
}

fn run_remote(fx: &Fixture, exe: &Path) -> Vec<u8> {
    let out = output(remote_command(fx, exe));
    check_output(&format!("{} through the node", exe.display()), &out)
}

/// Runs the program through the node with buffer data forced onto the socket.
fn run_remote_network(fx: &Fixture, exe: &Path) -> Vec<u8> {
    let mut cmd = remote_command(fx, exe);
    cmd.env("NETACCEL_OPENCL_SHM", "0");
    let out = output(cmd);
    check_output(
        &format!("{} through the node, network path", exe.display()),
        &out,
    )
}

fn compare(program: &str) {
    compare_with(program, ServiceConfig::default());
}

fn compare_with(program: &str, config: ServiceConfig) {
    let Some(fx) = fixture_with(program, config) else {
        return;
    };
    let exe = build_c(&fx, program);
    let local = String::from_utf8_lossy(&run_local(&fx, &exe)).into_owned();
    assert!(!local.is_empty());
    let shared = String::from_utf8_lossy(&run_remote(&fx, &exe)).into_owned();
    assert_eq!(
        local, shared,
        "{program}: output differs between local and remote (shared memory)"
    );
    let network = String::from_utf8_lossy(&run_remote_network(&fx, &exe)).into_owned();
    assert_eq!(
        local, network,
        "{program}: output differs between local and remote (network)"
    );
    wait_until_idle(&fx);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// After its clients are gone the node holds nothing for them.
fn wait_until_idle(fx: &Fixture) {
    // A task still running when its client went away finishes first.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fx.service.clients_connected() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fx.service.clients_connected(), 0, "clients still connected");
    assert_eq!(
        fx.service.client_buffer_bytes(),
        0,
        "buffer bytes not returned"
    );
    assert_eq!(fx.service.client_objects(), 0, "objects not released");
}

#[test]
fn vadd_is_identical_local_and_remote() {
    compare("vadd");
}

#[test]
fn to_uppercase_is_identical_local_and_remote() {
    compare("to_uppercase");
}

#[test]
fn sobel_is_identical_local_and_remote() {
    compare("sobel");
}

#[test]
fn matmul_with_local_memory_is_identical_local_and_remote() {
    compare("matmul");
}

#[test]
fn events_and_callbacks_are_identical_local_and_remote() {
    compare("events");
}

#[test]
fn map_unmap_fill_copy_are_identical_local_and_remote() {
    compare("map_unmap");
}

#[test]
fn programs_from_binary_and_build_logs_are_identical_local_and_remote() {
    compare("binary");
}

#[test]
fn separate_compilation_and_linking_are_identical_local_and_remote() {
    compare("compile_link");
}

#[test]
fn sub_buffers_are_identical_local_and_remote() {
    compare("subbuffer");
}

#[test]
fn user_events_are_identical_local_and_remote() {
    compare("user_events");
}

#[test]
fn application_threads_sharing_a_connection_are_identical_local_and_remote() {
    compare("threads");
}

#[test]
fn rectangular_transfers_are_identical_local_and_remote() {
    compare("rect");
}

#[test]
fn images_and_samplers_are_identical_local_and_remote() {
    compare("images");
}

/// Initial data larger than a frame may be (64 MiB) is created whole, on both paths;
/// with a node that holds at most 80 MiB of writes per task, a 100 MB buffer also needs
/// the ICD to send its data as more than one task.
#[test]
fn buffers_and_images_with_large_initial_data_are_identical_local_and_remote() {
    let config = ServiceConfig {
        pending_bytes_max: 80 << 20,
        ..ServiceConfig::default()
    };
    compare_with("big_create", config);
}

#[test]
fn objects_released_while_their_maps_are_in_flight_are_identical_local_and_remote() {
    compare("release_mapped");
}

#[test]
fn wait_lists_with_events_of_another_context_are_refused_identically_local_and_remote() {
    compare("wait_lists");
}

#[test]
fn writes_held_back_for_a_user_event_are_bounded() {
    let Some(fx) = fixture("held-bound") else {
        return;
    };
    let exe = build_c(&fx, "held_bound");
    let expected = "held write: 0\n\
                    write past the bound: CL_OUT_OF_HOST_MEMORY, event none\n\
                    small write behind: 0\n\
                    after the event: 524288 ones, 1000 twos, 523288 zeros\n";
    for shm in ["1", "0"] {
        let mut cmd = remote_command(&fx, &exe);
        cmd.env("NETACCEL_OPENCL_SHM", shm)
            .env("NETACCEL_OPENCL_HELD_BYTES_MAX", "1048576");
        let out = check_output(&format!("held_bound, shared memory {shm}"), &output(cmd));
        assert_eq!(
            String::from_utf8_lossy(&out),
            expected,
            "shared memory {shm}"
        );
    }
    wait_until_idle(&fx);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[test]
fn blocking_calls_from_an_event_callback_are_identical_local_and_remote() {
    compare("callback_blocking");
}

#[test]
fn a_thread_waiting_for_a_user_event_wakes_when_another_sets_it() {
    compare("user_event_wake");
}

/// The platform and device are OpenCL 3.0 ones: version queries, extension lists with
/// versions, property arrays, context destructors, launches of no work-item, kernels of
/// OpenCL C 3.0, and each optional feature supported or refused as OpenCL 3.0 requires
/// (the remote path presented OpenCL 1.2 before, and these answered CL_INVALID_VALUE).
#[test]
fn the_platform_is_an_opencl_3_0_platform_identically_local_and_remote() {
    compare("opencl30");
}

#[test]
fn newer_calls_returning_objects_work_or_set_their_error_code() {
    compare("newer_calls");
}

#[test]
fn memory_object_destructor_callbacks_are_identical_local_and_remote() {
    compare("destructor");
}

#[test]
fn kernel_argument_and_work_group_errors_come_from_the_calls_themselves() {
    compare("kernel_checks");
}

#[test]
fn host_access_flags_are_enforced_identically_local_and_remote() {
    compare("host_flags");
}

#[test]
fn maps_of_images_on_host_memory_are_that_memory_local_and_remote() {
    compare("image_host_map");
}

#[test]
fn out_of_order_queues_markers_and_cross_queue_waits_are_identical_local_and_remote() {
    compare("ooo_queues");
}

#[test]
fn programs_from_binaries_of_objects_and_libraries_link_identically_local_and_remote() {
    compare("link_binary");
}

#[test]
fn commands_waiting_for_a_failed_user_event_fail_identically_local_and_remote() {
    compare("user_event_error");
}

/// Reads of shared-memory buffers behind a user event that is not set return the buffer
/// as it is at their place in the queue, not as later commands of the held task leave it.
#[test]
fn reads_behind_an_unset_user_event_see_their_place_in_the_queue() {
    compare("gated_reads");
}

/// A command waiting for a user event that is not set holds back only what depends on it
/// (through wait lists, another queue, its in-order queue or a barrier): a blocking read
/// and `clFinish` on another queue return before the event is set, on the thread that
/// sets it afterwards; the held commands then run, or fail for an event set to an error.
/// Through the node the whole connection used to wait, and the program hung.
#[test]
fn commands_independent_of_an_unset_user_event_run_identically_local_and_remote() {
    compare("independent_queues");
}

/// Reads racing writes of other threads on one queue return what their place in the
/// queue says (profiling shows the places). Bounded to a few seconds; on the old ICD it
/// failed in about half the runs, so a run that passes proves little on its own.
#[test]
fn reads_racing_writes_of_other_threads_see_their_place_in_the_queue() {
    compare("racing_reads");
}

/// Maps for writing of objects the host may not read go through a scratch buffer on the
/// node; on an out-of-order queue they show what the commands they wait for left.
#[test]
fn maps_through_a_scratch_buffer_wait_for_their_wait_list_on_out_of_order_queues() {
    compare("map_scratch_order");
}

#[test]
fn images_on_buffers_share_the_buffers_storage_identically_local_and_remote() {
    compare("image1d_buffer");
}

/// The largest allocation advertised is made and nothing larger: the node presents the
/// device's own (or with a quota, the client's share of it) and holds to it (it
/// accepted larger buffers before, which the device's own bound allows).
#[test]
fn nothing_above_the_largest_allocation_is_made_identically_local_and_remote() {
    compare("max_alloc");
}

/// Issue 29: with the node's defaults a client is offered the device's own memory
/// sizes, and holds several large buffers at once, as natively (a default quota of
/// 1 GiB shrank them and hashcat refused to run).
#[test]
fn without_a_quota_the_device_memory_is_the_devices_own_identically_local_and_remote() {
    compare("device_memory");
}

/// Kernels see the version of the device the node presents, as natively they see the
/// device's own (`__OPENCL_VERSION__` and `__OPENCL_C_VERSION__` as the client's
/// options choose).
#[test]
fn kernels_compile_for_the_device_version_identically_local_and_remote() {
    compare("preprocessor");
}

#[test]
fn concurrent_clients_share_one_device_correctly() {
    let Some(fx) = fixture("concurrent") else {
        return;
    };
    let programs = ["vadd", "sobel", "matmul", "to_uppercase", "vadd", "events"];
    let mut expected = std::collections::HashMap::new();
    for p in programs {
        if !expected.contains_key(p) {
            let exe = build_c(&fx, p);
            expected.insert(p, (run_local(&fx, &exe), exe));
        }
    }
    let children: Vec<_> = programs
        .iter()
        .map(|p| {
            let child = remote_command(&fx, &expected[p].1)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn client");
            (*p, child)
        })
        .collect();
    for (p, child) in children {
        let out = child.wait_with_output().expect("wait for client");
        let stdout = check_output(p, &out);
        assert_eq!(
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&expected[p].0),
            "{p} differs"
        );
    }
    wait_until_idle(&fx);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

#[test]
fn client_killed_mid_task_leaves_the_node_healthy() {
    let Some(fx) = fixture("killed") else { return };
    let hog = build_c(&fx, "hog");
    let vadd = build_c(&fx, "vadd");
    let expected = run_local(&fx, &vadd);
    let mut child = remote_command(&fx, &hog)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn hog");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    assert!(fx.service.client_buffer_bytes() >= 16 << 20);
    std::thread::sleep(Duration::from_millis(100));
    child.kill().unwrap();
    child.wait().unwrap();
    wait_until_idle(&fx);
    // The device still serves other clients.
    assert_eq!(run_remote(&fx, &vadd), expected);
    wait_until_idle(&fx);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// Forwards TCP connections from a loopback port to `target` until `cut` is set, then
/// closes every connection it carries; the counter says how many of its pipes (two
/// per connection) are still open.
fn cutting_proxy(target: String) -> (String, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let cut = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&cut);
    let open = Arc::new(AtomicUsize::new(0));
    let pipes_open = Arc::clone(&open);
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = std::net::TcpStream::connect(&target) else {
                return;
            };
            let pipes = [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server, client),
            ];
            for (mut from, mut to) in pipes {
                let flag = Arc::clone(&flag);
                let pipes_open = Arc::clone(&pipes_open);
                pipes_open.fetch_add(1, Ordering::SeqCst);
                from.set_read_timeout(Some(Duration::from_millis(20)))
                    .unwrap();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    while !flag.load(Ordering::SeqCst) {
                        match from.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                if to.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => break,
                        }
                    }
                    let _ = from.shutdown(std::net::Shutdown::Both);
                    let _ = to.shutdown(std::net::Shutdown::Both);
                    pipes_open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        }
    });
    (addr, cut, open)
}

#[test]
fn a_lost_node_is_reported_to_the_context_callback() {
    let Some(fx) = fixture("node-lost") else {
        return;
    };
    let exe = build_c(&fx, "node_lost");
    let (proxy, cut, open) = cutting_proxy(fx.node.clone());
    // TCP through the proxy: no shared memory, so no switch to the node's local socket.
    let mut child = Command::new(&exe)
        .env("OCL_ICD_VENDORS", &fx.vendors_net)
        .env(ocl_remote::NODES_ENV, &proxy)
        .env("NETACCEL_OPENCL_SHM", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node_lost");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "user data without callback: CL_INVALID_VALUE\n");
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    cut.store(true, Ordering::SeqCst);
    // The connection is closed for sure before the program goes on (a loaded machine
    // once let its read through a proxy not yet cut after 200 ms).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while open.load(Ordering::SeqCst) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the proxy did not cut"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {rest}");
    assert!(
        rest.starts_with(
            "after the loss: read failed, finish failed\n\
             writes after the loss: 20 of 20 failed\n\
             callback called 1 time(s): netaccel: the connection to node "
        ),
        "{rest}"
    );
    wait_until_idle(&fx);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// pyopencl (from `python3-pyopencl`, or the interpreter named by `$PYTHON`) gives the
/// same results through the node as on the local platform.
#[test]
fn pyopencl_script_is_identical_local_and_remote() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let has_pyopencl = Command::new(&python)
        .args(["-c", "import pyopencl, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pyopencl {
        missing_prerequisite(&format!("{python} cannot import pyopencl and numpy"));
        return;
    }
    let Some(fx) = fixture("pyopencl") else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/saxpy.py");
    let run = |vendors: &Path, remote: bool| {
        let mut cmd = Command::new(&python);
        cmd.arg(&script).env("OCL_ICD_VENDORS", vendors);
        if remote {
            cmd.env(ocl_remote::NODES_ENV, &fx.node);
        }
        let out = cmd.output().expect("run python");
        String::from_utf8_lossy(&check_output("saxpy.py", &out)).into_owned()
    };
    let local = run(&fx.vendors_local, false);
    assert!(local.contains("saxpy matches numpy: True"), "{local}");
    assert_eq!(local, run(&fx.vendors_net, true));
    wait_until_idle(&fx);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// `clinfo` shows the remote device with the local device's properties, except what
/// the node presents as an OpenCL 3.0 device within the client's quota: the extensions
/// the remote path supports (with their versions), memory sizes (and the pixels of a 1D
/// image on a buffer, within the largest allocation), no built-in kernels, no shared
/// virtual memory, and the atomic scopes kernels can name.
#[test]
fn clinfo_shows_the_same_device_properties_remotely() {
    if Command::new("clinfo").arg("--version").output().is_err() {
        missing_prerequisite("clinfo not found");
        return;
    }
    let Some(fx) = fixture("clinfo") else { return };
    let device_section = |vendors: &Path| {
        let out = Command::new("clinfo")
            .env("OCL_ICD_VENDORS", vendors)
            .env(ocl_remote::NODES_ENV, &fx.node)
            .output()
            .expect("run clinfo");
        let text = String::from_utf8_lossy(&check_output("clinfo", &out)).into_owned();
        let start = text.find("  Device Name").expect("a device");
        let end = text.find("NULL platform behavior").unwrap_or(text.len());
        text[start..end].to_string()
    };
    let local = device_section(&fx.vendors_local);
    let remote = device_section(&fx.vendors_net);
    let presented = [
        "Global memory size",
        "Max memory allocation",
        "Max constant buffer size",
        "Max size for 1D images from buffer",
        "Built-in kernels",
        "Device Extensions",
        // CL_DEVICE_SVM_CAPABILITIES 0 and its four lines.
        "Shared Virtual Memory (SVM) capabilities",
        "Coarse-grained buffer sharing",
        "Fine-grained buffer sharing",
        "Fine-grained system sharing",
        "Atomics",
        "Atomic memory capabilities",
    ];
    let local_lines: std::collections::HashSet<&str> = local.lines().collect();
    let mut same = 0;
    for line in remote.lines() {
        if local_lines.contains(line) {
            same += 1;
        } else {
            assert!(
                presented.iter().any(|p| line.trim_start().starts_with(p)),
                "remote only: {line}\nlocal:\n{local}\nremote:\n{remote}"
            );
        }
    }
    assert!(same > 50, "{remote}");
    assert!(
        remote.contains("Device Version                                  OpenCL 3.0"),
        "{remote}"
    );
    let out = Command::new("clinfo")
        .arg("-l")
        .env("OCL_ICD_VENDORS", &fx.vendors_net)
        .env(ocl_remote::NODES_ENV, &fx.node)
        .output()
        .expect("run clinfo -l");
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(list.contains("netaccel: "), "{list}");
    wait_until_idle(&fx);
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// Each node listed in `NETACCEL_OPENCL_NODES` contributes its platforms; a node that
/// cannot be reached contributes none and does not stop the others.
#[test]
fn every_reachable_node_contributes_its_platforms() {
    if Command::new("clinfo").arg("--version").output().is_err() {
        missing_prerequisite("clinfo not found");
        return;
    }
    let Some(fx) = fixture("nodes") else { return };
    let second = spawn(
        "127.0.0.1:0".parse().unwrap(),
        ServiceConfig::default(),
        &mut Registry::default(),
    )
    .expect("second service");
    // A port nobody listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let nodes = format!("{},{dead},{}", fx.node, second.local_addr());
    let out = Command::new("clinfo")
        .arg("-l")
        .env("OCL_ICD_VENDORS", &fx.vendors_net)
        .env(ocl_remote::NODES_ENV, &nodes)
        .output()
        .expect("run clinfo -l");
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(list.matches("Platform #").count(), 2, "{list}");
    assert_eq!(list.matches("netaccel: ").count(), 2, "{list}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains(&format!("node {dead} unavailable")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// In CI a missing prerequisite fails a test instead of skipping it: the pyopencl test,
/// run by itself with an interpreter that does not exist, must fail and name pyopencl.
#[test]
fn in_ci_a_missing_prerequisite_is_a_failure() {
    let run = |ci: &str| {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "pyopencl_script_is_identical_local_and_remote"])
            .env("CI", ci)
            .env("PYTHON", "/nonexistent/python3")
            .output()
            .unwrap()
    };
    let out = run("true");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "passed in CI without pyopencl:\n{text}"
    );
    assert!(
        text.contains("prerequisite") && text.contains("pyopencl"),
        "{text}"
    );
    let out = run("");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("SKIP: /nonexistent/python3 cannot import pyopencl"),
        "{text}"
    );
}
