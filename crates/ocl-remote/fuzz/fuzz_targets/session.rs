//! One hostile client's whole conversation with a live service (see
//! `ocl_remote::fuzzing::Harness`). The service runs in this process, so a conversation
//! that crashes or aborts the node — or its OpenCL runtime — is a crash here; one that
//! hangs the service or leaves anything of its session behind fails the harness.
#![no_main]

use std::ffi::OsString;
use std::sync::OnceLock;

use ocl_remote::fuzzing::Harness;

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| Harness::start().expect("an OpenCL runtime with a device"))
}

/// Writes each input, before it runs, to the file `FUZZ_LAST_INPUT` names, if any. An
/// abort inside the OpenCL runtime (a PoCL assertion) ended a campaign without
/// libFuzzer's report and without the input that caused it: libFuzzer's handler never
/// ran (the runtime and the compiler it loads set signal handlers of their own).
/// `bench/fuzz/run.sh` sets the variable and keeps the file as the crash input when
/// the target dies without one. (One small write per input; an input costs
/// milliseconds.)
fn keep(data: &[u8]) {
    static LAST: OnceLock<Option<OsString>> = OnceLock::new();
    if let Some(path) = LAST.get_or_init(|| std::env::var_os("FUZZ_LAST_INPUT")) {
        let _ = std::fs::write(path, data);
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    keep(data);
    harness().run(data)
});
