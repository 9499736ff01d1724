//! Black-box tests of OpenCL slots on PoCL: every built-in as an OpenCL kernel over
//! HTTP and RAC against the CPU kernels and the spec's accuracy; the user accelerator
//! of `docs/opencl-slots.md` (a fixture the doc must quote verbatim) served like a
//! built-in; reconfiguration reporting a first build and cached loads, in memory and
//! across a restart; malformed manifests refused while the node starts.
//!
//! Without an OpenCL platform the tests skip (and fail with `CI=true`).

mod common;

use std::path::{Path, PathBuf};

use accel::{Accelerator, Catalog, ParamBlock, PARAMS_LEN};
use common::*;
use netaccel_client::rac::{RacClient, RacError};
use rac_proto::Status;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A directory of its own for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("netaccel-oclslots-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// node.toml lines for an OpenCL device `ocl0` on PoCL with `slots`, its program
/// binaries kept in `programs`.
fn ocl_device(slots: &[&str], programs: &Path) -> String {
    let list: Vec<String> = slots.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "opencl_program_dir = \"{}\"\n[[devices]]\nname = \"ocl0\"\nbackend = \"opencl\"\nplatform = \"Portable Computing Language\"\ndevice = 0\nslots = [{}]\n",
        programs.display(),
        list.join(", ")
    )
}

/// POST /v1/fn/{name}?query: status and body.
fn http_call(node: &TestNode, name: &str, query: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let url = node.url(&format!("/v1/fn/{name}?{query}"));
    match ureq::post(&url).send_bytes(body) {
        Ok(resp) => {
            let status = resp.status();
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut resp.into_reader(), &mut out).unwrap();
            (status, out)
        }
        Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap().into_bytes()),
        Err(e) => panic!("transport error: {e}"),
    }
}

/// The query string of `params` for accelerator `a`.
fn query(a: &dyn Accelerator, params: &ParamBlock) -> String {
    a.descriptor()
        .params
        .iter()
        .map(|p| format!("{}={}", p.name, p.read(params)))
        .collect::<Vec<_>>()
        .join("&")
}

fn block(values: &[(usize, [u8; 4])]) -> ParamBlock {
    let mut b = [0u8; PARAMS_LEN];
    for (offset, v) in values {
        b[*offset..offset + 4].copy_from_slice(v);
    }
    b
}

/// One call of a built-in: its params and payload.
struct Case {
    name: &'static str,
    params: ParamBlock,
    payload: Vec<u8>,
}

/// Random inputs for every built-in, edge sizes included.
fn cases(rng: &mut Rng) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut case = |name, params, payload| {
        cases.push(Case {
            name,
            params,
            payload,
        })
    };
    for n in [0usize, 1, 63, 64, 65, 1000, 4099] {
        case("echo", [0; PARAMS_LEN], rng.bytes(n));
        case("to_uppercase", [0; PARAMS_LEN], rng.bytes(n));
    }
    for (n, k) in [
        (0usize, 1u32),
        (1, 1),
        (5, 3),
        (100, 7),
        (1000, 1000),
        (1000, 1200),
        (3, 10),
    ] {
        let values: Vec<i32> = (0..n).map(|_| (rng.below(2000) as i32) - 1000).collect();
        case("topk", block(&[(0, k.to_le_bytes())]), i32_bytes(&values));
    }
    for (n, eps) in [
        (0usize, 0.0f32),
        (1, 0.0),
        (17, 1e-3),
        (1000, 0.25),
        (777, 1e-6),
    ] {
        let mut values: Vec<f32> = (0..n)
            .map(|_| rng.below(1_200_001) as f32 / 1e6 - 0.1)
            .collect();
        if n > 10 {
            values[3] = f32::NAN;
            values[4] = eps.max(1e-6);
            values[5] = 1.0 - eps.max(1e-6);
            values[6] = 0.5;
        }
        case(
            "logit",
            block(&[(0, eps.to_le_bytes())]),
            f32_bytes(&values),
        );
    }
    for n in [0usize, 1, 7, 1000, 4097] {
        let values: Vec<f32> = (0..n)
            .map(|_| (rng.below(2_000_001) as f32 - 1e6) / 1e3)
            .collect();
        case("minmax", [0; PARAMS_LEN], f32_bytes(&values));
    }
    case("minmax", [0; PARAMS_LEN], f32_bytes(&[2.5; 9]));
    for (w, h) in [
        (1u32, 1u32),
        (3, 3),
        (17, 9),
        (64, 48),
        (100, 1),
        (256, 256),
    ] {
        let p = block(&[(0, w.to_le_bytes()), (4, h.to_le_bytes())]);
        case("sobel", p, rng.bytes((w * h) as usize));
    }
    for n in [1u32, 3, 8, 17, 40] {
        let values: Vec<f32> = (0..2 * n * n)
            .map(|_| (rng.below(2001) as f32 - 1000.0) / 100.0)
            .collect();
        case("matmul", block(&[(0, n.to_le_bytes())]), f32_bytes(&values));
    }
    cases
}

/// Checks an OpenCL output against the CPU kernel's and the spec: bytes for echo,
/// to_uppercase, topk and sobel; the stated accuracy for logit, minmax and matmul.
fn check_output(c: &Case, got: &[u8], cpu: &[u8]) {
    let what = format!("{} of {} bytes", c.name, c.payload.len());
    match c.name {
        "logit" => {
            let eps = f32::from_le_bytes(c.params[..4].try_into().unwrap());
            let eps = if eps == 0.0 { 1e-6 } else { eps };
            let want = accel::reference::logit(&f32s(&c.payload), eps);
            let got = f32s(got);
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if w.is_nan() {
                    assert!(g.is_nan(), "{what}: value {i}: {g} for NaN");
                } else {
                    let err = (f64::from(*g) - w).abs();
                    assert!(
                        err <= 1e-5 * w.abs().max(1.0),
                        "{what}: value {i}: {g} vs {w}"
                    );
                }
            }
        }
        "minmax" => {
            let want = accel::reference::minmax(&f32s(&c.payload));
            let got = f32s(got);
            assert_eq!(got.len(), want.len(), "{what}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-6,
                    "{what}: value {i}: {g} vs {w}"
                );
            }
        }
        "matmul" => {
            let n = u32::from_le_bytes(c.params[..4].try_into().unwrap()) as usize;
            let v = f32s(&c.payload);
            let (want, scale) = accel::reference::matmul(&v[..n * n], &v[n * n..], n);
            let got = f32s(got);
            assert_eq!(got.len(), want.len(), "{what}");
            for i in 0..got.len() {
                let err = (f64::from(got[i]) - want[i]).abs();
                assert!(
                    err <= 1e-4 * scale[i] + 1e-6,
                    "{what}: element {i}: {} vs {}",
                    got[i],
                    want[i]
                );
            }
        }
        _ => assert!(got == cpu, "{what}: differs from the CPU kernel"),
    }
}

#[test]
fn builtins_on_opencl_match_the_cpu_kernels_over_http_and_rac() {
    if !opencl_runtime_present() {
        return;
    }
    let programs = scratch("builtins-programs");
    let names = [
        "echo",
        "to_uppercase",
        "topk",
        "logit",
        "minmax",
        "sobel",
        "matmul",
    ];
    let node = TestNode::start(&ocl_device(&names, &programs));
    let slots = node.get_json("/v1/slots");
    for s in slots.as_array().unwrap() {
        assert_eq!(
            (s["device"].as_str(), s["backend"].as_str()),
            (Some("ocl0"), Some("opencl"))
        );
    }
    let catalog = node.get_json("/v1/accelerators");
    for a in catalog.as_array().unwrap() {
        // The node also ships RTL implementations of four built-ins (docs/rtl.md).
        let rtl = ["echo", "to_uppercase", "topk", "minmax"].contains(&a["name"].as_str().unwrap());
        let want = if rtl {
            serde_json::json!(["cpu", "opencl", "rtl"])
        } else {
            serde_json::json!(["cpu", "opencl"])
        };
        assert_eq!(a["backends"], want, "{a}");
    }
    let cpu = Catalog::builtin();
    let mut rng = Rng(0x05ee_d0c1);
    let rt = runtime();
    let rac = rt
        .block_on(RacClient::connect(&node.rac_addr.to_string()))
        .unwrap();
    for c in cases(&mut rng) {
        let a = cpu.by_name(c.name).unwrap();
        let mut want = Vec::new();
        a.run(&c.params, &c.payload, &mut want).unwrap();
        let (status, got) = http_call(&node, c.name, &query(a.as_ref(), &c.params), &c.payload);
        assert_eq!(status, 200, "{}: {}", c.name, String::from_utf8_lossy(&got));
        check_output(&c, &got, &want);
        let id = a.descriptor().id;
        let out = rt
            .block_on(rac.call(id, c.params, c.payload.clone(), 0))
            .unwrap_or_else(|e| panic!("{} over RAC: {e}", c.name));
        check_output(&c, &out.payload, &want);
    }
    // The shared vectors, over both front ends.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/rac-v1-vectors.json"
    ))
    .unwrap();
    let vectors: serde_json::Value = serde_json::from_str(&text).unwrap();
    let hex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    let mut checked = 0;
    for v in vectors.as_array().unwrap() {
        let Some(expect) = v["expect_output_hex"].as_str() else {
            continue;
        };
        let header = hex(v["header_hex"].as_str().unwrap());
        let id = u16::from_le_bytes([header[6], header[7]]);
        let params: ParamBlock = header[20..64].try_into().unwrap();
        let payload = hex(v["payload_hex"].as_str().unwrap());
        let a = cpu.by_id(id).unwrap();
        let (status, got) = http_call(
            &node,
            &a.descriptor().name,
            &query(a.as_ref(), &params),
            &payload,
        );
        assert_eq!((status, got), (200, hex(expect)), "vector {}", v["name"]);
        let out = rt.block_on(rac.call(id, params, payload, 0)).unwrap();
        assert_eq!(out.payload, hex(expect), "vector {} over RAC", v["name"]);
        checked += 1;
    }
    assert!(checked >= 4);
    // A check that needs the payload: a non-finite minmax value, refused on both.
    let bad = f32_bytes(&[1.0, f32::INFINITY, 2.0]);
    let (status, body) = http_call(&node, "minmax", "", &bad);
    assert_eq!(status, 400);
    assert!(
        String::from_utf8_lossy(&body).contains("value 1 is inf"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    match rt.block_on(rac.call(5, [0; PARAMS_LEN], bad, 0)) {
        Err(RacError::Status { status, .. }) => assert_eq!(status, Status::BadRequest),
        other => panic!("expected BAD_REQUEST, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&programs);
}

/// The fixture accelerators directory (the doc's worked example), copied to `dir`.
fn fixture_dir(dir: &Path) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/opencl-slots/xorbytes");
    let to = dir.join("accelerators/xorbytes");
    std::fs::create_dir_all(&to).unwrap();
    for f in ["accelerator.toml", "xorbytes.cl"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    dir.join("accelerators")
}

fn put_slot(node: &TestNode, slot: u16, accelerator: &str) -> serde_json::Value {
    let url = node.url(&format!("/v1/slots/{slot}"));
    let body = format!(r#"{{"accelerator":"{accelerator}"}}"#);
    let (status, resp) = curl(&["-s", "-X", "PUT", "-d", &body, &url]);
    let doc: serde_json::Value = serde_json::from_slice(&resp).unwrap_or_default();
    assert_eq!(status, 200, "{doc}");
    doc
}

#[test]
fn the_docs_example_is_served_and_reconfiguration_reports_first_build_and_cached() {
    if !opencl_runtime_present() {
        return;
    }
    // The fixture is the doc's example, byte for byte.
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/opencl-slots.md"
    ))
    .unwrap();
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/opencl-slots/xorbytes");
    for f in ["accelerator.toml", "xorbytes.cl"] {
        let text = std::fs::read_to_string(fixtures.join(f)).unwrap();
        assert!(
            doc.contains(text.trim()),
            "docs/opencl-slots.md does not quote the fixture {f}"
        );
    }
    let dir = scratch("docs-example");
    let accels = fixture_dir(&dir);
    let programs = dir.join("programs");
    let config = format!(
        "accelerators_dir = \"{}\"\n{}",
        accels.display(),
        ocl_device(&["xorbytes"], &programs)
    );
    let mut node = TestNode::start(&config);
    let mut rng = Rng(42);
    let payload = rng.bytes(1000);
    let want: Vec<u8> = payload.iter().map(|b| b ^ 0x5a).collect();
    let (status, got) = http_call(&node, "xorbytes", "key=90", &payload);
    assert_eq!((status, got.as_slice()), (200, want.as_slice()));
    let (status, got) = http_call(&node, "xorbytes", "", b"ab");
    assert_eq!(
        (status, got.as_slice()),
        (200, b"ab".as_slice()),
        "key defaults to 0"
    );
    let (status, _) = http_call(&node, "xorbytes", "key=256", b"ab");
    assert_eq!(status, 400, "key is at most 255");
    let rt = runtime();
    let rac = rt
        .block_on(RacClient::connect(&node.rac_addr.to_string()))
        .unwrap();
    let mut params = [0u8; PARAMS_LEN];
    params[0] = 0x5a;
    let out = rt
        .block_on(rac.call(300, params, payload.clone(), 0))
        .unwrap();
    assert_eq!(out.payload, want);
    let entry = node
        .get_json("/v1/accelerators")
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "xorbytes")
        .cloned()
        .unwrap();
    assert_eq!(
        (entry["id"].as_u64(), entry["backends"].clone()),
        (Some(300), serde_json::json!(["opencl"]))
    );

    // The built-ins' program was never built here: the first load builds it, and every
    // later load finds it.
    let first = put_slot(&node, 0, "sobel");
    assert_eq!(first["cached"], false, "{first}");
    let back = put_slot(&node, 0, "xorbytes");
    assert_eq!(back["cached"], true, "{back}");
    let again = put_slot(&node, 0, "sobel");
    assert_eq!(again["cached"], true, "{again}");
    eprintln!(
        "OpenCL slot reconfiguration: first build {:.1} ms, cached {:.2} ms (load {:.2} ms)",
        first["reconfig_ms"].as_f64().unwrap(),
        again["reconfig_ms"].as_f64().unwrap(),
        again["load_ms"].as_f64().unwrap()
    );
    let (status, _) = http_call(&node, "sobel", "width=2&height=2", &[0; 4]);
    assert_eq!(status, 200);
    node.terminate();
    // Across a restart the binary on disk is loaded instead of compiling again.
    let node = TestNode::start(&config);
    let restarted = put_slot(&node, 0, "sobel");
    assert_eq!(restarted["cached"], true, "{restarted}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_manifests_are_refused_and_the_node_starts_with_the_valid_ones() {
    if !opencl_runtime_present() {
        return;
    }
    let dir = scratch("malformed");
    let accels = fixture_dir(&dir);
    let fixture = std::fs::read_to_string(accels.join("xorbytes/accelerator.toml")).unwrap();
    let source = std::fs::read_to_string(accels.join("xorbytes/xorbytes.cl")).unwrap();
    let variant = |folder: &str, name: &str, manifest: String, cl: &str| {
        let d = accels.join(folder);
        std::fs::create_dir_all(&d).unwrap();
        let manifest = manifest
            .replace("name = \"xorbytes\"", &format!("name = \"{name}\""))
            .replace("id = 300\n", "");
        std::fs::write(d.join("accelerator.toml"), manifest).unwrap();
        std::fs::write(d.join("xorbytes.cl"), cl).unwrap();
    };
    variant(
        "missing_kernel",
        "missing_kernel",
        fixture.replace("kernel = \"xorbytes\"", "kernel = \"nosuch\""),
        &source,
    );
    variant(
        "no_build",
        "no_build",
        fixture.clone(),
        "kernel void xorbytes(global uchar *in) { this is not C }",
    );
    variant(
        "bad_offset",
        "bad_offset",
        fixture.replace("offset = 0", "offset = 1"),
        &source,
    );
    variant(
        "overlap",
        "overlap",
        fixture.replace(
            "[payload]",
            "[[params]]\nname = \"mask\"\ntype = \"u16\"\noffset = 2\n\n[payload]",
        ),
        &source,
    );
    let config = format!(
        "accelerators_dir = \"{}\"\n{}",
        accels.display(),
        ocl_device(&["xorbytes"], &dir.join("programs"))
    );
    let node = TestNode::start_logging(&config, &[]);
    let (status, got) = http_call(&node, "xorbytes", "key=1", b"ab");
    assert_eq!((status, got.as_slice()), (200, b"`c".as_slice()));
    let names: Vec<String> = node
        .get_json("/v1/accelerators")
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    let log = node.log();
    for (folder, field, reason) in [
        ("missing_kernel", "opencl", "no kernel named `nosuch`"),
        ("no_build", "opencl", "does not build"),
        ("bad_offset", "params[0].offset", "not aligned"),
        ("overlap", "params[1].offset", "overlaps params[0] `key`"),
    ] {
        assert!(
            !names.contains(&folder.to_string()),
            "{folder} should be refused"
        );
        let file = accels
            .join(folder)
            .join("accelerator.toml")
            .display()
            .to_string();
        let line = log
            .lines()
            .find(|l| l.contains("accelerator manifest refused") && l.contains(&file))
            .unwrap_or_else(|| panic!("no refusal logged for {folder}:\n{log}"));
        assert!(line.contains(field) && line.contains(reason), "{line}");
    }
    // What the runtime's compiler prints on stderr itself ("1 error generated." for
    // no_build) comes out as the node's log lines, not raw text between them.
    let compiler: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("error generated"))
        .collect();
    assert!(
        !compiler.is_empty(),
        "the compiler's own line is missing:\n{log}"
    );
    for line in compiler {
        assert!(
            line.contains(" WARN ") && line.contains("netaccel_node::stderr: "),
            "raw compiler text in the log: {line}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
