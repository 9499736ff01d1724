//! A repository model in process, no network: the cost of running it alone on its
//! engine (tract, or ONNX Runtime when its config says so), for bench/cnn (is the
//! engine or the transport the bottleneck?).
//!
//! Usage: inproc REPOSITORY MODEL BATCH CALLS [ONNXRUNTIME_LIBRARY]
//!
//! Runs CALLS calls of BATCH items, one after the other on this thread, through a
//! slot's session (as the node runs them), after a warm-up of CALLS/10; prints one
//! JSON line with calls/s and the p50/p99 of one call in µs. The payload is
//! netaccel-bench's (lower-case letters, read as the model's inputs), so the node and
//! this run compute on the same bytes.

use std::time::Instant;

use accel::Accelerator;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let (repo, name, batch, calls, library) = match args.as_slice() {
        [_, repo, name, batch, calls] => (repo, name, batch, calls, None),
        [_, repo, name, batch, calls, library] => (repo, name, batch, calls, Some(library)),
        _ => return Err("usage: inproc REPOSITORY MODEL BATCH CALLS [ONNXRUNTIME_LIBRARY]".into()),
    };
    let batch: usize = batch.parse().map_err(|_| "BATCH: a number")?;
    let calls: usize = calls.parse().map_err(|_| "CALLS: a number")?;
    let scan = netaccel_onnx::scan(std::path::Path::new(repo))?;
    let found = scan
        .found
        .into_iter()
        .find(|f| f.name == *name)
        .ok_or(format!("no model {name} in {repo}"))?;
    let engines = netaccel_onnx::Engines {
        onnxruntime_library: library.map(Into::into),
    };
    let model = found.into_model(256, &engines)?;
    let bytes = model.tensors().expect("a model").input_item_bytes() * batch;
    let payload: Vec<u8> = b"abcdefghijklmnopqrstuvwxyz"
        .iter()
        .copied()
        .cycle()
        .take(bytes)
        .collect();
    let session = model.session()?;
    let mut out = Vec::new();
    for _ in 0..calls / 10 {
        session.run(&payload, &mut out).map_err(|e| e.to_string())?;
    }
    let mut took_ns = Vec::with_capacity(calls);
    let start = Instant::now();
    for _ in 0..calls {
        let t = Instant::now();
        session.run(&payload, &mut out).map_err(|e| e.to_string())?;
        took_ns.push(t.elapsed().as_nanos() as u64);
    }
    let secs = start.elapsed().as_secs_f64();
    took_ns.sort_unstable();
    let pct = |p: f64| took_ns[((took_ns.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    println!(
        "{{\"engine\":\"{}\",\"batch\":{batch},\"calls\":{calls},\"calls_per_s\":{:.1},\"p50_us\":{:.2},\"p99_us\":{:.2}}}",
        model.backend().name(),
        calls as f64 / secs,
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}
