//! Telemetry: the Prometheus registry and the handles the hot path bumps
//! ([`metrics`]), and the log format, level and rate-limited refusal log
//! ([`logging`]). Every layer may use it; it uses no other module of the node.

pub mod logging;
pub mod metrics;
