//! Measures the RTL harness in-process (bench/rtl/run.sh runs it): simulation speed in
//! cycles per second, calls per second of one model for 64-byte and 4 KiB calls, and
//! the cycles each built-in takes per call at 1, 4 and 32 KiB with the latency they
//! stand for at 250 MHz. One thread, one model at a time.
//!
//! Usage: rtl_bench [SECONDS_PER_POINT]   (default 2)

use std::path::Path;
use std::time::{Duration, Instant};

use netaccel_rtl::{
    compile, default_cache_dir, Backpressure, CallLimits, Design, DesignSource, Shell,
};

const CLOCK_MHZ: f64 = 250.0;

fn header(accel_id: u16, payload_len: usize, k: u32) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[..4].copy_from_slice(b"RAC1");
    h[4] = 1;
    h[6..8].copy_from_slice(&accel_id.to_le_bytes());
    h[8..12].copy_from_slice(&(payload_len as u32).to_le_bytes());
    h[20..24].copy_from_slice(&k.to_le_bytes());
    h
}

fn payload(name: &str, len: usize) -> Vec<u8> {
    match name {
        "minmax" => (0..len / 4)
            .flat_map(|i| ((i * 7919 % 1000) as f32 / 10.0).to_le_bytes())
            .collect(),
        "topk" => (0..len / 4)
            .flat_map(|i| ((i as i32).wrapping_mul(-1_640_531_535)).to_le_bytes())
            .collect(),
        _ => (0..len).map(|i| b'a' + (i % 26) as u8).collect(),
    }
}

fn main() {
    let seconds: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("seconds per point"))
        .unwrap_or(2.0);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let designs = [
        ("echo", 1u16),
        ("to_uppercase", 2),
        ("topk", 3),
        ("minmax", 5),
    ];

    println!("| accelerator | payload | cycles/call | modelled at {CLOCK_MHZ} MHz | calls/s (simulated) | simulated cycles/s |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, id) in designs {
        let source = DesignSource::from_paths(
            &[repo.join(format!("rtl/accelerators/{name}/netaccel_{name}.v"))],
            &format!("netaccel_{name}"),
        )
        .expect("the built-in's source");
        let compiled = compile(&source, &default_cache_dir(), Duration::from_secs(900))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let design = Design::load(&compiled.library).expect("loads");
        let mut shell = Shell::new(design.instantiate(), Backpressure::none());
        for len in [64usize, 1024, 4096, 32 * 1024] {
            let body = payload(name, len);
            let h = header(id, len, 16);
            let limits = CallLimits {
                cycles_max: 1_000_000,
                output_bytes_max: len,
            };
            let started = Instant::now();
            let mut calls = 0u64;
            let mut cycles_per_call = 0;
            while started.elapsed().as_secs_f64() < seconds {
                let outcome = shell.call(&h, &body, limits).expect("a valid call");
                assert_eq!(outcome.status, 0);
                cycles_per_call = outcome.cycles;
                calls += 1;
            }
            let elapsed = started.elapsed().as_secs_f64();
            let modelled_us = cycles_per_call as f64 / CLOCK_MHZ;
            println!(
                "| {name} | {} | {cycles_per_call} | {modelled_us:.3} µs | {:.0} | {:.2} M |",
                if len >= 1024 {
                    format!("{} KiB", len / 1024)
                } else {
                    format!("{len} B")
                },
                calls as f64 / elapsed,
                (calls * cycles_per_call) as f64 / elapsed / 1e6,
            );
        }
    }
}
