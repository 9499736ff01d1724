//! Black-box tests of RTL devices: a node whose slots run Verilog designs under
//! Verilator serves them over HTTP and RAC.
//!
//! - The four built-in RTL accelerators give the CPU kernels' outputs for the shared
//!   vectors and random inputs, with random back-pressure on both streams.
//! - Reconfiguration between RTL designs while clients call loses no call.
//! - A third-party design written from the spec and docs/rtl.md (wordsum), and the
//!   docs' worked example (xorbytes), are served from their manifests.
//! - Broken designs are refused at start (missing port, wrong width) or answered
//!   INTERNAL with the cause (never asserting tlast, output too long), never hang.
//!
//! Needs Verilator: without it the tests are skipped when CI is unset and fail with
//! CI=true. Designs are built before the node starts (into the same cache the node
//! uses), so the node's start-up finds them built.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use accel::{Catalog, ParamBlock, PARAMS_LEN};
use common::*;
use netaccel_client::rac::{RacClient, RacError};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn verilator_present() -> bool {
    match netaccel_rtl::verilator_version() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "Verilator is required in CI: {e}"
            );
            eprintln!("SKIP: {e}");
            false
        }
    }
}

/// One build at a time (the machine's cores are shared).
static BUILDS: Mutex<()> = Mutex::new(());

/// Builds the design of the manifest in `dir` into the node's cache; the result (a
/// broken design fails) is the node's business.
fn prebuild(dir: &Path) {
    let _one = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let Ok(m) = manifest::load(dir) else { return };
    let rtl = m.rtl.expect("an [rtl] section");
    let source = netaccel_rtl::DesignSource {
        files: rtl.sources,
        top: rtl.top,
    };
    let _ = netaccel_rtl::compile(
        &source,
        &netaccel_rtl::default_cache_dir(),
        Duration::from_secs(600),
    );
}

fn prebuild_builtins() {
    for name in ["echo", "to_uppercase", "topk", "minmax"] {
        prebuild(&repo().join("rtl/accelerators").join(name));
    }
}

/// A fresh accelerators directory with the given folders, each a copy of a fixture
/// folder, or a manifest and files written here.
fn accelerators_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("netaccel-rtl-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn copy_fixture(dir: &Path, name: &str) {
    let from = repo().join("crates/node/tests/fixtures/rtl").join(name);
    std::fs::create_dir_all(dir.join(name)).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(name).join(entry.file_name())).unwrap();
    }
}

/// A manifest around one of the harness's broken fixture designs.
fn broken(dir: &Path, top: &str, output: &str) {
    let folder = dir.join(top);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::copy(
        repo().join(format!("crates/rtl/tests/fixtures/{top}.v")),
        folder.join(format!("{top}.v")),
    )
    .unwrap();
    std::fs::write(
        folder.join("accelerator.toml"),
        format!(
            "name = \"{top}\"\n[output]\nbytes = \"{output}\"\n[rtl]\nsources = [\"{top}.v\"]\n\
             top = \"{top}\"\ncycles_max = \"200 + 8 * ceil_div(payload_len, 64)\"\n"
        ),
    )
    .unwrap();
}

fn post(node: &TestNode, path: &str, body: &[u8]) -> (u16, Vec<u8>, Option<String>) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    match agent.post(&node.url(path)).send_bytes(body) {
        Ok(r) => {
            let exec = r.header("X-Netaccel-Exec-Ns").map(str::to_string);
            let status = r.status();
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut r.into_reader(), &mut out).unwrap();
            (status, out, exec)
        }
        Err(ureq::Error::Status(code, r)) => {
            (code, r.into_string().unwrap_or_default().into_bytes(), None)
        }
        Err(e) => panic!("POST {path}: {e}"),
    }
}

fn params(values: &[u32]) -> ParamBlock {
    let mut block = [0u8; PARAMS_LEN];
    for (i, v) in values.iter().enumerate() {
        block[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    block
}

/// The CPU kernel's output for the call.
fn cpu(name: &str, block: &ParamBlock, payload: &[u8]) -> Vec<u8> {
    let catalog = Catalog::builtin();
    let mut out = Vec::new();
    catalog
        .by_name(name)
        .unwrap()
        .run(block, payload, &mut out)
        .unwrap();
    out
}

fn assert_same(name: &str, got: &[u8], want: &[u8]) {
    if name != "minmax" {
        assert_eq!(got, want, "{name}: output differs from the CPU kernel's");
        return;
    }
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in f32s(got).iter().zip(f32s(want)).enumerate() {
        assert!((g - w).abs() <= 1e-6, "minmax value {i}: {g} vs {w}");
    }
}

fn random_call(rng: &mut Rng, name: &str) -> (String, ParamBlock, Vec<u8>) {
    let len = [0usize, 1, 64, 100, 1024, 4000][rng.below(6) as usize];
    match name {
        "topk" => {
            let k = 1 + rng.below(64) as u32;
            let values: Vec<i32> = (0..len / 4)
                .map(|_| rng.below(2000) as i32 - 1000)
                .collect();
            (format!("?k={k}"), params(&[k]), i32_bytes(&values))
        }
        "minmax" => {
            let values: Vec<f32> = (0..len / 4)
                .map(|_| rng.below(1_000_000) as f32 / 777.0 - 600.0)
                .collect();
            (String::new(), params(&[]), f32_bytes(&values))
        }
        _ => (String::new(), params(&[]), rng.bytes(len)),
    }
}

#[test]
fn an_rtl_device_serves_the_builtins_as_the_cpu_kernels_do_over_http_and_rac() {
    if !verilator_present() {
        return;
    }
    prebuild_builtins();
    let node = TestNode::start(
        r#"
[[devices]]
name = "rtl0"
backend = "rtl"
backpressure = 0.3
backpressure_seed = 11
slots = ["echo", "to_uppercase", "topk", "minmax"]
"#,
    );
    let slots = node.get_json("/v1/slots");
    for s in slots.as_array().unwrap() {
        assert_eq!(s["backend"], "rtl", "{s}");
    }
    let names = ["echo", "to_uppercase", "topk", "minmax"];
    let mut rng = Rng(0xfeed);
    for _ in 0..12 {
        for name in names {
            let (query, block, payload) = random_call(&mut rng, name);
            let (status, out, exec) = post(&node, &format!("/v1/fn/{name}{query}"), &payload);
            assert_eq!(status, 200, "{name}: {}", String::from_utf8_lossy(&out));
            assert_same(name, &out, &cpu(name, &block, &payload));
            // The modelled time: whole cycles at 250 MHz, 4 ns each.
            let exec: u64 = exec.expect("X-Netaccel-Exec-Ns").parse().unwrap();
            assert!(exec >= 8 && exec % 4 == 0, "{name}: exec {exec} ns");
        }
    }

    // Over RAC, and the shared vectors.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let rac = RacClient::connect(&node.rac_addr.to_string())
            .await
            .unwrap();
        for (id, name) in [
            (1u16, "echo"),
            (2, "to_uppercase"),
            (3, "topk"),
            (5, "minmax"),
        ] {
            for _ in 0..6 {
                let (_, block, payload) = random_call(&mut rng, name);
                let out = rac.call(id, block, payload.clone(), 0).await.unwrap();
                assert_same(name, &out.payload, &cpu(name, &block, &payload));
                assert!(out.header.exec_ns >= 8, "{name}: {:?}", out.header);
            }
        }
        let text = std::fs::read_to_string(repo().join("spec/rac-v1-vectors.json")).unwrap();
        let vectors: serde_json::Value = serde_json::from_str(&text).unwrap();
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let mut checked = 0;
        for v in vectors.as_array().unwrap() {
            let (Some(h), Some(want)) = (v["header_hex"].as_str(), v["expect_output_hex"].as_str())
            else {
                continue;
            };
            let h = hex(h);
            let id = u16::from_le_bytes([h[6], h[7]]);
            if ![1, 2, 3, 5].contains(&id) {
                continue;
            }
            let block: ParamBlock = h[20..64].try_into().unwrap();
            let payload = hex(v["payload_hex"].as_str().unwrap());
            let out = rac.call(id, block, payload, 0).await.unwrap();
            assert_eq!(out.payload, hex(want), "{}", v["name"]);
            checked += 1;
        }
        assert!(checked >= 3, "{checked} shared vectors");

        // Beyond the designs' limits: BAD_REQUEST with the reason.
        let values = i32_bytes(&[1, 2, 3]);
        match rac.call(3, params(&[65]), values.clone(), 0).await {
            Err(RacError::Status {
                status, message, ..
            }) => {
                assert_eq!(status.name(), "BAD_REQUEST");
                assert!(message.contains("k"), "{message}");
            }
            other => panic!("topk k=65 on RTL: {other:?}"),
        }
        let nan = f32_bytes(&[1.0, f32::NAN, 2.0]);
        match rac.call(5, params(&[]), nan, 0).await {
            Err(RacError::Status { status, .. }) => assert_eq!(status.name(), "BAD_REQUEST"),
            other => panic!("minmax NaN on RTL: {other:?}"),
        }
    });
    // topk's slot: 4000-byte calls take 16 cycles per beat.
    let cycles = node.metric(r#"netaccel_rtl_simulated_cycles_total{slot="2"}"#);
    assert!(cycles > 1000.0, "simulated cycles in /metrics: {cycles}");
}

#[test]
fn reconfiguration_between_rtl_designs_under_load_loses_no_call() {
    if !verilator_present() {
        return;
    }
    prebuild_builtins();
    let node = Arc::new(TestNode::start(
        r#"
[[devices]]
name = "rtl0"
backend = "rtl"
backpressure = 0.2
backpressure_seed = 3
slots = ["echo", "echo"]
"#,
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = ["echo", "to_uppercase", "echo"]
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let node = Arc::clone(&node);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut rng = Rng(77 + i as u64);
                let (mut ok, mut refused, mut sent) = (0u32, 0u32, 0u32);
                while !stop.load(Ordering::Relaxed) {
                    let len = 1 + rng.below(300) as usize;
                    let payload = rng.bytes(len);
                    sent += 1;
                    let (status, out, _) = post(&node, &format!("/v1/fn/{name}"), &payload);
                    match status {
                        200 => {
                            assert_eq!(
                                out,
                                cpu(name, &params(&[]), &payload),
                                "{name} on the wrong design"
                            );
                            ok += 1;
                        }
                        // Between swaps: no slot holds it (404), or its slot is being
                        // reconfigured (503). Answered, not lost.
                        404 if name == "to_uppercase" => refused += 1,
                        503 => refused += 1,
                        other => panic!("{name}: {other} {}", String::from_utf8_lossy(&out)),
                    }
                }
                (name, sent, ok, refused)
            })
        })
        .collect();
    let mut reports = Vec::new();
    for round in 0..6 {
        let next = if round % 2 == 0 {
            "to_uppercase"
        } else {
            "echo"
        };
        let body = format!(r#"{{"accelerator":"{next}"}}"#);
        let (status, resp) = curl(&["-s", "-X", "PUT", "-d", &body, &node.url("/v1/slots/0")]);
        let doc: serde_json::Value = serde_json::from_slice(&resp).unwrap_or_default();
        assert_eq!(status, 200, "{doc}");
        reports.push(doc);
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    for c in clients {
        let (name, sent, ok, refused) = c.join().expect("a client thread");
        assert_eq!(sent, ok + refused, "{name}: every call answered");
        assert!(ok > 0, "{name}: no call succeeded");
        assert!(Instant::now() < deadline);
    }
    for doc in &reports {
        assert!(doc["reconfig_ms"].as_f64().is_some(), "{doc}");
        let modelled = doc["modelled_ms"].as_f64().expect("modelled ICAP time");
        assert!(modelled > 0.0, "{doc}");
    }
}

#[test]
fn designs_written_from_the_docs_are_served_from_their_manifests() {
    if !verilator_present() {
        return;
    }
    let dir = accelerators_dir("third-party");
    copy_fixture(&dir, "wordsum");
    copy_fixture(&dir, "xorbytes");
    prebuild(&dir.join("wordsum"));
    prebuild(&dir.join("xorbytes"));
    let node = TestNode::start(&format!(
        r#"
accelerators_dir = "{}"

[[devices]]
name = "rtl0"
backend = "rtl"
slots = ["wordsum", "xorbytes"]
"#,
        dir.display()
    ));
    let accels = node.get_json("/v1/accelerators");
    let wordsum = accels
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "wordsum")
        .expect("wordsum in the catalog");
    assert_eq!(wordsum["backends"], serde_json::json!(["rtl"]), "{wordsum}");

    let mut rng = Rng(5);
    for len in [0usize, 4, 64, 68, 1000] {
        let words: Vec<u32> = (0..len / 4).map(|_| rng.next() as u32).collect();
        let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let seed = rng.next() as u32;
        let (status, out, exec) = post(&node, &format!("/v1/fn/wordsum?seed={seed}"), &payload);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
        let want = words.iter().fold(seed, |a, w| a.wrapping_add(*w));
        assert_eq!(out, want.to_le_bytes());
        if len == 64 {
            // Header (cycle 1), one payload beat (2), the answer (3): 12 ns at 250 MHz.
            assert_eq!(exec.as_deref(), Some("12"));
        }
    }
    let (status, out, _) = post(&node, "/v1/fn/wordsum", &[1, 2, 3]);
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&out));

    let payload = rng.bytes(333);
    let (status, out, _) = post(&node, "/v1/fn/xorbytes?key=90", &payload);
    assert_eq!(status, 200);
    assert_eq!(out, payload.iter().map(|b| b ^ 90).collect::<Vec<u8>>());
    let (status, _, _) = post(&node, "/v1/fn/xorbytes?key=256", &payload);
    assert_eq!(status, 400, "the manifest's bound on key");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn broken_designs_are_refused_or_answered_internal_with_the_cause() {
    if !verilator_present() {
        return;
    }
    let dir = accelerators_dir("broken");
    broken(&dir, "missing_tuser", "payload_len");
    broken(&dir, "narrow_data", "payload_len");
    broken(&dir, "never_last", "payload_len");
    broken(&dir, "double_echo", "payload_len");
    prebuild(&dir.join("never_last"));
    prebuild(&dir.join("double_echo"));
    let node = TestNode::start_logging(
        &format!(
            r#"
accelerators_dir = "{}"

[[devices]]
name = "rtl0"
backend = "rtl"
slots = ["never_last", "double_echo"]
"#,
            dir.display()
        ),
        &[],
    );
    let log = node.log();
    assert!(
        log.contains("missing_tuser") && log.contains("m_axis_tuser"),
        "the missing port is named: {log}"
    );
    assert!(
        log.contains("narrow_data") && log.contains("s_axis_tdata"),
        "the wrong width is named: {log}"
    );
    let accels = node.get_json("/v1/accelerators").to_string();
    assert!(!accels.contains("missing_tuser") && !accels.contains("narrow_data"));

    let payload = vec![9u8; 200];
    for _ in 0..2 {
        let started = Instant::now();
        let (status, out, _) = post(&node, "/v1/fn/never_last", &payload);
        let message = String::from_utf8_lossy(&out);
        assert_eq!(status, 500, "{message}");
        assert!(message.contains("never asserted m_axis_tlast"), "{message}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    let (status, out, _) = post(&node, "/v1/fn/double_echo", &payload);
    let message = String::from_utf8_lossy(&out);
    assert_eq!(status, 500, "{message}");
    assert!(message.contains("longer than 200 bytes"), "{message}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_worked_example_in_the_docs_is_the_fixture_these_tests_serve() {
    // docs/rtl.md shows xorbytes.v, its manifest and its cocotb test in full; the node
    // serves the fixture copies above, so the page must hold them verbatim.
    let page = std::fs::read_to_string(repo().join("docs/rtl.md")).unwrap();
    for file in ["xorbytes.v", "accelerator.toml", "test_xorbytes.py"] {
        let text = std::fs::read_to_string(
            repo()
                .join("crates/node/tests/fixtures/rtl/xorbytes")
                .join(file),
        )
        .unwrap();
        assert!(
            page.contains(&text),
            "docs/rtl.md does not show the tested {file} verbatim"
        );
    }
}

#[test]
fn the_modelled_reconfiguration_time_is_the_partial_bitstream_over_the_icap() {
    if !verilator_present() {
        return;
    }
    if std::process::Command::new("yosys")
        .arg("-V")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "yosys is required in CI"
        );
        eprintln!("SKIP: yosys is not installed");
        return;
    }
    prebuild_builtins();
    // The estimate the node models echo's region from (what `netaccel rtl synth`
    // keeps in the cache).
    let echo = manifest::load(&repo().join("rtl/accelerators/echo")).unwrap();
    let rtl = echo.rtl.unwrap();
    let source = netaccel_rtl::DesignSource {
        files: rtl.sources,
        top: rtl.top,
    };
    let (resources, _) =
        netaccel_rtl::synth_cached(&source, "xcup", &netaccel_rtl::default_cache_dir()).unwrap();
    let node = TestNode::start(
        r#"
[[devices]]
name = "rtl0"
backend = "rtl"
icap_bytes_per_s = 100000000
slots = ["topk"]
"#,
    );
    let (status, resp) = curl(&[
        "-s",
        "-X",
        "PUT",
        "-d",
        r#"{"accelerator":"echo"}"#,
        &node.url("/v1/slots/0"),
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&resp).unwrap_or_default();
    assert_eq!(status, 200, "{doc}");
    let want_ms = resources.partial_bitstream_bytes() as f64 / 100e6 * 1e3;
    let got_ms = doc["modelled_ms"].as_f64().expect("modelled_ms");
    assert!(
        (got_ms - want_ms).abs() < 1e-3,
        "{got_ms} ms, want {want_ms} ms"
    );
    assert_eq!(doc["cached"], true, "echo was built before: {doc}");
    let (status, out, _) = post(&node, "/v1/fn/echo", b"after the swap");
    assert_eq!(
        (status, out.as_slice()),
        (200, b"after the swap".as_slice())
    );
}
