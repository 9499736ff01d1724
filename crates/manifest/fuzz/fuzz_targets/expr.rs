#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| manifest::fuzzing::expr(data));
