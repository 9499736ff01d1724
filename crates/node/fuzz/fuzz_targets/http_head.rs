#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netaccel_node::http::parse::fuzzing::http_head(data));
