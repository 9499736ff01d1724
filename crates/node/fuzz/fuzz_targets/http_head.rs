#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netaccel_node::front::http::parse::fuzzing::http_head(data));
