#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netaccel_onnx::image::fuzzing::image_input(data));
