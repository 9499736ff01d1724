//! One hostile client's whole conversation with a live service (see
//! `ocl_remote::fuzzing::Harness`). The service runs in this process, so a conversation
//! that crashes or aborts the node — or its OpenCL runtime — is a crash here; one that
//! hangs the service or leaves anything of its session behind fails the harness.
#![no_main]

use std::sync::OnceLock;

use ocl_remote::fuzzing::Harness;

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| Harness::start().expect("an OpenCL runtime with a device"))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness().run(data));
