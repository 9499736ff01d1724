#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rac_proto::fuzzing::control_json(data));
