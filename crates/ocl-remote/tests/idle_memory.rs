//! A node whose clients have all left holds no more memory than before they came: what
//! their tasks allocated (frame bodies, read results) goes back to the system, not only
//! to the allocator, and no spare buffer is kept for clients that are gone.
//!
//! Its own test binary: it measures the anonymous memory of this process, which runs the
//! service, so no other test may allocate beside it.

mod common;

use std::time::{Duration, Instant};

use common::{service, Client};
use ocl_remote::cl;
use ocl_remote::proto::{Command, Request};
use ocl_remote::service::ServiceConfig;

/// Anonymous memory of this process in bytes (heap, arenas, anonymous mappings; not
/// the pages of the libraries the runtime loads, which the system may drop at will).
fn anonymous_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("Anonymous:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("Anonymous in smaps_rollup")
        << 10
}

const MIB: u64 = 1 << 20;
/// The pieces the ICD sends a large write in.
const PIECE: usize = 8 << 20;

/// One client's session over the network path: four 64 MiB buffers written in 8 MiB
/// pieces, read back whole, then released.
fn large_transfers(c: &mut Client) {
    c.setup(0);
    let data = vec![7u8; PIECE];
    for round in 0..2u64 {
        let buffer = 100 + round;
        let size = 256 * MIB;
        let (status, _) = c.call(&Request::CreateBuffer {
            id: buffer,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size,
            data: &[],
        });
        assert_eq!(status, cl::CL_SUCCESS);
        // One frame per piece, as the ICD sends them, of sizes that vary as the ICD's
        // frames do (commands before a piece share its frame).
        let mut offset = 0;
        let mut piece = 0;
        while offset < size {
            let len = (PIECE as u64 - piece * 4096).min(size - offset);
            c.send(&Request::enqueue(vec![Command::Write {
                queue: 2,
                event: 0,
                buffer,
                offset,
                data: &data[..len as usize],
            }]));
            offset += len;
            piece += 1;
        }
        let (status, _, reads) = c.task(vec![Command::Read {
            queue: 2,
            event: 0,
            buffer,
            offset: 0,
            size,
            token: 1,
        }]);
        assert_eq!(status, cl::CL_SUCCESS);
        assert_eq!(reads.iter().map(|(_, d)| d.len() as u64).sum::<u64>(), size);
        assert!(reads.iter().all(|(_, d)| d.iter().all(|&b| b == 7)));
        c.send(&Request::Release { id: buffer });
    }
}

#[test]
fn memory_returns_to_its_idle_figure_when_the_clients_have_left() {
    let Some((svc, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    // A first client compiles a kernel and moves a little data: what the runtime keeps
    // for the rest of the process's life (its compiler's state) is part of idle.
    let mut warm = Client::connect(svc.local_addr()).unwrap();
    warm.setup(1);
    drop(warm);
    let deadline = Instant::now() + Duration::from_secs(10);
    while svc.clients_connected() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let idle = anonymous_bytes();

    let mut c = Client::connect(svc.local_addr()).unwrap();
    large_transfers(&mut c);
    let busy = anonymous_bytes();
    drop(c);

    // Some slack for the allocator's own state and the runtime's caches.
    let slack = 24 * MIB;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = anonymous_bytes();
        if svc.clients_connected() == 0 && now <= idle + slack {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "idle {} MiB, with the client {} MiB, 10 s after it left {} MiB",
            idle / MIB,
            busy / MIB,
            now / MIB
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
