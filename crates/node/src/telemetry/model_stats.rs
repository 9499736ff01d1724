//! Per-model inference statistics: the counters behind the Open Inference Protocol's
//! statistics extension (`GET /v2/models/{m}/stats`, gRPC `ModelStatistics`; the
//! document is `crate::front::oip::stats`).
//!
//! The front ends that serve the protocol (HTTP `/v2/.../infer`, gRPC `ModelInfer` and
//! its stream) record each call they answer here: how long its request took to decode
//! (compute input), to wait in a slot's queue, to run (compute infer), and its answer to
//! encode (compute output), as Triton counts them. Calls by `/v1/fn` and RAC are not
//! model inferences of the protocol and are counted by the Prometheus metrics only.
//!
//! Recording is atomics only, no lock: a call adds to a handful of counters of its
//! model. The table is built once from the catalog, which does not change while the
//! node runs, so a model's counters are found without a lock either. Not for: rates or
//! percentiles (Prometheus's `netaccel_accelerator_*` histograms have them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use accel::Catalog;

/// The largest batch size counted apart in `batch_stats`; a call of a larger batch
/// (only a model whose `max_batch_size` is larger can take one) is counted under it.
pub const BATCH_SIZES_MAX: usize = 1024;

/// A count of events and their summed duration.
#[derive(Default)]
pub struct Tally {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Tally {
    fn add(&self, ns: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// `(count, ns)` now.
    pub fn read(&self) -> (u64, u64) {
        (
            self.count.load(Ordering::Relaxed),
            self.ns.load(Ordering::Relaxed),
        )
    }
}

/// The compute durations of the calls of one batch size.
#[derive(Default)]
pub struct BatchTally {
    pub compute_input: Tally,
    pub compute_infer: Tally,
    pub compute_output: Tally,
}

/// Where one successful call's time went, in nanoseconds, and its batch size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// Inferences the call made: the batch axis's length, 1 for a model without one.
    pub batch: usize,
    /// Decoding the request into the call's parameters and payload.
    pub input_ns: u64,
    /// Admitted to a slot's queue until its worker started the call.
    pub queue_ns: u64,
    /// The kernel's run.
    pub infer_ns: u64,
    /// Encoding the output into the response.
    pub output_ns: u64,
    /// The whole request, from its last byte received to its response encoded.
    pub total_ns: u64,
}

/// The counters of one model.
pub struct ModelStats {
    /// Milliseconds since the Unix epoch of the last call answered (0: none yet).
    last_inference_ms: AtomicU64,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    pub success: Tally,
    pub fail: Tally,
    pub queue: Tally,
    pub compute_input: Tally,
    pub compute_infer: Tally,
    pub compute_output: Tally,
    /// By batch size: entry `i` counts batches of `i + 1`.
    batches: Box<[BatchTally]>,
}

impl ModelStats {
    /// Counters for a model whose largest batch is `max_batch_size` (0: no batch axis,
    /// every call is one inference).
    pub fn new(max_batch_size: usize) -> ModelStats {
        let sizes = max_batch_size.clamp(1, BATCH_SIZES_MAX);
        ModelStats {
            last_inference_ms: AtomicU64::new(0),
            inference_count: AtomicU64::new(0),
            execution_count: AtomicU64::new(0),
            success: Tally::default(),
            fail: Tally::default(),
            queue: Tally::default(),
            compute_input: Tally::default(),
            compute_infer: Tally::default(),
            compute_output: Tally::default(),
            batches: (0..sizes).map(|_| BatchTally::default()).collect(),
        }
    }

    /// Records a call answered with the model's output.
    pub fn succeeded(&self, t: &Timing) {
        debug_assert!(t.batch > 0, "a call infers at least once");
        debug_assert!(
            t.input_ns.saturating_add(t.output_ns) <= t.total_ns,
            "decoding and encoding are parts of the request: {t:?}"
        );
        let batch = t.batch.max(1);
        self.inference_count
            .fetch_add(batch as u64, Ordering::Relaxed);
        self.execution_count.fetch_add(1, Ordering::Relaxed);
        self.success.add(t.total_ns);
        self.queue.add(t.queue_ns);
        self.compute_input.add(t.input_ns);
        self.compute_infer.add(t.infer_ns);
        self.compute_output.add(t.output_ns);
        let by_size = &self.batches[batch.min(self.batches.len()) - 1];
        by_size.compute_input.add(t.input_ns);
        by_size.compute_infer.add(t.infer_ns);
        by_size.compute_output.add(t.output_ns);
        self.touch();
    }

    /// Records a call that named the model and was refused or failed, after `total_ns`.
    pub fn failed(&self, total_ns: u64) {
        self.fail.add(total_ns);
        self.touch();
    }

    fn touch(&self) {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.last_inference_ms.fetch_max(ms, Ordering::Relaxed);
    }

    pub fn last_inference_ms(&self) -> u64 {
        self.last_inference_ms.load(Ordering::Relaxed)
    }

    pub fn inference_count(&self) -> u64 {
        self.inference_count.load(Ordering::Relaxed)
    }

    pub fn execution_count(&self) -> u64 {
        self.execution_count.load(Ordering::Relaxed)
    }

    /// `(batch size, its tallies)` for every batch size that has run at least once.
    pub fn batches(&self) -> impl Iterator<Item = (usize, &BatchTally)> {
        self.batches
            .iter()
            .enumerate()
            .filter(|(_, b)| b.compute_infer.read().0 > 0)
            .map(|(i, b)| (i + 1, b))
    }
}

/// The counters of every model of the catalog, by accelerator id.
pub struct ModelStatsTable {
    by_id: HashMap<u16, ModelStats>,
}

impl ModelStatsTable {
    pub fn new(catalog: &Catalog) -> ModelStatsTable {
        let by_id: HashMap<u16, ModelStats> = catalog
            .iter()
            .map(|a| {
                let max_batch = a.tensors().map_or(0, |t| t.max_batch_size as usize);
                (a.descriptor().id, ModelStats::new(max_batch))
            })
            .collect();
        debug_assert_eq!(by_id.len(), catalog.iter().count(), "ids are unique");
        ModelStatsTable { by_id }
    }

    /// The counters of accelerator `id`, if it is in the catalog.
    pub fn of(&self, id: u16) -> Option<&ModelStats> {
        self.by_id.get(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(batch: usize) -> Timing {
        Timing {
            batch,
            input_ns: 10,
            queue_ns: 20,
            infer_ns: 30,
            output_ns: 40,
            total_ns: 200,
        }
    }

    #[test]
    fn a_success_counts_its_inferences_and_each_phase() {
        let s = ModelStats::new(8);
        s.succeeded(&timing(1));
        s.succeeded(&timing(3));
        assert_eq!(s.inference_count(), 4);
        assert_eq!(s.execution_count(), 2);
        assert_eq!(s.success.read(), (2, 400));
        assert_eq!(s.queue.read(), (2, 40));
        assert_eq!(s.compute_input.read(), (2, 20));
        assert_eq!(s.compute_infer.read(), (2, 60));
        assert_eq!(s.compute_output.read(), (2, 80));
        assert_eq!(s.fail.read(), (0, 0));
        let sizes: Vec<usize> = s.batches().map(|(n, _)| n).collect();
        assert_eq!(sizes, [1, 3]);
        assert!(s.last_inference_ms() > 0);
    }

    #[test]
    fn a_failure_counts_apart_and_a_batch_beyond_the_bound_counts_under_it() {
        let s = ModelStats::new(0);
        assert_eq!(s.last_inference_ms(), 0);
        s.failed(5);
        assert_eq!(s.fail.read(), (1, 5));
        assert_eq!((s.inference_count(), s.execution_count()), (0, 0));
        assert!(s.last_inference_ms() > 0);
        // A model without a batch axis has one batch size.
        s.succeeded(&timing(2));
        let sizes: Vec<usize> = s.batches().map(|(n, _)| n).collect();
        assert_eq!(sizes, [1]);
        let big = ModelStats::new(usize::MAX);
        big.succeeded(&timing(BATCH_SIZES_MAX + 7));
        let sizes: Vec<usize> = big.batches().map(|(n, _)| n).collect();
        assert_eq!(sizes, [BATCH_SIZES_MAX]);
    }

    #[test]
    fn the_table_has_every_catalog_model() {
        let c = Catalog::builtin();
        let t = ModelStatsTable::new(&c);
        for a in c.iter() {
            assert!(t.of(a.descriptor().id).is_some());
        }
        assert!(t.of(u16::MAX).is_none());
    }
}
