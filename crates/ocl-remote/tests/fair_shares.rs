//! Two remote sessions on one device get fair shares of its time (the service's
//! `turns`): a session that keeps long tasks in flight does not starve one that waits
//! for each short task's result, nor the reverse; every task is answered once, in its
//! session's order. Without an OpenCL runtime the test skips (and fails with `CI=true`).

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{service, Client};
use ocl_remote::cl;
use ocl_remote::proto::{Command, KernelArg, NdRange, Queued, Request};
use ocl_remote::service::ServiceConfig;

/// Integers, each raised by one after `rounds` rounds of arithmetic.
const WORK: &[u8] = b"__kernel void work(__global int *v, int rounds) {
    size_t i = get_global_id(0);
    int x = v[i];
    for (int r = 0; r < rounds; r++) x = x * 1103515245 + 12345;
    v[i] = v[i] + 1 + (x == 0x7fffffff && rounds < 0);
}";
const ITEMS: u64 = 1 << 14;

fn ok(c: &mut Client, request: Request<'_>) {
    assert_eq!(c.call(&request).0, cl::CL_SUCCESS);
}

/// Context 1, queue 2, buffer 3 of zeros, program 4, kernel 5 (`work`).
fn worker(c: &mut Client) {
    let device = c.info.1[0][0];
    c.setup_context();
    ok(
        c,
        Request::CreateQueue {
            id: 2,
            context: 1,
            device,
            properties: 0,
        },
    );
    let zeros = vec![0u8; (ITEMS * 4) as usize];
    ok(
        c,
        Request::CreateBuffer {
            id: 3,
            context: 1,
            flags: cl::CL_MEM_READ_WRITE,
            size: ITEMS * 4,
            data: &zeros,
        },
    );
    ok(
        c,
        Request::CreateProgramWithSource {
            id: 4,
            context: 1,
            source: WORK,
        },
    );
    ok(
        c,
        Request::BuildProgram {
            program: 4,
            devices: vec![],
            options: b"",
        },
    );
    assert_eq!(
        c.call(&Request::CreateKernel {
            id: 5,
            program: 4,
            name: b"work",
        })
        .0,
        cl::CL_SUCCESS
    );
}

fn work(rounds: &[u8; 4]) -> Command<'_> {
    Command::NdRange(NdRange {
        queue: 2,
        event: 0,
        kernel: 5,
        work_dim: 1,
        offset: [0; 3],
        global: [ITEMS, 0, 0],
        local: Some([64, 0, 0]),
        args: vec![KernelArg::Mem(3), KernelArg::Bytes(rounds)],
    })
}

/// The first 16 values of buffer 3 are all `done`.
fn check(c: &mut Client, done: i32) {
    let (status, _, reads) = c.task(vec![common::read_cmd(2, 3, 0)]);
    assert_eq!(status, cl::CL_SUCCESS);
    let values: Vec<i32> = reads[0]
        .1
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(
        values.iter().all(|&v| v == done),
        "{values:?} after {done} tasks"
    );
}

/// A session that waits for each short task (the kernel, 200 rounds, and a read).
struct Waiting<'a>(&'a mut Client, i32);

impl Waiting<'_> {
    fn run(&mut self, stop: &AtomicBool) -> u64 {
        let rounds = 200i32.to_le_bytes();
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let (status, _, _) = self.0.task(vec![work(&rounds), common::read_cmd(2, 3, 0)]);
            assert_eq!(status, cl::CL_SUCCESS);
            self.1 += 1;
            n += u64::from(!stop.load(Ordering::Relaxed));
        }
        check(self.0, self.1);
        n
    }
}

/// A session that keeps 8 long tasks (the kernel, 800 rounds) flushed and unanswered.
struct Pipelining<'a>(&'a mut Client, i32);

impl Pipelining<'_> {
    fn run(&mut self, stop: &AtomicBool) -> u64 {
        let rounds = 800i32.to_le_bytes();
        let mut flying = VecDeque::new();
        let mut n = 0;
        loop {
            while !stop.load(Ordering::Relaxed) && flying.len() < 8 {
                let commands = vec![Queued::from(work(&rounds))];
                self.0.send(&Request::Enqueue { commands });
                flying.push_back(self.0.send(&Request::Flush));
            }
            let Some(id) = flying.pop_front() else {
                break;
            };
            match self.0.read_frame() {
                (got, common::Frame::TaskDone(status, _)) => {
                    assert_eq!(got, id, "tasks answered once each, in order");
                    assert_eq!(status, cl::CL_SUCCESS);
                }
                _ => panic!("unexpected frame"),
            }
            // What is still in flight at the stop is answered but not counted.
            self.1 += 1;
            n += u64::from(!stop.load(Ordering::Relaxed));
        }
        check(self.0, self.1);
        n
    }
}

/// Runs `f` for `secs` seconds with a stop flag it watches: its count (of what ended
/// before the stop) and the seconds until the stop.
fn for_secs(secs: f64, f: impl FnOnce(&AtomicBool) -> u64 + Send) -> (u64, f64) {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|s| {
        let h = s.spawn(|| f(&stop));
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        let t = started.elapsed().as_secs_f64();
        (h.join().unwrap(), t)
    })
}

#[test]
fn a_session_with_long_tasks_in_flight_and_one_waiting_for_short_tasks_share_the_device() {
    let Some((_service, _registry)) = service(ServiceConfig::default()) else {
        return;
    };
    let addr = _service.local_addr();
    let (mut a, mut b) = (
        Client::connect(addr).unwrap(),
        Client::connect(addr).unwrap(),
    );
    worker(&mut a);
    worker(&mut b);
    let mut waiting = Waiting(&mut a, 0);
    let mut pipelining = Pipelining(&mut b, 0);
    // Warm both (kernel compilation per work-group size).
    for_secs(0.2, |stop| waiting.run(stop));
    for_secs(0.2, |stop| pipelining.run(stop));
    // Alone and shared in turn, in short rounds, so that the host's other load weighs on
    // both alike: counts and seconds of waiting alone, shared; pipelining alone, shared.
    let (mut n, mut secs) = ([0u64; 4], [0f64; 4]);
    for _ in 0..6 {
        let (count, t) = for_secs(0.3, |stop| waiting.run(stop));
        (n[0], secs[0]) = (n[0] + count, secs[0] + t);
        let (count, t) = for_secs(0.3, |stop| pipelining.run(stop));
        (n[2], secs[2]) = (n[2] + count, secs[2] + t);
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let (w, p, t) = std::thread::scope(|s| {
            let w = s.spawn(|| waiting.run(&stop));
            let p = s.spawn(|| pipelining.run(&stop));
            std::thread::sleep(Duration::from_millis(450));
            stop.store(true, Ordering::Relaxed);
            let t = started.elapsed().as_secs_f64();
            (w.join().unwrap(), p.join().unwrap(), t)
        });
        (n[1], secs[1], n[3], secs[3]) = (n[1] + w, secs[1] + t, n[3] + p, secs[3] + t);
    }
    let rate: [f64; 4] = std::array::from_fn(|i| n[i] as f64 / secs[i]);
    eprintln!(
        "waiting session {:.0}/s alone, {:.0}/s shared; pipelining session {:.0}/s alone, {:.0}/s shared",
        rate[0], rate[1], rate[2], rate[3]
    );
    assert!(
        rate[1] >= 0.3 * rate[0],
        "the waiting session starved: {rate:?}"
    );
    assert!(
        rate[3] >= 0.3 * rate[2],
        "the pipelining session starved: {rate:?}"
    );
}
