#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ocl_remote::proto::fuzz_one(data));
