//! The statistics extension's document: which models a request asks about, and their
//! counters ([`crate::telemetry::model_stats`]) in Triton's fields. One declaration
//! for both front ends: HTTP serialises [`Statistics`] as JSON
//! (`GET /v2/models[/{m}[/versions/{v}]]/stats`), gRPC converts it into its
//! `ModelStatisticsResponse` field by field.
//!
//! Not for: recording (the front ends do, on the call path) or anything the protocol's
//! document does not carry (rates, percentiles: `/metrics`).

use std::time::Instant;

use accel::Accelerator;
use serde::Serialize;

use super::VERSION;
use crate::node::Node;
use crate::telemetry::model_stats::{ModelStats, Tally, Timing};

/// `{"count": …, "ns": …}`: events and their summed duration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Duration {
    pub count: u64,
    pub ns: u64,
}

impl From<&Tally> for Duration {
    fn from(t: &Tally) -> Duration {
        let (count, ns) = t.read();
        Duration { count, ns }
    }
}

/// `inference_stats`: every request, by outcome and phase. The response cache does not
/// exist here: its two entries stay zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InferenceStats {
    pub success: Duration,
    pub fail: Duration,
    pub queue: Duration,
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
    pub cache_hit: Duration,
    pub cache_miss: Duration,
}

/// One entry of `batch_stats`: the executions of one batch size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BatchStats {
    pub batch_size: u64,
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
}

/// One model version's statistics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelStatistics {
    pub name: String,
    pub version: String,
    /// Milliseconds since the Unix epoch (0: never called).
    pub last_inference: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub inference_stats: InferenceStats,
    pub batch_stats: Vec<BatchStats>,
    /// Triton's per-device memory of a model; netaccel's slots report theirs in
    /// `/v1/slots`, so the list is empty.
    pub memory_usage: Vec<serde_json::Value>,
}

/// The document: `{"model_stats": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Statistics {
    pub model_stats: Vec<ModelStatistics>,
}

impl Statistics {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("serialising JSON cannot fail")
    }
}

fn model_statistics(name: &str, s: &ModelStats) -> ModelStatistics {
    ModelStatistics {
        name: name.to_string(),
        version: VERSION.to_string(),
        last_inference: s.last_inference_ms(),
        inference_count: s.inference_count(),
        execution_count: s.execution_count(),
        inference_stats: InferenceStats {
            success: (&s.success).into(),
            fail: (&s.fail).into(),
            queue: (&s.queue).into(),
            compute_input: (&s.compute_input).into(),
            compute_infer: (&s.compute_infer).into(),
            compute_output: (&s.compute_output).into(),
            cache_hit: Duration::default(),
            cache_miss: Duration::default(),
        },
        batch_stats: s
            .batches()
            .map(|(size, b)| BatchStats {
                batch_size: size as u64,
                compute_input: (&b.compute_input).into(),
                compute_infer: (&b.compute_infer).into(),
                compute_output: (&b.compute_output).into(),
            })
            .collect(),
        memory_usage: Vec::new(),
    }
}

/// For a model its slots batch dynamically, the executions are the batches the slots
/// ran, not the calls: `execution_count` and `batch_stats` from the batch counts of
/// the slots that host it now (as Triton counts one execution of a batch of 8
/// requests, once, under size 8). A slot's counts start again when it loads another
/// model. The batch's join and split are part of its device run here, so each entry's
/// `compute_infer` holds its time and `compute_input`/`compute_output` only its count.
fn executed_batches(stats: &mut ModelStatistics, node: &Node, id: u16) {
    let mut by_size: std::collections::BTreeMap<usize, (u64, u64)> = Default::default();
    for slot in node.dispatcher.slots() {
        if slot.hosting().accel_id != id {
            continue;
        }
        for (size, c) in slot.batch_counts() {
            let e = by_size.entry(size).or_default();
            e.0 += c.count;
            e.1 = e.1.saturating_add(c.compute_ns);
        }
    }
    stats.execution_count = by_size.values().map(|(count, _)| count).sum();
    stats.batch_stats = by_size
        .into_iter()
        .map(|(size, (count, ns))| BatchStats {
            batch_size: size as u64,
            compute_input: Duration { count, ns: 0 },
            compute_infer: Duration { count, ns },
            compute_output: Duration { count, ns: 0 },
        })
        .collect();
}

/// The statistics of model `name` at `version` ("" for every version), or of every
/// model of the catalog when `name` is empty. The error is the sentence of a
/// not-found answer (HTTP 404, gRPC `NOT_FOUND`), in the words the other model routes
/// use.
pub fn select(node: &Node, name: &str, version: &str) -> Result<Statistics, String> {
    let catalog = node.dispatcher.catalog();
    let of = |a: &std::sync::Arc<dyn accel::Accelerator>| {
        let d = a.descriptor();
        let s = node
            .model_stats
            .of(d.id)
            .expect("the statistics table is built from the catalog");
        let mut stats = model_statistics(&d.name, s);
        if a.batching().is_some() {
            executed_batches(&mut stats, node, d.id);
        }
        stats
    };
    if name.is_empty() {
        let mut model_stats: Vec<ModelStatistics> = catalog.iter().map(of).collect();
        model_stats.sort_by(|a, b| a.name.cmp(&b.name));
        return Ok(Statistics { model_stats });
    }
    let accel = catalog
        .by_name(name)
        .ok_or_else(|| crate::front::oip::unknown_model(name))?;
    if !version.is_empty() && version != VERSION {
        return Err(crate::front::oip::unknown_version(name, version));
    }
    Ok(Statistics {
        model_stats: vec![of(accel)],
    })
}

/// Nanoseconds since `t`.
pub fn since_ns(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Inferences in a call of `payload_len` bytes: the batch axis's length for a model
/// that has one, otherwise 1.
pub fn batch(accel: &dyn Accelerator, payload_len: usize) -> usize {
    accel
        .tensors()
        .filter(|t| t.max_batch_size > 0)
        .and_then(|t| t.batch_of(payload_len).ok())
        .map_or(1, |b| b.max(1))
}

/// What a front end measured of one inference it answered, for [`record`].
pub struct Measured {
    /// When the request was whole: the call's `received`.
    pub received: Instant,
    /// Whether the model's output was the answer.
    pub ok: bool,
    pub batch: usize,
    /// Decoding the request, from `received`.
    pub input_ns: u64,
    /// The answer's `queue_ns`: from `received` to the slot's start, decoding included.
    pub queue_ns: u64,
    /// The answer's `exec_ns`.
    pub infer_ns: u64,
    /// Encoding the response.
    pub output_ns: u64,
}

/// Records an answered inference of model `accel_id`. The protocol's queue time
/// starts once the call is decoded: the slot's counts from `received`.
pub fn record(node: &Node, accel_id: u16, m: Measured) {
    let Some(s) = node.model_stats.of(accel_id) else {
        return;
    };
    let total_ns = since_ns(m.received);
    if !m.ok {
        s.failed(total_ns);
        return;
    }
    s.succeeded(&Timing {
        batch: m.batch,
        input_ns: m.input_ns,
        queue_ns: m.queue_ns.saturating_sub(m.input_ns),
        infer_ns: m.infer_ns,
        output_ns: m.output_ns,
        total_ns: total_ns.max(m.input_ns.saturating_add(m.output_ns)),
    });
}

/// Records a request for model `accel_id` refused before it ran (it did not decode,
/// its parameters were wrong), `received` being when it was whole.
pub fn record_refused(node: &Node, accel_id: u16, received: Instant) {
    if let Some(s) = node.model_stats.of(accel_id) {
        s.failed(since_ns(received));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::model_stats::Timing;

    #[test]
    fn the_document_has_tritons_fields() {
        let s = ModelStats::new(8);
        s.succeeded(&Timing {
            batch: 2,
            input_ns: 1,
            queue_ns: 2,
            infer_ns: 3,
            output_ns: 4,
            total_ns: 10,
        });
        s.failed(7);
        let doc = Statistics {
            model_stats: vec![model_statistics("simple", &s)],
        };
        let v: serde_json::Value = serde_json::from_slice(&doc.to_json()).unwrap();
        let m = &v["model_stats"][0];
        assert_eq!(m["name"], "simple");
        assert_eq!(m["version"], "1");
        assert_eq!(m["inference_count"], 2);
        assert_eq!(m["execution_count"], 1);
        let i = &m["inference_stats"];
        assert_eq!(i["success"], serde_json::json!({"count": 1, "ns": 10}));
        assert_eq!(i["fail"], serde_json::json!({"count": 1, "ns": 7}));
        assert_eq!(i["queue"]["ns"], 2);
        assert_eq!(i["compute_input"]["ns"], 1);
        assert_eq!(i["compute_infer"]["ns"], 3);
        assert_eq!(i["compute_output"]["ns"], 4);
        assert_eq!(i["cache_hit"]["count"], 0);
        assert_eq!(m["batch_stats"][0]["batch_size"], 2);
        assert_eq!(m["batch_stats"][0]["compute_infer"]["count"], 1);
        assert_eq!(m["batch_stats"].as_array().unwrap().len(), 1);
        assert!(m["last_inference"].as_u64().unwrap() > 0);
    }
}
