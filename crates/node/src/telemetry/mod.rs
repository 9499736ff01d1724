//! Telemetry: the Prometheus registry and the handles the hot path bumps
//! ([`metrics`]), and the log format, level and rate-limited refusal log
//! ([`logging`]), the per-model inference statistics of the Open Inference Protocol
//! ([`model_stats`]), and [`Protocol`], the front end a call came in by, which both
//! label. Every layer may use it; it uses no other module of the node.

pub mod audit;
pub mod logging;
pub mod metrics;
pub mod model_stats;

/// The front end a request came in through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Rac,
    /// The Open Inference Protocol's `GRPCInferenceService` (`crate::front::grpc`).
    Grpc,
}

impl Protocol {
    /// Every front end, in the order of [`Protocol::index`].
    pub const ALL: [Protocol; 3] = [Protocol::Http, Protocol::Rac, Protocol::Grpc];

    /// The protocol's place in [`Protocol::ALL`], for per-protocol arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The `protocol` label of metrics and the field of log lines.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Rac => "rac",
            Protocol::Grpc => "grpc",
        }
    }
}

// `Protocol::index` is the variant's discriminant: each variant must sit at its own
// index in `Protocol::ALL`, or per-protocol arrays would count under another label.
const _: () = {
    let mut i = 0;
    while i < Protocol::ALL.len() {
        assert!(Protocol::ALL[i] as usize == i);
        i += 1;
    }
};
