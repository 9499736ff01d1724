//! Development binary: the node's remote OpenCL service alone, without the node.
//!
//! `netaccel-ocl-service --listen 127.0.0.1:9500 [--platform NAME]... [--poll-us N]
//! [--isolation session|shared|none] [--spares N]`
//!
//! It is also the program of its own isolated runtime processes (see
//! `ocl_remote::service::isolate`).

use std::net::SocketAddr;
use std::process::ExitCode;

use ocl_remote::service::{isolate, spawn, ServiceConfig};
use prometheus_client::registry::Registry;

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().collect();
    if all.get(1).map(String::as_str) == Some(isolate::SUBCOMMAND) {
        return isolate::runtime_main(&all[2..]);
    }
    let mut listen: SocketAddr = "127.0.0.1:9500".parse().expect("valid default");
    let mut config = ServiceConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        match (arg.as_str(), value) {
            ("--listen", Some(v)) => match v.parse() {
                Ok(a) => listen = a,
                Err(e) => {
                    eprintln!("--listen {v}: {e}");
                    return ExitCode::from(2);
                }
            },
            ("--platform", Some(v)) => config.platforms.push(v),
            ("--spares", Some(v)) => match v.parse() {
                Ok(n) => config.runtime_spares = n,
                Err(e) => {
                    eprintln!("--spares {v}: {e}");
                    return ExitCode::from(2);
                }
            },
            ("--isolation", Some(v)) => match v.parse() {
                Ok(i) => config.isolation = i,
                Err(e) => {
                    eprintln!("--isolation: {e}");
                    return ExitCode::from(2);
                }
            },
            ("--poll-us", Some(v)) => match v.parse() {
                Ok(us) => config.poll_before_sleep = std::time::Duration::from_micros(us),
                Err(e) => {
                    eprintln!("--poll-us {v}: {e}");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!(
                    "usage: netaccel-ocl-service [--listen ADDR] [--platform NAME]... [--poll-us N] [--isolation session|shared|none] [--spares N]"
                );
                return ExitCode::from(2);
            }
        }
    }
    let mut registry = Registry::default();
    match spawn(listen, config, &mut registry) {
        Ok(handle) => {
            println!("serving remote OpenCL on {}", handle.local_addr());
            for (i, name) in handle.device_names().iter().enumerate() {
                println!("  device {i}: {name}");
            }
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("netaccel-ocl-service: {e}");
            ExitCode::FAILURE
        }
    }
}
