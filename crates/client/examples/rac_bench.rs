//! The Rust client's program of `bench/clients/run.sh`: 64-byte echo calls on one
//! connection with [`RacClient`], first one at a time (latency: p50), then with
//! `--inflight` calls in flight on the pipelined path ([`RacClient::submit`], calls/s);
//! prints one JSON line. The other languages'
//! programs under `bench/clients/<language>/` do the same with their clients.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use clap::Parser;
use netaccel_client::rac::RacClient;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    node: String,
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    #[arg(long, default_value_t = 64)]
    size: usize,
    #[arg(long, default_value_t = 32)]
    inflight: usize,
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let line = runtime.block_on(async {
        let client = RacClient::connect(&args.node).await.expect("connect");
        let payload = vec![b'x'; args.size];
        let span = Duration::from_secs_f64(args.seconds);
        let mut latencies_ns = Vec::new();
        let start = Instant::now();
        while start.elapsed() < span {
            let t = Instant::now();
            let out = client
                .call(1, [0; 44], payload.clone(), 0)
                .await
                .expect("call");
            latencies_ns.push(t.elapsed().as_nanos() as u64);
            assert_eq!(out.payload.len(), args.size);
        }
        latencies_ns.sort_unstable();
        let p50_ns = latencies_ns[latencies_ns.len() / 2];
        // Pipelined: `inflight` calls submitted (one write each, no task per call);
        // the oldest awaited, and another submitted in its place.
        let client = client.with_in_flight_max(args.inflight);
        let mut pending = VecDeque::with_capacity(args.inflight);
        let start = Instant::now();
        let mut done = 0u64;
        loop {
            while pending.len() < args.inflight && start.elapsed() < span {
                pending.push_back(client.submit(1, [0; 44], &payload, 0).await.expect("sent"));
            }
            let Some(oldest) = pending.pop_front() else {
                break;
            };
            let out = oldest.await.expect("call");
            assert_eq!(out.payload.len(), args.size);
            done += 1;
        }
        let rate = done as f64 / start.elapsed().as_secs_f64();
        serde_json::json!({
            "client": "rust",
            "sync_p50_us": p50_ns as f64 / 1000.0,
            "sync_calls": latencies_ns.len(),
            "pipelined_calls_per_s": rate.round(),
        })
    });
    println!("{line}");
}
