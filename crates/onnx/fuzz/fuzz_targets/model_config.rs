#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netaccel_onnx::config::fuzzing::model_config(data));
