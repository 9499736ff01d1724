//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) on stable Rust:
//! `decode` through the decoders, `session` through a live service while another
//! client works beside it. After every hostile conversation the service must still
//! answer, the other client's results must be right, and the conversation's objects
//! must be released. The session replay needs an OpenCL runtime with a device (PoCL).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{inc, read_cmd, service, Client};
use ocl_remote::service::ServiceConfig;
use ocl_remote::{cl, fuzzing};

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    testkit::fuzz_corpus::corpus(env!("CARGO_MANIFEST_DIR"), target)
}

#[test]
fn decode_corpus() {
    testkit::fuzz_corpus::replay(
        env!("CARGO_MANIFEST_DIR"),
        "decode",
        ocl_remote::proto::fuzz_one,
    );
}

#[test]
fn session_corpus_leaves_the_service_and_its_other_clients_whole() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let mut bystander = Client::connect(svc.local_addr()).unwrap();
    // Its task is two frames (enqueue, flush): without this, Nagle holds the flush
    // until the service's delayed ACK of the first, 40 ms a round.
    bystander.stream.set_nodelay(true).unwrap();
    bystander.setup(0);
    let own_objects = svc.client_objects();
    for (round, (path, data)) in (1i32..).zip(corpus("session")) {
        // Played to its end: the service ends the session after the client's last
        // request (a hang times out).
        ocl_remote::fuzzing::drive_session(svc.local_addr(), &data, fuzzing::PATIENCE)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // The bystander's buffer counts its tasks: each adds one to every int.
        let (status, _, reads) = bystander.task(vec![inc(2, 5, 3, 0), read_cmd(2, 3, 0)]);
        assert_eq!(status, cl::CL_SUCCESS, "after {}", path.display());
        let want: Vec<u8> = (0..16).flat_map(|_| round.to_le_bytes()).collect();
        assert_eq!(reads[0].1, want, "after {}", path.display());
        // The conversation's session ended and released what it held. A session ends
        // after its last task, which may still be compiling a program: under a loaded
        // machine PoCL's compile alone has taken seconds, and one run here waited > 10 s.
        let deadline = Instant::now() + Duration::from_secs(30);
        while svc.clients_connected() > 1 || svc.client_objects() != own_objects {
            assert!(
                Instant::now() < deadline,
                "{}: {} clients and {} objects remain",
                path.display(),
                svc.clients_connected(),
                svc.client_objects()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The fuzz target's harness over the seed inputs: each session ends and leaves
/// nothing behind (the harness panics otherwise).
#[test]
fn the_fuzz_harness_plays_the_seeds_to_their_end() {
    // The runtime is there (or its absence is reported) before the harness needs it.
    let Some(_probe) = service(ServiceConfig::default()) else {
        return;
    };
    let harness = fuzzing::Harness::start().expect("a service with a device");
    let seeds: Vec<_> = corpus("session")
        .into_iter()
        .filter(|(path, _)| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("seed-")
        })
        .collect();
    assert!(!seeds.is_empty(), "no seed inputs");
    for (_, data) in &seeds {
        harness.run(data);
    }
}
