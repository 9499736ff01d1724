#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| netaccel_node::front::grpc::tensor::fuzzing::grpc_infer(data));
