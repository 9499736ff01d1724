//! Unit tests of [`super`] (a slot's dynamic batching), through a slot and its worker:
//! calls queued together run as one batch and each gets its own rows; a call past its
//! deadline or its queue timeout is answered without running; batches are counted.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use accel::batch::{Policy, QueuePolicy, TimeoutAction};
use accel::tensors::{DataType, TensorSpec, Tensors};
use accel::{Accelerator, CallError, Descriptor, ParamBlock};

use super::super::*;
use crate::core::clock::SystemClock;

/// A model of two UINT8 per item in, the same plus one out, that batches; it counts
/// its runs.
struct PlusOne {
    descriptor: Descriptor,
    tensors: Tensors,
    policy: Policy,
    runs: AtomicUsize,
}

impl Accelerator for PlusOne {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }
    fn check(&self, _: &ParamBlock, _: Option<usize>) -> Result<(), CallError> {
        Ok(())
    }
    fn work_estimate(&self, _: &ParamBlock, len: usize) -> u64 {
        len as u64
    }
    fn run(&self, _: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        self.tensors.batch_of(input.len())?;
        self.runs.fetch_add(1, Ordering::Relaxed);
        out.clear();
        out.extend(input.iter().map(|b| b + 1));
        Ok(())
    }
    fn tensors(&self) -> Option<&Tensors> {
        Some(&self.tensors)
    }
    fn batching(&self) -> Option<&Policy> {
        Some(&self.policy)
    }
}

fn plus_one(queue_policy: QueuePolicy) -> Arc<PlusOne> {
    let spec = |name: &str| TensorSpec {
        name: name.into(),
        datatype: DataType::Uint8,
        dims: vec![2],
    };
    Arc::new(PlusOne {
        descriptor: Descriptor {
            id: 300,
            name: "plus_one".into(),
            hash: String::new(),
            params: Vec::new(),
        },
        tensors: Tensors {
            inputs: vec![spec("x")],
            outputs: vec![spec("y")],
            max_batch_size: 8,
        },
        policy: Policy {
            max_batch_size: 8,
            preferred_batch_sizes: Vec::new(),
            // Long: the calls of a test all arrive within it, and a full batch runs
            // without waiting for it.
            max_queue_delay: Duration::from_millis(300),
            priority_levels: 0,
            default_priority_level: 0,
            queue_policy,
        },
        runs: AtomicUsize::new(0),
    })
}

fn slot(model: &Arc<PlusOne>) -> Arc<Slot> {
    let accel: Arc<dyn Accelerator> = Arc::clone(model) as Arc<dyn Accelerator>;
    let metrics = crate::telemetry::metrics::Metrics::new();
    let image = Arc::new(crate::device::cpu::CpuImage(Arc::clone(&accel)));
    let limits = SlotLimits {
        queue_depth_max: 16,
        tenant_share_max: 16,
        inline_work_max: u64::MAX,
        hand_over_wait: Duration::from_secs(10),
        reconfig_delay: Duration::ZERO,
        simulated_exec: Duration::ZERO,
        worker_nice: 0,
        worker_policy: WorkerPolicy::Normal,
        kernel_timeout: Duration::ZERO,
        queue_wait_factor: 8,
        queue_wait_floor: Duration::ZERO,
    };
    let slot = Arc::new(Slot::new(
        0,
        "test",
        BackendKind::Cpu,
        accel,
        image,
        limits,
        metrics.slot(0),
        Arc::default(),
        Arc::new(SystemClock),
    ));
    let worker = Arc::clone(&slot);
    std::thread::spawn(move || worker.run_worker());
    slot
}

fn submit(
    slot: &Slot,
    model: &Arc<PlusOne>,
    payload: &[u8],
    received: Instant,
    deadline: Deadline,
    tenant: TenantId,
) -> oneshot::Receiver<Answer> {
    let call = Call {
        accel: Arc::clone(model) as Arc<dyn Accelerator>,
        params: [0; accel::PARAMS_LEN],
        payload: payload.to_vec(),
        out: Vec::new(),
        received,
        deadline,
        tenant,
        permit: None,
    };
    match slot.submit(call) {
        Ok(Submitted::Queued(rx)) => rx,
        Ok(Submitted::Done(_)) => panic!("a call of a model that batches ran inline"),
        Err(r) => panic!("refused {:?}", r.status),
    }
}

#[test]
fn calls_queued_together_run_as_one_batch_each_with_its_own_rows() {
    let model = plus_one(QueuePolicy::default());
    let s = slot(&model);
    // 1 + 2 + 1 + 4 items: a full batch of 8, from four tenants.
    let payloads: [&[u8]; 4] = [
        &[1, 2],
        &[3, 4, 5, 6],
        &[7, 8],
        &[9, 10, 11, 12, 13, 14, 15, 16],
    ];
    let now = Instant::now();
    let rxs: Vec<_> = payloads
        .iter()
        .enumerate()
        .map(|(t, p)| submit(&s, &model, p, now, Deadline::NONE, t as TenantId))
        .collect();
    for (rx, p) in rxs.into_iter().zip(payloads) {
        let a = rx.blocking_recv().unwrap();
        assert_eq!(a.status, Status::Ok, "{}", a.message);
        let want: Vec<u8> = p.iter().map(|b| b + 1).collect();
        assert_eq!(a.output, want, "each call gets its own rows");
    }
    assert_eq!(
        model.runs.load(Ordering::Relaxed),
        1,
        "one run for four calls"
    );
    let counts = s.batch_counts();
    assert_eq!(counts.len(), 1);
    assert_eq!((counts[0].0, counts[0].1.count), (8, 1));
    assert_eq!(s.depth(), 0, "every call answered and uncounted");
}

#[test]
fn calls_past_their_deadline_or_queue_timeout_are_answered_without_running() {
    let model = plus_one(QueuePolicy {
        timeout_action: TimeoutAction::Reject,
        default_timeout: Duration::from_millis(100),
        ..QueuePolicy::default()
    });
    let s = slot(&model);
    let now = Instant::now();
    let long_ago = now - Duration::from_secs(1);
    let late = submit(
        &s,
        &model,
        &[1, 2],
        long_ago,
        Deadline::after(long_ago, 1),
        1,
    );
    let timed_out = submit(&s, &model, &[3, 4], long_ago, Deadline::NONE, 2);
    let fine = submit(&s, &model, &[5, 6], now, Deadline::NONE, 3);
    let a = late.blocking_recv().unwrap();
    assert_eq!(a.status, Status::DeadlineExceeded, "{}", a.message);
    assert!(a.output.is_empty());
    let a = timed_out.blocking_recv().unwrap();
    assert_eq!(a.status, Status::Unavailable);
    assert_eq!(a.message, "Request timeout expired");
    let a = fine.blocking_recv().unwrap();
    assert_eq!((a.status, a.output.as_slice()), (Status::Ok, &[6u8, 7][..]));
    assert_eq!(
        model.runs.load(Ordering::Relaxed),
        1,
        "only the call on time ran"
    );
    assert_eq!(s.batch_counts()[0].0, 1, "a batch of the one call left");
    assert_eq!(s.depth(), 0);
}
