//! One hostile client's whole conversation with a live service (see
//! `ocl_remote::fuzzing`). The service runs in this process, so a conversation that
//! crashes or aborts the node — or its OpenCL runtime — is a crash here.
#![no_main]

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use ocl_remote::service::{spawn, ServiceConfig, ServiceHandle};

fn service() -> SocketAddr {
    static SERVICE: OnceLock<ServiceHandle> = OnceLock::new();
    SERVICE
        .get_or_init(|| {
            let mut registry = prometheus_client::registry::Registry::default();
            spawn(
                "127.0.0.1:0".parse().unwrap(),
                ServiceConfig::default(),
                &mut registry,
            )
            .expect("an OpenCL runtime with a device")
        })
        .local_addr()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ocl_remote::fuzzing::drive_session(service(), data, Duration::from_millis(20));
});
