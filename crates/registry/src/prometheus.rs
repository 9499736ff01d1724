//! Slot utilisation from Prometheus (`--prometheus URL`).
//!
//! Nodes report a busy ratio with each lease renewal, measured over their own short
//! window. A Prometheus that scrapes the nodes knows more: a rate over a chosen window
//! (`rate(netaccel_slot_busy_seconds_total[1m])` by default), the same figure the
//! operators' dashboards show. Every `interval` the registry runs the PromQL instant
//! query and sets the utilisation of each slot the answer names; a slot's Prometheus
//! figure holds for [`VALID_INTERVALS`] intervals, during which the node's lease
//! reports do not overwrite it. Slots the answer does not name (a node Prometheus
//! does not scrape, a query that failed) keep the nodes' busy ratios.
//!
//! Which slot a sample is: its `slot` label is the slot's id on the node (that is how
//! `netaccel-node` labels `netaccel_slot_busy_seconds_total`); its node is the
//! sample's `node` label when the scrape configuration sets one (the node's name in
//! the registry), else its `instance` label (the address Prometheus scraped), matched
//! against the HTTP address each node registered.
//!
//! The answer is parsed by [`parse_vector`], a pure function over the response body;
//! the HTTP request runs on a blocking thread with a timeout, never under the state's
//! lock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tracing::{debug, warn};

use crate::config::PrometheusConfig;
use crate::registry::Registry;

/// A Prometheus figure holds for this many polling intervals.
pub const VALID_INTERVALS: u32 = 3;
/// Largest answer read from Prometheus.
const BODY_BYTES_MAX: u64 = 8 << 20;
/// Samples taken from one answer; more are ignored (one per slot is expected).
const SAMPLES_MAX: usize = 65_536;

/// One element of an instant vector.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Deserialize)]
struct Response {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: Vec<VectorItem>,
}

#[derive(Deserialize)]
struct VectorItem {
    metric: BTreeMap<String, String>,
    /// `[unix time, "value"]`.
    value: (f64, String),
}

/// Parses the body of `GET /api/v1/query` answering an instant vector. Samples whose
/// value is not a finite number (NaN from a rate over no time) are left out.
pub fn parse_vector(body: &[u8]) -> Result<Vec<Sample>, String> {
    let response: Response =
        serde_json::from_slice(body).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if response.status != "success" {
        return Err(format!(
            "Prometheus answered {}: {}",
            response.status,
            response.error.unwrap_or_default()
        ));
    }
    let data = response.data.ok_or("a Prometheus answer without data")?;
    if data.result_type != "vector" {
        return Err(format!(
            "the query gives a {}, not an instant vector",
            data.result_type
        ));
    }
    Ok(data
        .result
        .into_iter()
        .take(SAMPLES_MAX)
        .filter_map(|item| {
            let value: f64 = item.value.1.parse().ok()?;
            value.is_finite().then_some(Sample {
                labels: item.metric,
                value,
            })
        })
        .collect())
}

/// A sample's slot: `(node name, slot id, utilisation clamped to 0..=1)`, given each
/// node's name and registered HTTP address (see the module documentation). Samples
/// without a slot id or a known node are left out.
pub fn by_slot<'a>(
    samples: &[Sample],
    nodes: impl IntoIterator<Item = (&'a str, String)>,
) -> Vec<(String, crate::model::SlotId, f64)> {
    let nodes: Vec<(&str, String)> = nodes.into_iter().collect();
    samples
        .iter()
        .filter_map(|s| {
            let slot: crate::model::SlotId = s.labels.get("slot")?.parse().ok()?;
            let node = match s.labels.get("node") {
                Some(name) => nodes.iter().find(|(n, _)| n == name)?.0,
                None => {
                    let instance = s.labels.get("instance")?;
                    nodes.iter().find(|(_, http)| http == instance)?.0
                }
            };
            Some((node.to_string(), slot, s.value.clamp(0.0, 1.0)))
        })
        .collect()
}

/// Runs `config.query` against Prometheus; the samples.
fn query(config: &PrometheusConfig, timeout: Duration) -> Result<Vec<Sample>, String> {
    let agent = ureq::AgentBuilder::new().timeout(timeout).build();
    let url = format!("{}/api/v1/query", config.url);
    let response = match agent.get(&url).query("query", &config.query).call() {
        Ok(r) => r,
        // Prometheus answers a bad query with 400 and an error body worth reading.
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(format!("{url}: {e}")),
    };
    let mut body = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(response.into_reader(), BODY_BYTES_MAX),
        &mut body,
    )
    .map_err(|e| format!("{url}: {e}"))?;
    parse_vector(&body)
}

/// Polls Prometheus every `config.interval` and applies what it says, until the
/// runtime stops. Only the leader's figures matter (it allocates), but every replica
/// polls, so a new leader has them at once.
pub fn spawn(registry: Arc<Registry>, config: PrometheusConfig) {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(config.interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            interval.tick().await;
            let c = config.clone();
            let timeout = config.interval.max(Duration::from_secs(1));
            let result = tokio::task::spawn_blocking(move || query(&c, timeout))
                .await
                .unwrap_or_else(|e| Err(format!("query task: {e}")));
            match result {
                Ok(samples) => {
                    failing = false;
                    let mut st = registry.lock().await;
                    let nodes: Vec<(String, String)> = st
                        .nodes()
                        .map(|n| (n.record.name.clone(), n.record.http.to_string()))
                        .collect();
                    let slots =
                        by_slot(&samples, nodes.iter().map(|(n, h)| (n.as_str(), h.clone())));
                    let valid_until = Instant::now() + config.interval * VALID_INTERVALS;
                    let applied = st.set_prometheus_utilization(&slots, valid_until);
                    debug!(
                        samples = samples.len(),
                        applied, "utilisation from Prometheus"
                    );
                }
                Err(e) => {
                    // Said once per outage, not every few seconds.
                    if !failing {
                        warn!(error = %e, "Prometheus query failed; using the nodes' busy ratios");
                    }
                    failing = true;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = r#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"instance":"127.0.0.1:8080","job":"netaccel","slot":"0"},"value":[1700000000.5,"0.25"]},
        {"metric":{"instance":"127.0.0.1:8080","job":"netaccel","slot":"1"},"value":[1700000000.5,"NaN"]},
        {"metric":{"node":"n2","instance":"10.0.0.2:8080","slot":"3"},"value":[1700000000.5,"1.5"]},
        {"metric":{"instance":"10.9.9.9:8080","slot":"0"},"value":[1700000000.5,"0.5"]},
        {"metric":{"instance":"127.0.0.1:8080"},"value":[1700000000.5,"0.5"]}
    ]}}"#;

    #[test]
    fn an_instant_vector_parses_and_maps_to_slots() {
        let samples = parse_vector(ANSWER.as_bytes()).unwrap();
        // The NaN sample is left out.
        assert_eq!(samples.len(), 4);
        assert_eq!(samples[0].labels["slot"], "0");
        assert_eq!(samples[0].value, 0.25);
        let nodes = [
            ("n1", "127.0.0.1:8080".to_string()),
            ("n2", "10.0.0.2:8080".to_string()),
        ];
        assert_eq!(
            by_slot(&samples, nodes.iter().map(|(n, h)| (*n, h.clone()))),
            vec![
                ("n1".to_string(), 0, 0.25),
                // Named by its `node` label; clamped to 1.
                ("n2".to_string(), 3, 1.0),
                // 10.9.9.9 is no node's address; the last sample has no slot.
            ]
        );
    }

    #[test]
    fn errors_and_other_result_types_are_refused() {
        for (body, want) in [
            (
                r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#,
                "parse error",
            ),
            (
                r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
                "matrix",
            ),
            ("<html>", "not a Prometheus answer"),
            (r#"{"status":"success"}"#, "without data"),
        ] {
            let err = parse_vector(body.as_bytes()).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }
}
