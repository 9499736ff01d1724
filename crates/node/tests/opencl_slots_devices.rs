//! Black-box tests of devices and user accelerators that need no OpenCL runtime:
//! `[[devices]]` in node.toml, `/v1/slots` showing each slot's device and backend,
//! accelerator manifests loaded from `--accelerators DIR` (valid ones served in the
//! catalog with the backends that can host them, invalid ones refused with the file,
//! field and reason while the node starts), and a slot refusing what its device
//! cannot host.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// A fresh accelerators directory for one test.
fn accel_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("netaccel-accels-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_accel(dir: &Path, folder: &str, manifest: &str, files: &[(&str, &str)]) {
    let d = dir.join(folder);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("accelerator.toml"), manifest).unwrap();
    for (name, text) in files {
        std::fs::write(d.join(name), text).unwrap();
    }
}

const XOR_CL: &str =
    "kernel void xorbytes(global const uchar *in, global uchar *out, uint key, uint n) {
    size_t i = get_global_id(0);
    if (i < n) out[i] = in[i] ^ (uchar)key;
}";

fn xorbytes(name: &str, extra: &str) -> String {
    format!(
        r#"name = "{name}"
description = "XOR every byte with a key"
{extra}
[[params]]
name = "key"
type = "u32"
offset = 0
default = 0
min = 0
max = 255

[output]
bytes = "payload_len"

[opencl]
source = "xorbytes.cl"
kernel = "xorbytes"
global_size = ["payload_len"]
args = ["payload", "output", "key", "payload_len"]
"#
    )
}

fn put_slot(node: &TestNode, slot: u16, accelerator: &str) -> (u16, serde_json::Value) {
    let url = node.url(&format!("/v1/slots/{slot}"));
    let body = format!(r#"{{"accelerator":"{accelerator}"}}"#);
    let (status, resp) = curl(&["-X", "PUT", "-d", &body, &url]);
    (status, serde_json::from_slice(&resp).unwrap_or_default())
}

#[test]
fn devices_own_their_slots_and_slots_show_device_and_backend() {
    let node = TestNode::start(
        r#"
[[devices]]
name = "cpu0"
backend = "cpu"
slots = ["to_uppercase", "topk"]

[[devices]]
name = "cpu1"
backend = "cpu"
slots = ["echo"]
"#,
    );
    let slots = node.get_json("/v1/slots");
    let seen: Vec<(u64, &str, &str, &str)> = slots
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().unwrap(),
                s["device"].as_str().unwrap(),
                s["backend"].as_str().unwrap(),
                s["accelerator"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (0, "cpu0", "cpu", "to_uppercase"),
            (1, "cpu0", "cpu", "topk"),
            (2, "cpu1", "cpu", "echo")
        ]
    );
    let (status, out) = curl(&[
        "-s",
        "--data-binary",
        "abc",
        &node.url("/v1/fn/to_uppercase"),
    ]);
    assert_eq!((status, out.as_slice()), (200, b"ABC".as_slice()));
    // A CPU slot loads any built-in.
    let (status, doc) = put_slot(&node, 2, "sobel");
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["cached"], true);
    assert!(doc["load_ms"].as_f64().is_some(), "{doc}");
}

#[test]
fn manifests_load_the_valid_and_refuse_the_invalid_with_file_field_and_reason() {
    let dir = accel_dir("mixed");
    write_accel(
        &dir,
        "xorbytes",
        &xorbytes("xorbytes", "id = 300"),
        &[("xorbytes.cl", XOR_CL)],
    );
    write_accel(
        &dir,
        "second",
        &xorbytes("second", ""),
        &[("xorbytes.cl", XOR_CL)],
    );
    // Overlapping params.
    let overlap = xorbytes("overlap", "").replace(
        "[output]",
        "[[params]]\nname = \"wide\"\ntype = \"u64\"\noffset = 0\n[output]",
    );
    write_accel(&dir, "overlap", &overlap, &[("xorbytes.cl", XOR_CL)]);
    // Misaligned offset.
    let misaligned = xorbytes("misaligned", "").replace("offset = 0", "offset = 2");
    write_accel(&dir, "misaligned", &misaligned, &[("xorbytes.cl", XOR_CL)]);
    // The kernel source it names is missing.
    write_accel(&dir, "nosource", &xorbytes("nosource", ""), &[]);
    // A built-in's name.
    write_accel(
        &dir,
        "clash",
        &xorbytes("topk", ""),
        &[("xorbytes.cl", XOR_CL)],
    );
    let node = TestNode::start_logging(
        "[[slots]]\naccelerator = \"echo\"\n",
        &["--accelerators", dir.to_str().unwrap()],
    );
    let catalog = node.get_json("/v1/accelerators");
    let list = catalog.as_array().unwrap();
    let entry = |name: &str| list.iter().find(|a| a["name"] == name).cloned();
    let xor = entry("xorbytes").expect("xorbytes in the catalog");
    assert_eq!(xor["id"], 300);
    assert_eq!(xor["backends"], serde_json::json!(["opencl"]));
    assert_eq!(xor["hash"].as_str().unwrap().len(), 32);
    assert_eq!(xor["params"][0]["name"], "key");
    assert_eq!(
        (
            xor["params"][0]["min"].as_u64(),
            xor["params"][0]["max"].as_u64()
        ),
        (Some(0), Some(255))
    );
    let second = entry("second").expect("second in the catalog");
    assert!(second["id"].as_u64().unwrap() >= 256);
    assert_eq!(
        entry("topk").unwrap()["backends"],
        // rtl: the node ships topk's RTL implementation (docs/rtl.md).
        serde_json::json!(["cpu", "opencl", "rtl"])
    );
    assert_eq!(list.iter().filter(|a| a["name"] == "topk").count(), 1);
    for refused in ["overlap", "misaligned", "nosource"] {
        assert!(entry(refused).is_none(), "{refused} should be refused");
    }
    let log = node.log();
    let file = |folder: &str| {
        dir.join(folder)
            .join("accelerator.toml")
            .display()
            .to_string()
    };
    for (folder, field, reason) in [
        ("overlap", "params[1].offset", "overlaps params[0] `key`"),
        ("misaligned", "params[0].offset", "not aligned"),
        ("nosource", "opencl.source", "xorbytes.cl"),
        ("clash", "name", "built-in accelerator's name"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&file(folder)))
            .unwrap_or_else(|| panic!("no log line for {folder}:\n{log}"));
        assert!(line.contains(field) && line.contains(reason), "{line}");
    }
    // A CPU slot cannot host a manifest with only [opencl]: refused, saying why.
    let (status, doc) = put_slot(&node, 0, "xorbytes");
    assert_eq!(status, 400, "{doc}");
    let error = doc["error"].as_str().unwrap();
    assert!(
        error.contains("a cpu device cannot host xorbytes (it runs on: opencl)"),
        "{error}"
    );
    // The catalog entry's checks run before any slot: bounds, then hosting.
    let (status, out) = curl(&[
        "-s",
        "--data-binary",
        "ab",
        &node.url("/v1/fn/xorbytes?key=256"),
    ]);
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&out));
    assert!(String::from_utf8_lossy(&out).contains("outside 0..=255"));
    let (status, _) = curl(&[
        "-s",
        "--data-binary",
        "ab",
        &node.url("/v1/fn/xorbytes?key=1"),
    ]);
    assert_eq!(status, 404, "no slot hosts it");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_slot_naming_what_its_device_cannot_host_stops_the_start_with_a_reason() {
    let dir = accel_dir("cannot-host");
    write_accel(
        &dir,
        "xorbytes",
        &xorbytes("xorbytes", ""),
        &[("xorbytes.cl", XOR_CL)],
    );
    let config = format!(
        "accelerators_dir = \"{}\"\n[[devices]]\nname = \"cpu0\"\nbackend = \"cpu\"\nslots = [\"xorbytes\"]\n",
        dir.display()
    );
    // A configuration error (issue 29: every one exits 2) ...
    let (code, stderr) = start_refused(&config, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("device cpu0, slot 0: a cpu device cannot host xorbytes"),
        "{stderr}"
    );
    // ... while a folder it names that cannot be read is not to be had: 1.
    let (code, stderr) = start_refused("accelerators_dir = \"/nonexistent/accelerators\"\n", &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot read accelerators directory"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The scheduling policy (`SCHED_*` number) of each thread of process `pid` whose
/// name satisfies `keep`, from /proc.
fn thread_policies(pid: i32, keep: impl Fn(&str) -> bool) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let name = std::fs::read_to_string(dir.join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        if !keep(&name) {
            continue;
        }
        let sched = std::fs::read_to_string(dir.join("sched")).unwrap_or_default();
        let policy = sched
            .lines()
            .find(|l| l.starts_with("policy"))
            .and_then(|l| l.rsplit(':').next()?.trim().parse().ok())
            .unwrap_or(u32::MAX);
        out.push((name, policy));
    }
    out
}

/// Regression: an OpenCL slot's worker ran at the default slot class, SCHED_IDLE, and
/// the OpenCL runtime's compute threads it created inherited it, so beside any busy
/// process a 256x256 sobel took 428 ms instead of 0.2 ms. Now only CPU slots take the
/// configured class; an OpenCL slot's worker, and every thread the runtime starts,
/// run SCHED_OTHER.
#[test]
fn opencl_slot_workers_and_runtime_threads_are_not_sched_idle() {
    if !opencl_runtime_present() {
        return;
    }
    let programs = accel_dir("sched-programs");
    let node = TestNode::start(&format!(
        "opencl_program_dir = \"{}\"\n[[devices]]\nname = \"ocl0\"\nbackend = \"opencl\"\nslots = [\"sobel\"]\n[[devices]]\nname = \"cpu0\"\nbackend = \"cpu\"\nslots = [\"sobel\"]\n",
        programs.display()
    ));
    // Calls through the OpenCL slot's worker (too large to run inline), so that the
    // runtime has started whatever threads it starts for them.
    let url = node.url("/v1/fn/sobel?width=512&height=512");
    let image = vec![b'x'; 512 * 512];
    for _ in 0..5 {
        let resp = ureq::post(&url).send_bytes(&image).unwrap();
        assert_eq!(resp.status(), 200);
    }
    const SCHED_OTHER: u32 = 0;
    const SCHED_IDLE: u32 = 5;
    let slots = thread_policies(node.pid(), |n| n.starts_with("slot-"));
    assert_eq!(
        slots.iter().find(|(n, _)| n == "slot-0").map(|t| t.1),
        Some(SCHED_OTHER),
        "the OpenCL slot's worker: {slots:?}"
    );
    assert_eq!(
        slots.iter().find(|(n, _)| n == "slot-1").map(|t| t.1),
        Some(SCHED_IDLE),
        "the CPU slot keeps the configured default: {slots:?}"
    );
    let others = thread_policies(node.pid(), |n| n != "slot-1");
    assert!(
        others.iter().all(|(_, p)| *p == SCHED_OTHER),
        "threads other than the CPU slot's worker must not be SCHED_IDLE: {others:?}"
    );
    let _ = std::fs::remove_dir_all(&programs);
}
