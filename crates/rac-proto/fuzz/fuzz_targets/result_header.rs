#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rac_proto::fuzzing::result_header(data));
