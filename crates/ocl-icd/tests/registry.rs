//! The ICD finds its node through the registry: a real `netaccel-registry` and a real
//! `netaccel-node` sharing its OpenCL devices (PoCL here) on loopback, the node
//! registered with the registry; a C program run with `NETACCEL_REGISTRY` and
//! `NETACCEL_FUNCTION` (and no `NETACCEL_OPENCL_NODES`) computes what it computes with
//! the node named directly, and the registry saw its instance come and go. A registry
//! that cannot be reached or refuses leaves the program without a platform and says
//! why on stderr.
//!
//! Needs gcc, the OpenCL headers and loader, an OpenCL platform, and the workspace's
//! binaries (`cargo test --workspace` builds them); without them the test is skipped,
//! except in CI (`CI=true`), where that is a failure.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::missing_prerequisite;
use serde_json::{json, Value};

use testkit::free_port;

/// A process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_port(addr: SocketAddr, child: &mut Proc, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!("{what} exited during start-up: {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A workspace binary beside this test's directory (`target/debug/NAME`).
fn workspace_binary(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join(name);
    bin.exists().then_some(bin)
}

/// Runs `cmd` to its end within a minute (killed and failed past it).
fn run(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the test program");
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: signalling the child we started, which has not been reaped.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{cmd:?} still running after a minute");
        }
    }
}

fn http(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let req = ureq::request(method, url).timeout(Duration::from_secs(10));
    let result = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = response.status();
    (status, response.into_json().unwrap_or(Value::Null))
}

#[test]
fn the_icd_uses_the_node_the_registry_binds_its_function_to() {
    if Command::new("gcc").arg("--version").output().is_err() {
        return missing_prerequisite("gcc not found");
    }
    let local_icds: Vec<PathBuf> = std::fs::read_dir("/etc/OpenCL/vendors")
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| !p.ends_with("netaccel.icd"))
                .collect()
        })
        .unwrap_or_default();
    if local_icds.is_empty() {
        return missing_prerequisite("no OpenCL platform installed (/etc/OpenCL/vendors)");
    }
    let (Some(node_bin), Some(registry_bin)) = (
        workspace_binary("netaccel-node"),
        workspace_binary("netaccel-registry"),
    ) else {
        return missing_prerequisite(
            "netaccel-node or netaccel-registry not built (cargo build -p netaccel-node -p netaccel-registry)",
        );
    };
    let dir = std::env::temp_dir().join(format!("netaccel-icd-registry-{}", std::process::id()));
    let (vendors_local, vendors_net) = (dir.join("vendors-local"), dir.join("vendors-net"));
    std::fs::create_dir_all(&vendors_local).unwrap();
    std::fs::create_dir_all(&vendors_net).unwrap();
    for icd in local_icds {
        std::fs::copy(&icd, vendors_local.join(icd.file_name().unwrap())).unwrap();
    }
    let lib = std::env::current_exe()
        .unwrap()
        .with_file_name("libnetaccel_opencl.so");
    std::fs::write(
        vendors_net.join("netaccel.icd"),
        format!("{}\n", lib.display()),
    )
    .unwrap();

    // The registry, and a node sharing its OpenCL devices, registered with it.
    let listen = format!("127.0.0.1:{}", free_port());
    let base = format!("http://{listen}");
    let mut registry = Proc(
        Command::new(&registry_bin)
            .args(["--listen", &listen, "--log-level", "warn"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(listen.parse().unwrap(), &mut registry, "netaccel-registry");
    let (http_port, rac_port, opencl_port) = (free_port(), free_port(), free_port());
    let opencl: SocketAddr = format!("127.0.0.1:{opencl_port}").parse().unwrap();
    let config = dir.join("node.toml");
    std::fs::write(
        &config,
        format!(
            "http = \"127.0.0.1:{http_port}\"\nrac = \"127.0.0.1:{rac_port}\"\n\
             opencl = \"{opencl}\"\nlog_level = \"warn\"\n[[slots]]\naccelerator = \"to_uppercase\"\n"
        ),
    )
    .unwrap();
    let mut node = Proc(
        Command::new(&node_bin)
            .arg("--config")
            .arg(&config)
            .args(["--registry", &base, "--name", "gpu-host"])
            .env("OCL_ICD_VENDORS", &vendors_local)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(opencl, &mut node, "netaccel-node");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, nodes) = http("GET", &format!("{base}/v1/nodes"), None);
        if nodes[0]["state"] == "ready" {
            assert_eq!(nodes[0]["opencl"], opencl.to_string(), "{nodes}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the node never registered: {nodes}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, f) = http(
        "PUT",
        &format!("{base}/v1/functions/vadd"),
        Some(json!({"accelerator": "to_uppercase", "instances": 0})),
    );
    assert_eq!(status, 200, "{f}");

    let exe = dir.join("vadd");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/vadd.c");
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lOpenCL", "-lpthread"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let program = |env: &[(&str, &str)]| {
        let mut cmd = Command::new(&exe);
        cmd.env("OCL_ICD_VENDORS", &vendors_net)
            .env_remove("NETACCEL_OPENCL_NODES")
            .env_remove("NETACCEL_REGISTRY")
            .env_remove("NETACCEL_FUNCTION")
            .env_remove("NETACCEL_INSTANCE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        run(cmd)
    };
    let ok = |out: &Output, what: &str| {
        assert!(
            out.status.success(),
            "{what}: {}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout.clone()
    };
    let instances = || {
        let (_, f) = http("GET", &format!("{base}/v1/functions/vadd"), None);
        f["instances"].as_array().unwrap().clone()
    };

    // The node named directly, then found through the registry: the same output.
    let direct = ok(
        &program(&[("NETACCEL_OPENCL_NODES", &opencl.to_string())]),
        "vadd on the node named directly",
    );
    let found = program(&[("NETACCEL_REGISTRY", &base), ("NETACCEL_FUNCTION", "vadd")]);
    assert_eq!(ok(&found, "vadd through the registry"), direct);
    // Its instance was bound (an allocation) and released when it exited.
    let text = ureq::get(&format!("{base}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        text.contains("netaccel_registry_allocations_total{result=\"bound\"} 1"),
        "{text}"
    );
    assert!(instances().is_empty(), "{:?}", instances());

    // With NETACCEL_INSTANCE, that instance is used and kept.
    let kept = program(&[
        ("NETACCEL_REGISTRY", &base),
        ("NETACCEL_FUNCTION", "vadd"),
        ("NETACCEL_INSTANCE", "pod-7"),
    ]);
    assert_eq!(ok(&kept, "vadd as instance pod-7"), direct);
    let now = instances();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(
        (&now[0]["id"], &now[0]["node"]),
        (&json!("pod-7"), &json!("gpu-host"))
    );

    // A registry that refuses (no such function) and one that cannot be reached: no
    // platform, and a sentence naming the registry and the reason.
    let no_platform = |out: &Output| {
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(stderr.contains("clGetPlatformIDs"), "{stderr}");
        assert!(
            stderr.contains("-1001"),
            "CL_PLATFORM_NOT_FOUND_KHR: {stderr}"
        );
        stderr
    };
    let refused = program(&[("NETACCEL_REGISTRY", &base), ("NETACCEL_FUNCTION", "nope")]);
    let stderr = no_platform(&refused);
    assert!(
        stderr.contains(&format!(
            "registry {base} refused an instance of function nope: 404 NOT_FOUND"
        )),
        "{stderr}"
    );
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let unreachable = program(&[
        ("NETACCEL_REGISTRY", &nowhere),
        ("NETACCEL_FUNCTION", "vadd"),
    ]);
    let stderr = no_platform(&unreachable);
    assert!(
        stderr.contains(&format!("registry {nowhere} unreachable")) && stderr.contains("refused"),
        "{stderr}"
    );
    drop(node);
    drop(registry);
    let _ = std::fs::remove_dir_all(&dir);
}
