//! The harness against real designs under Verilator: the four built-in RTL
//! accelerators give the CPU kernels' outputs (random inputs, the shared vectors, random
//! back-pressure on both streams), calls are counted in cycles, builds are cached, and
//! broken designs are refused or fail with their cause, never hang.
//!
//! Needs Verilator: without it these tests are skipped when CI is unset, and fail when
//! CI=true. Builds go to the default cache (`$HOME/.cache/netaccel/rtl`), so a second
//! run does not compile again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use accel::{Catalog, ParamBlock, PARAMS_LEN};
use netaccel_rtl::{
    compile, default_cache_dir, status, verilator_version, Backpressure, CallLimits, CompileError,
    Design, DesignSource, Shell, Violation,
};

const BUILD_TIME_MAX: Duration = Duration::from_secs(600);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// False (skip) without Verilator when CI is unset; a failure with CI=true.
fn verilator_present() -> bool {
    match verilator_version() {
        Ok(_) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("Verilator is required in CI: {e}")
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// One build at a time: the machine's cores are shared.
static BUILDS: Mutex<()> = Mutex::new(());

fn build(source: DesignSource) -> Result<Arc<Design>, CompileError> {
    let _one = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let compiled = compile(&source, &default_cache_dir(), BUILD_TIME_MAX)?;
    Ok(Design::load(&compiled.library).expect("a compiled design loads"))
}

fn builtin(name: &str) -> Arc<Design> {
    let folder = repo().join("rtl/accelerators").join(name);
    DesignSource::from_paths(
        &[folder.join(format!("netaccel_{name}.v"))],
        &format!("netaccel_{name}"),
    )
    .and_then(build)
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn fixture(top: &str) -> Result<Arc<Design>, CompileError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{top}.v"));
    DesignSource::from_paths(&[path], top).and_then(build)
}

fn header(accel_id: u16, payload_len: usize, params: &ParamBlock) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[..4].copy_from_slice(b"RAC1");
    h[4] = 1;
    h[6..8].copy_from_slice(&accel_id.to_le_bytes());
    h[8..12].copy_from_slice(&(payload_len as u32).to_le_bytes());
    h[12..16].copy_from_slice(&7u32.to_le_bytes());
    h[20..].copy_from_slice(params);
    h
}

fn generous(payload_len: usize) -> CallLimits {
    CallLimits {
        cycles_max: 10_000 + 20 * payload_len as u64,
        output_bytes_max: payload_len,
    }
}

/// xorshift64*: reproducible test data from a seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_payload(rng: &mut Rng, name: &str) -> (ParamBlock, Vec<u8>) {
    let lengths = [0usize, 1, 4, 63, 64, 65, 128, 200, 1024, 4096, 5000];
    let mut len = lengths[rng.below(lengths.len() as u64) as usize];
    let mut params = [0u8; PARAMS_LEN];
    let payload: Vec<u8> = match name {
        "topk" | "minmax" => {
            len -= len % 4;
            let values = len / 4;
            let spread = [3u64, 1000, 1 << 32][rng.below(3) as usize];
            if name == "topk" {
                let k = [1u32, 2, 16, 17, 63, 64][rng.below(6) as usize];
                params[..4].copy_from_slice(&k.to_le_bytes());
                (0..values)
                    .flat_map(|_| {
                        ((rng.below(spread) as i64 - spread as i64 / 2) as i32).to_le_bytes()
                    })
                    .collect()
            } else {
                let scale = [1.0f32, 1e-30, 1e30, 1e-40][rng.below(4) as usize];
                (0..values)
                    .flat_map(|_| {
                        let unit = (rng.below(2_000_001) as f32 - 1_000_000.0) / 1_000_000.0;
                        (unit * scale).to_le_bytes()
                    })
                    .collect()
            }
        }
        _ => (0..len).map(|_| rng.below(256) as u8).collect(),
    };
    (params, payload)
}

fn check_against_cpu(name: &str, params: &ParamBlock, payload: &[u8], got: &[u8]) {
    let catalog = Catalog::builtin();
    let kernel = catalog.by_name(name).expect("a built-in");
    let mut want = Vec::new();
    kernel
        .run(params, payload, &mut want)
        .expect("a valid call");
    if name != "minmax" {
        assert_eq!(got, want, "{name}: payload of {} bytes", payload.len());
        return;
    }
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.chunks_exact(4).zip(want.chunks_exact(4)).enumerate() {
        let g = f32::from_le_bytes(g.try_into().unwrap());
        let w = f32::from_le_bytes(w.try_into().unwrap());
        assert!((g - w).abs() <= 1e-6, "minmax value {i}: {g} vs {w}");
    }
}

#[test]
fn builtin_designs_give_the_cpu_kernels_outputs_under_random_backpressure() {
    if !verilator_present() {
        return;
    }
    for (name, id) in [
        ("echo", 1u16),
        ("to_uppercase", 2),
        ("topk", 3),
        ("minmax", 5),
    ] {
        let design = builtin(name);
        for (pattern, backpressure) in [
            ("none", Backpressure::none()),
            ("random", Backpressure::random(0.4, 0x5eed ^ id as u64)),
        ] {
            let mut shell = Shell::new(design.instantiate(), backpressure);
            let mut rng = Rng(0x1234_5678 + id as u64);
            for _ in 0..40 {
                let (params, payload) = random_payload(&mut rng, name);
                let outcome = shell
                    .call(
                        &header(id, payload.len(), &params),
                        &payload,
                        generous(payload.len()),
                    )
                    .unwrap_or_else(|v| panic!("{name} ({pattern}): {v}"));
                assert_eq!(outcome.status, status::OK, "{name} ({pattern})");
                check_against_cpu(name, &params, &payload, &outcome.output);
            }
        }
    }
}

#[test]
fn shared_vectors_give_their_expected_outputs() {
    if !verilator_present() {
        return;
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
    for vector in vectors.as_array().unwrap() {
        let (Some(h), Some(expect)) = (
            vector["header_hex"].as_str(),
            vector["expect_output_hex"].as_str(),
        ) else {
            continue;
        };
        let h: [u8; 64] = hex(h).try_into().unwrap();
        let name = match u16::from_le_bytes([h[6], h[7]]) {
            1 => "echo",
            2 => "to_uppercase",
            3 => "topk",
            5 => "minmax",
            _ => continue,
        };
        let payload = hex(vector["payload_hex"].as_str().unwrap());
        let mut shell = Shell::new(builtin(name).instantiate(), Backpressure::random(0.3, 9));
        let outcome = shell
            .call(&h, &payload, generous(payload.len().max(64)))
            .unwrap();
        assert_eq!(
            (outcome.status, outcome.output),
            (status::OK, hex(expect)),
            "{}",
            vector["name"]
        );
        checked += 1;
    }
    assert!(
        checked >= 3,
        "only {checked} vectors for the RTL accelerators"
    );
}

#[test]
fn cycles_are_counted_from_the_header_beat_to_the_last_output_beat() {
    if !verilator_present() {
        return;
    }
    let mut shell = Shell::new(builtin("echo").instantiate(), Backpressure::none());
    let params = [0u8; PARAMS_LEN];
    for beats in [0usize, 1, 2, 16, 64] {
        let payload = vec![0x5a; beats * 64];
        let outcome = shell
            .call(
                &header(1, payload.len(), &params),
                &payload,
                generous(payload.len()),
            )
            .unwrap();
        // Header in cycle 1, payload beat i in cycle 1 + i, each answered one register
        // stage later; an empty payload's empty beat too.
        assert_eq!(outcome.cycles, beats as u64 + 2, "{beats} beats");
    }
    // topk takes 16 cycles per beat of 16 values.
    let mut shell = Shell::new(builtin("topk").instantiate(), Backpressure::none());
    let mut params = [0u8; PARAMS_LEN];
    params[0] = 8;
    let payload = vec![1u8; 64 * 64];
    let outcome = shell
        .call(
            &header(3, payload.len(), &params),
            &payload,
            generous(payload.len()),
        )
        .unwrap();
    assert!(
        (64 * 16..64 * 16 + 8).contains(&outcome.cycles),
        "{}",
        outcome.cycles
    );
}

#[test]
fn topk_refuses_k_beyond_its_maximum_with_bad_request() {
    if !verilator_present() {
        return;
    }
    let mut shell = Shell::new(builtin("topk").instantiate(), Backpressure::random(0.3, 5));
    let payload: Vec<u8> = (0..100i32).flat_map(|v| v.to_le_bytes()).collect();
    for k in [0u32, 65, u32::MAX] {
        let mut params = [0u8; PARAMS_LEN];
        params[..4].copy_from_slice(&k.to_le_bytes());
        let outcome = shell
            .call(&header(3, payload.len(), &params), &payload, generous(400))
            .unwrap();
        assert_eq!(
            (outcome.status, outcome.output.len()),
            (status::BAD_REQUEST, 0),
            "k = {k}"
        );
    }
    let mut params = [0u8; PARAMS_LEN];
    params[0] = 64;
    let outcome = shell
        .call(&header(3, payload.len(), &params), &payload, generous(400))
        .unwrap();
    assert_eq!(outcome.status, status::OK);
    check_against_cpu("topk", &params, &payload, &outcome.output);
}

#[test]
fn builds_are_cached_by_content() {
    if !verilator_present() {
        return;
    }
    builtin("echo");
    let source = DesignSource::from_paths(
        &[repo().join("rtl/accelerators/echo/netaccel_echo.v")],
        "netaccel_echo",
    )
    .unwrap();
    let again = compile(&source, &default_cache_dir(), BUILD_TIME_MAX).unwrap();
    assert!(
        again.cached,
        "the second build of the same sources comes from the cache"
    );
    // The same text under another top name is another design.
    let copy = std::env::temp_dir().join(format!("netaccel-rtl-cache-test-{}", std::process::id()));
    let text = String::from_utf8(source.files[0].1.clone()).unwrap();
    let changed = text.replace("module netaccel_echo", "module netaccel_echo_copy");
    let cache = copy.join("cache");
    let other = DesignSource {
        files: vec![("echo_copy.v".into(), changed.into_bytes())],
        top: "netaccel_echo_copy".into(),
    };
    let first = {
        let _one = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
        compile(&other, &cache, BUILD_TIME_MAX).unwrap()
    };
    assert!(!first.cached);
    assert_ne!(first.digest, again.digest);
    assert!(compile(&other, &cache, BUILD_TIME_MAX).unwrap().cached);
    // Names that would leave the build folder are refused before anything is written.
    for name in ["../x.v", "/tmp/x.v", "", "a\"b.v"] {
        let bad = DesignSource {
            files: vec![(name.into(), Vec::new())],
            top: "t".into(),
        };
        let err = compile(&bad, &cache, BUILD_TIME_MAX).unwrap_err();
        assert!(matches!(err, CompileError::Input(_)), "{name:?}: {err}");
    }
    std::fs::remove_dir_all(&copy).unwrap();
}

#[test]
fn designs_without_the_interface_ports_are_refused_with_the_port() {
    if !verilator_present() {
        return;
    }
    match fixture("missing_tuser") {
        Err(CompileError::Ports(m)) => assert!(m.contains("m_axis_tuser"), "{m}"),
        Err(other) => panic!("missing port: {other}"),
        Ok(_) => panic!("a design without m_axis_tuser was accepted"),
    }
    match fixture("narrow_data") {
        Err(CompileError::Ports(m)) => {
            assert!(m.contains("s_axis_tdata") && m.contains("256"), "{m}")
        }
        Err(other) => panic!("wrong width: {other}"),
        Ok(_) => panic!("a 256-bit s_axis_tdata was accepted"),
    }
    let err = fixture("no_such_module").err().expect("a missing source");
    assert!(err.to_string().contains("no_such_module.v"), "{err}");
    // A module that is not among the sources.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/never_last.v");
    let source = DesignSource::from_paths(&[path], "not_there").unwrap();
    let err = build(source).err().expect("an unknown top module");
    assert!(err.to_string().contains("not_there"), "{err}");
}

#[test]
fn broken_designs_fail_the_call_with_the_cause_and_are_reset() {
    if !verilator_present() {
        return;
    }
    let params = [0u8; PARAMS_LEN];
    let payload = vec![7u8; 300];
    let limits = CallLimits {
        cycles_max: 2_000,
        output_bytes_max: payload.len(),
    };

    let mut shell = Shell::new(
        fixture("never_last").unwrap().instantiate(),
        Backpressure::random(0.2, 3),
    );
    for _ in 0..2 {
        let err = shell
            .call(&header(300, payload.len(), &params), &payload, limits)
            .unwrap_err();
        assert!(
            matches!(
                err,
                Violation::CyclesExceeded {
                    cycles_max: 2_000,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("never asserted m_axis_tlast"),
            "{err}"
        );
    }

    let mut shell = Shell::new(
        fixture("double_echo").unwrap().instantiate(),
        Backpressure::none(),
    );
    let err = shell
        .call(&header(300, payload.len(), &params), &payload, limits)
        .unwrap_err();
    assert_eq!(
        err,
        Violation::OutputTooLong {
            output_bytes_max: 300
        }
    );
    // With room for the doubled output the same design answers: the reset after the
    // failure left it ready for the next call.
    let roomy = CallLimits {
        output_bytes_max: 600,
        ..limits
    };
    let outcome = shell
        .call(&header(300, payload.len(), &params), &payload, roomy)
        .unwrap();
    assert_eq!(outcome.output.len(), 600);

    // A design that stops taking input: echo's output is never taken.
    let mut shell = Shell::new(
        builtin("echo").instantiate(),
        Backpressure {
            input_pause: 0.0,
            output_pause: 1.0,
            seed: 1,
        },
    );
    let err = shell
        .call(&header(1, payload.len(), &params), &payload, limits)
        .unwrap_err();
    assert!(err.to_string().contains("stopped accepting input"), "{err}");
}

#[test]
fn synthesis_counts_the_registers_a_design_has() {
    if std::process::Command::new("yosys")
        .arg("-V")
        .output()
        .is_err()
    {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("yosys is required in CI");
        }
        eprintln!("skipped: yosys is not installed");
        return;
    }
    let folder = repo().join("rtl/accelerators/echo");
    let source =
        DesignSource::from_paths(&[folder.join("netaccel_echo.v")], "netaccel_echo").unwrap();
    let cache = std::env::temp_dir().join(format!("netaccel-synth-test-{}", std::process::id()));
    assert_eq!(
        netaccel_rtl::cached_resources(&source, "xcup", &cache),
        None
    );
    let (r, cached) = netaccel_rtl::synth_cached(&source, "xcup", &cache).unwrap();
    assert!(!cached);
    assert_eq!(
        netaccel_rtl::synth_cached(&source, "xcup", &cache).unwrap(),
        (r.clone(), true)
    );
    assert_eq!(
        netaccel_rtl::cached_resources(&source, "xcup", &cache),
        Some(r.clone())
    );
    std::fs::remove_dir_all(&cache).unwrap();
    // echo registers one output beat: 512 data bits, 64 keep bits, tlast, tvalid, and
    // its one state bit; out of context, so no I/O buffers.
    assert_eq!(r.ff, 512 + 64 + 3, "{r:?}");
    assert!(r.lut > 0 && r.dsp == 0 && r.bram36 == 0.0, "{r:?}");
    assert!(
        !r.cells.contains_key("IBUF") && !r.cells.contains_key("BUFG"),
        "{r:?}"
    );
    let broken = DesignSource {
        files: vec![("x.v".into(), b"module x(; endmodule".to_vec())],
        top: "x".into(),
    };
    assert!(netaccel_rtl::synth(&broken, "xcup").is_err());
}
