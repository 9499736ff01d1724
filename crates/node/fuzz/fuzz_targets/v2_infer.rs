#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netaccel_node::front::oip::infer::fuzzing::v2_infer(data));
