//! The registry's command line: every knob and bound, with its default, validated
//! before anything starts. Names carry their unit last (`lease_ms`, `body_bytes_max`).

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::alloc::{Order, Policy};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OrderArg {
    /// Least utilised first, then fewest instances (BlastFunction).
    Utilization,
    /// Fewest instances first, then least utilised.
    Occupation,
}

/// The cluster's control plane: knows every node, device and slot, places function
/// instances on slots and reconfigures slots when none fits. Clients call nodes
/// directly; the registry is never on the data path.
///
/// With no arguments: HTTP on 127.0.0.1:7400, state in memory (rebuilt from the nodes'
/// leases after a restart), writes open to anyone who can reach the port.
#[derive(Parser, Clone, Debug)]
#[command(name = "netaccel-registry", version)]
pub struct Args {
    /// HTTP listen address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// Where state lives: `memory` (one registry), or etcd://HOST:PORT[,HOST:PORT…]
    /// (state in etcd; several replicas elect a leader, followers redirect writes).
    #[arg(long, value_name = "STORE", default_value = "memory")]
    pub store: String,
    /// Keys in etcd go under this prefix (one prefix per registry cluster).
    #[arg(long, value_name = "PREFIX", default_value = "netaccel-registry/")]
    pub etcd_prefix: String,
    /// With etcd: seconds a dead leader keeps the lead before another replica takes
    /// over (the lease of the election).
    #[arg(long, value_name = "S", default_value_t = 5)]
    pub election_ttl_s: u64,
    /// With etcd: the URL other replicas send writers to when this one leads
    /// (default: http:// and the listen address).
    #[arg(long, value_name = "URL")]
    pub advertise: Option<String>,
    /// Prometheus base URL: slot utilisation comes from PromQL instead of the busy
    /// ratios nodes send with their lease (kept for slots Prometheus does not know).
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// PromQL instant query giving each slot's utilisation (0..1), by the labels
    /// `node` and `slot`.
    #[arg(
        long,
        value_name = "PROMQL",
        default_value = "rate(netaccel_slot_busy_seconds_total[1m])"
    )]
    pub utilization_query: String,
    /// How often Prometheus is queried.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub prometheus_interval_ms: u64,
    /// Admin token: when set, every write needs `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "TOKEN", env = "NETACCEL_REGISTRY_TOKEN")]
    pub token: Option<String>,
    /// Principals (admins, readers, nodes, clients) with their tokens and rights, in
    /// TOML (docs/security.md, "The registry"); read again on SIGHUP. Without it,
    /// reads are open and writes follow `--token`.
    #[arg(long, value_name = "FILE", env = "NETACCEL_REGISTRY_CREDENTIALS")]
    pub credentials: Option<std::path::PathBuf>,
    /// Token the registry presents to nodes' admin API when it reconfigures a slot
    /// (default: the admin token).
    #[arg(long, value_name = "TOKEN", env = "NETACCEL_NODE_TOKEN")]
    pub node_token: Option<String>,
    /// Slots busier than this (0..=1) take no new instance; the rebalancer moves
    /// instances off them.
    #[arg(long, default_value_t = 0.9)]
    pub ceiling: f64,
    /// Candidate order after "holds the accelerator".
    #[arg(long, value_enum, default_value_t = OrderArg::Utilization)]
    pub order: OrderArg,
    /// Lease a node gets with each renewal; it renews every third of it.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub lease_ms: u64,
    /// Lost nodes are forgotten after this long (0: kept until deleted).
    #[arg(long, value_name = "MS", default_value_t = 600_000)]
    pub forget_lost_ms: u64,
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub nodes_max: usize,
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub functions_max: usize,
    /// Instances over all functions.
    #[arg(long, value_name = "N", default_value_t = 65_536)]
    pub instances_max: usize,
    /// Largest request body (413 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub body_bytes_max: usize,
    /// Longest `wait_ms` of a long poll (400 beyond).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub long_poll_wait_ms_max: u64,
    /// Long polls waiting at once; past it a poll is answered at once.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub long_polls_max: usize,
    /// Period of the rebalancer (retry unbound instances, relieve slots above the
    /// ceiling, release unused slots).
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub rebalance_interval_ms: u64,
    /// Instances the rebalancer moves or retries per period.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub rebalance_moves_max: usize,
    /// After moving an instance off a slot, the rebalancer leaves that slot alone this
    /// long, so its utilisation can show the move.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub rebalance_cooldown_ms: u64,
    /// Release a slot no instance has used for this long: allocation then counts it
    /// as idle, so any function may take it even if clients still call it through the
    /// resolver. 0: never release.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub release_unused_ms: u64,
    /// How long a node may take to reconfigure a slot.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub reconfigure_timeout_ms: u64,
    /// error, warn, info, debug, trace (or a tracing filter).
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log_level: String,
    /// Serve Kubernetes: the Pod admission webhook (see docs/kubernetes.md).
    #[arg(long)]
    pub kubernetes: bool,
    /// With --kubernetes: kubeconfig file (default: in-cluster, then $KUBECONFIG or
    /// ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// With --kubernetes: HTTPS listen address of the admission webhook.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7443")]
    pub webhook: SocketAddr,
    /// The webhook's certificate (PEM); with --webhook-key. Default: self-signed for
    /// the --webhook-host names, made at start.
    #[arg(long, value_name = "FILE", requires = "webhook_key")]
    pub webhook_cert: Option<std::path::PathBuf>,
    #[arg(long, value_name = "FILE", requires = "webhook_cert")]
    pub webhook_key: Option<std::path::PathBuf>,
    /// DNS names or IP addresses of the self-signed certificate (repeatable).
    #[arg(long, value_name = "HOST", default_values = ["localhost", "127.0.0.1"])]
    pub webhook_host: Vec<String>,
    /// Name of the MutatingWebhookConfiguration the registry writes, with its CA
    /// bundle (needs --webhook-url or --webhook-service). Default: not written.
    #[arg(long, value_name = "NAME")]
    pub webhook_configuration: Option<String>,
    /// The URL the API server calls the webhook at (https://HOST:PORT/v1/admission/pods).
    #[arg(long, value_name = "URL", conflicts_with = "webhook_service")]
    pub webhook_url: Option<String>,
    /// The Service the API server calls the webhook through: NAMESPACE/NAME[:PORT].
    #[arg(long, value_name = "SERVICE")]
    pub webhook_service: Option<String>,
    /// The registry's URL as Pods reach it, given them as NETACCEL_REGISTRY (default:
    /// --advertise, else http:// and the listen address).
    #[arg(long, value_name = "URL")]
    pub pod_registry_url: Option<String>,
    /// Displaced Pods evicted per second, at most (through the Eviction API).
    #[arg(long, value_name = "N", default_value_t = 10.0)]
    pub eviction_rate: f64,
    /// Grace period given to an evicted Pod (default: the Pod's own).
    #[arg(long, value_name = "S")]
    pub eviction_grace_s: Option<u32>,
    /// With --kubernetes and the memory store: namespace of the election's Lease.
    #[arg(
        long,
        value_name = "NS",
        env = "POD_NAMESPACE",
        default_value = "default"
    )]
    pub lease_namespace: String,
    /// Name of the election's Lease.
    #[arg(long, value_name = "NAME", default_value = "netaccel-registry")]
    pub lease_name: String,
    /// This replica's Pod, labelled netaccel.io/role=leader|follower.
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub pod_name: Option<String>,
}

/// Where the state lives.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreConfig {
    Memory,
    Etcd {
        /// `http://HOST:PORT` for each endpoint.
        endpoints: Vec<String>,
        prefix: String,
        election_ttl: Duration,
        /// None: derived from the listen address once bound.
        advertise: Option<String>,
    },
}

/// Where utilisation comes from besides the nodes' leases.
#[derive(Clone, Debug, PartialEq)]
pub struct PrometheusConfig {
    pub url: String,
    pub query: String,
    pub interval: Duration,
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub store: StoreConfig,
    pub prometheus: Option<PrometheusConfig>,
    pub token: Option<String>,
    /// `--credentials`: checked at start (`crate::auth`).
    pub credentials: Option<std::path::PathBuf>,
    pub node_token: Option<String>,
    pub policy: Policy,
    pub lease: Duration,
    pub forget_lost: Option<Duration>,
    pub nodes_max: usize,
    pub functions_max: usize,
    pub instances_max: usize,
    pub body_bytes_max: usize,
    pub long_poll_wait_max: Duration,
    pub long_polls_max: usize,
    pub rebalance_interval: Duration,
    pub rebalance_moves_max: usize,
    pub rebalance_cooldown: Duration,
    pub release_unused: Option<Duration>,
    pub reconfigure_timeout: Duration,
    pub log_level: String,
    /// `--kubernetes` and its options.
    pub kubernetes: Option<crate::kube::Settings>,
}

impl Default for Config {
    fn default() -> Config {
        Args::parse_from(["netaccel-registry"])
            .into_config()
            .expect("defaults are valid")
    }
}

impl Args {
    pub fn into_config(self) -> Result<Config, String> {
        let store = if self.store == "memory" {
            StoreConfig::Memory
        } else {
            if self.election_ttl_s == 0 || self.election_ttl_s > 600 {
                return Err(format!(
                    "--election-ttl-s {} must be between 1 and 600",
                    self.election_ttl_s
                ));
            }
            if self.etcd_prefix.is_empty() {
                return Err("--etcd-prefix must not be empty".to_string());
            }
            if let Some(url) = &self.advertise {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!("--advertise {url}: expected http://HOST:PORT"));
                }
            }
            StoreConfig::Etcd {
                endpoints: crate::etcd::parse_endpoints(&self.store)?,
                prefix: self.etcd_prefix.clone(),
                election_ttl: Duration::from_secs(self.election_ttl_s),
                advertise: self.advertise.clone(),
            }
        };
        let prometheus = match &self.prometheus {
            None => None,
            Some(url) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!("--prometheus {url}: expected http://HOST:PORT"));
                }
                if self.utilization_query.trim().is_empty() {
                    return Err("--utilization-query must not be empty".to_string());
                }
                if self.prometheus_interval_ms < 100 {
                    return Err("--prometheus-interval-ms must be at least 100".to_string());
                }
                Some(PrometheusConfig {
                    url: url.trim_end_matches('/').to_string(),
                    query: self.utilization_query.clone(),
                    interval: Duration::from_millis(self.prometheus_interval_ms),
                })
            }
        };
        if !(self.ceiling > 0.0 && self.ceiling <= 1.0) {
            return Err(format!(
                "--ceiling {} must be above 0 and at most 1",
                self.ceiling
            ));
        }
        if self.lease_ms < 300 {
            return Err(format!(
                "--lease-ms {} is too short: nodes renew every third of it (at least 300)",
                self.lease_ms
            ));
        }
        for (name, value) in [
            ("--nodes-max", self.nodes_max),
            ("--functions-max", self.functions_max),
            ("--instances-max", self.instances_max),
            ("--body-bytes-max", self.body_bytes_max),
            ("--rebalance-moves-max", self.rebalance_moves_max),
        ] {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if self.rebalance_interval_ms == 0 || self.reconfigure_timeout_ms == 0 {
            return Err(
                "--rebalance-interval-ms and --reconfigure-timeout-ms must be at least 1"
                    .to_string(),
            );
        }
        for (name, token) in [("--token", &self.token), ("--node-token", &self.node_token)] {
            if token
                .as_ref()
                .is_some_and(|t| t.is_empty() || t.contains(char::is_whitespace))
            {
                return Err(format!("{name} must be non-empty and without spaces"));
            }
        }
        if let Some(path) = &self.credentials {
            crate::auth::Access::new(Some(path), self.token.as_deref())?;
        }
        let kubernetes = self.kubernetes_settings()?;
        let ms = Duration::from_millis;
        Ok(Config {
            kubernetes,
            listen: self.listen,
            store,
            prometheus,
            node_token: self.node_token.or_else(|| self.token.clone()),
            token: self.token,
            credentials: self.credentials,
            policy: Policy {
                ceiling: self.ceiling,
                order: match self.order {
                    OrderArg::Utilization => Order::Utilization,
                    OrderArg::Occupation => Order::Occupation,
                },
            },
            lease: ms(self.lease_ms),
            forget_lost: (self.forget_lost_ms > 0).then(|| ms(self.forget_lost_ms)),
            nodes_max: self.nodes_max,
            functions_max: self.functions_max,
            instances_max: self.instances_max,
            body_bytes_max: self.body_bytes_max,
            long_poll_wait_max: ms(self.long_poll_wait_ms_max),
            long_polls_max: self.long_polls_max,
            rebalance_interval: ms(self.rebalance_interval_ms),
            rebalance_moves_max: self.rebalance_moves_max,
            rebalance_cooldown: ms(self.rebalance_cooldown_ms),
            release_unused: (self.release_unused_ms > 0).then(|| ms(self.release_unused_ms)),
            reconfigure_timeout: ms(self.reconfigure_timeout_ms),
            log_level: self.log_level,
        })
    }
}

impl Args {
    fn kubernetes_settings(&self) -> Result<Option<crate::kube::Settings>, String> {
        if !self.kubernetes {
            return Ok(None);
        }
        let webhook_client = match (&self.webhook_url, &self.webhook_service) {
            (Some(url), _) if !url.starts_with("https://") => {
                return Err(format!(
                    "--webhook-url {url}: the API server calls webhooks over https://"
                ))
            }
            (Some(url), _) => Some(crate::kube::WebhookClient::Url(url.clone())),
            (None, Some(service)) => Some(crate::kube::parse_service(service)?),
            (None, None) => None,
        };
        if self.webhook_configuration.is_some() && webhook_client.is_none() {
            return Err(
                "--webhook-configuration needs --webhook-url or --webhook-service".to_string(),
            );
        }
        if self.webhook_cert.is_none() && self.webhook_host.is_empty() {
            return Err("--webhook-host: the self-signed certificate needs a name".to_string());
        }
        if !(self.eviction_rate > 0.0 && self.eviction_rate <= 10_000.0) {
            return Err(format!(
                "--eviction-rate {} must be above 0 and at most 10000",
                self.eviction_rate
            ));
        }
        if self.election_ttl_s < 2 || self.election_ttl_s > 600 {
            return Err(format!(
                "--election-ttl-s {} must be between 2 and 600",
                self.election_ttl_s
            ));
        }
        let registry_url = self
            .pod_registry_url
            .clone()
            .or_else(|| self.advertise.clone())
            .unwrap_or_else(|| format!("http://{}", self.listen));
        Ok(Some(crate::kube::Settings {
            kubeconfig: self.kubeconfig.clone(),
            webhook: self.webhook,
            webhook_tls: self.webhook_cert.clone().zip(self.webhook_key.clone()),
            webhook_hosts: self.webhook_host.clone(),
            webhook_configuration: self.webhook_configuration.clone(),
            webhook_client,
            registry_url,
            eviction: crate::kube::pods::Eviction {
                rate: self.eviction_rate,
                grace_s: self.eviction_grace_s,
            },
            election: (self.store == "memory").then(|| crate::kube::lease::Election {
                namespace: self.lease_namespace.clone(),
                name: self.lease_name.clone(),
                identity: self
                    .advertise
                    .clone()
                    .unwrap_or_else(|| format!("http://{}", self.listen)),
                ttl: Duration::from_secs(self.election_ttl_s),
                pod: self.pod_name.clone(),
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let mut all = vec!["netaccel-registry"];
        all.extend_from_slice(args);
        Args::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .into_config()
    }

    #[test]
    fn defaults_match_the_spec() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:7400".parse().unwrap());
        assert_eq!(c.policy.ceiling, 0.9);
        assert_eq!(c.policy.order, Order::Utilization);
        assert_eq!(c.lease, Duration::from_millis(3000));
        assert!(c.token.is_none() && c.release_unused.is_none());
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for (args, want) in [
            (&["--ceiling", "1.5"][..], "--ceiling"),
            (&["--ceiling", "0"][..], "--ceiling"),
            (&["--lease-ms", "10"][..], "--lease-ms"),
            (&["--nodes-max", "0"][..], "--nodes-max"),
            (&["--store", "etcd://127.0.0.1"][..], "--store"),
            (
                &["--store", "etcd://h:1", "--election-ttl-s", "0"][..],
                "--election-ttl-s",
            ),
            (&["--prometheus", "localhost:9090"][..], "--prometheus"),
            (&["--token", ""][..], "--token"),
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
        for (args, want) in [
            (
                &["--kubernetes", "--webhook-url", "http://x/"][..],
                "https://",
            ),
            (
                &["--kubernetes", "--webhook-configuration", "n"][..],
                "--webhook-url",
            ),
            (
                &["--kubernetes", "--webhook-service", "ns"][..],
                "NAMESPACE/NAME",
            ),
        ] {
            let err = parse(args).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
        let k = parse(&[
            "--kubernetes",
            "--webhook-configuration",
            "n",
            "--webhook-service",
            "ns/reg:8443",
        ])
        .unwrap()
        .kubernetes
        .unwrap();
        assert_eq!(
            k.webhook_client,
            Some(crate::kube::WebhookClient::Service {
                namespace: "ns".into(),
                name: "reg".into(),
                port: 8443
            })
        );
        assert_eq!(k.registry_url, "http://127.0.0.1:7400");
        assert!(parse(&[]).unwrap().kubernetes.is_none());
        let c = parse(&["--token", "t", "--order", "occupation"]).unwrap();
        assert_eq!(c.node_token.as_deref(), Some("t"));
        assert_eq!(c.policy.order, Order::Occupation);
    }
}
