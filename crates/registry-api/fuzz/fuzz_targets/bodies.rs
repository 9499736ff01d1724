#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| registry_api::fuzzing::bodies(data));
