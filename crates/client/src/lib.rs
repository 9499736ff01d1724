//! Client side of netaccel: a small blocking HTTP client for a node's API
//! ([`NodeClient`]), an asynchronous pipelined RAC v1 client ([`rac::RacClient`]), and
//! the registry's client with a caller that follows its binding
//! ([`registry::Bound`]), used by the `netaccel` command-line tool and by tests.
//!
//! It knows the node's routes, its JSON error bodies and how to drive a RAC connection;
//! the RAC bytes themselves come from crate `rac-proto`, and it does not know how
//! accelerators compute (crate `accel`).

pub mod rac;
pub mod registry;
mod tls_probe;

use std::fmt;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

/// A call's output and the node's account of it.
#[derive(Debug, Clone)]
pub struct CallOutput {
    pub output: Vec<u8>,
    pub queue_ns: u64,
    pub exec_ns: u64,
    pub slot: Option<u16>,
}

#[derive(Debug)]
pub enum ClientError {
    /// The node could not be reached or the exchange broke off.
    Transport(String),
    /// The node answered with an error status (`http_status` 0 over RAC).
    Node {
        http_status: u16,
        code: String,
        message: String,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Transport(m) => write!(f, "cannot talk to the node: {m}"),
            ClientError::Node {
                http_status,
                code,
                message,
            } => {
                write!(f, "node answered {http_status} {code}: {message}")
            }
        }
    }
}

impl std::error::Error for ClientError {}

/// Largest response body the client reads (a 4096×4096 matmul result is 64 MiB).
const RESPONSE_BYTES_MAX: u64 = 1 << 30;

/// The base URL of a node's HTTP API from what a user types: `http://HOST:PORT`,
/// `https://HOST:PORT` (a node's HTTPS listener), or `HOST:PORT` alone (no scheme
/// means `http://`). Other schemes are refused with a message that says what is
/// accepted.
///
/// ```
/// use netaccel_client::base_url;
/// assert_eq!(base_url("127.0.0.1:8080").unwrap(), "http://127.0.0.1:8080");
/// assert_eq!(base_url("http://node-3:8080/").unwrap(), "http://node-3:8080");
/// assert_eq!(base_url("HTTPS://node-3:8443").unwrap(), "https://node-3:8443");
/// assert!(base_url("ftp://node-3").is_err());
/// ```
pub fn base_url(addr: &str) -> Result<String, String> {
    let addr = addr.trim().trim_end_matches('/');
    let (scheme, host) = match addr.split_once("://") {
        None => ("http", addr),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => ("http", rest),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => ("https", rest),
        Some((scheme, _)) => {
            return Err(format!(
                "`{addr}`: give http://HOST:PORT, https://HOST:PORT or HOST:PORT, not {scheme}://"
            ))
        }
    };
    // A path after the authority is kept (a node behind a proxy under a prefix).
    let authority = host.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.starts_with(':') || host.contains(char::is_whitespace) {
        return Err(format!(
            "`{addr}` is not a node address; give HOST:PORT or http://HOST:PORT"
        ));
    }
    Ok(format!("{scheme}://{host}"))
}

/// What to do about a failed TLS handshake, from the TLS stack's error text: the
/// node's certificate is not trusted (pass `--cacert`), names another host, or the node
/// wants a client certificate (pass `--cert` and `--key`). `None` when `error` is no
/// TLS failure, so that "is a node listening there?" is asked only when it may be
/// the answer.
///
/// ```
/// use netaccel_client::tls_advice;
/// let untrusted = "https://localhost:8443/v1/slots: invalid peer certificate: UnknownIssuer";
/// assert!(tls_advice(untrusted).unwrap().contains("--cacert"));
/// assert!(tls_advice("received fatal alert: CertificateRequired").unwrap().contains("--cert"));
/// assert_eq!(tls_advice("Connection refused (os error 111)"), None);
/// ```
pub fn tls_advice(error: &str) -> Option<&'static str> {
    if error.contains("NotValidForName") {
        Some(
            "the node's certificate does not name the host called: use a name or address \
             the certificate names",
        )
    } else if error.contains("invalid peer certificate") {
        Some(
            "the node's certificate is not trusted: pass --cacert FILE (or NETACCEL_CACERT), \
             the CA that signed it",
        )
    } else if error.contains("CertificateRequired") {
        Some(
            "the node asks for a client certificate: pass --cert FILE and --key FILE (a \
             certificate its client CA signed)",
        )
    } else {
        None
    }
}

pub struct NodeClient {
    base: String,
    agent: ureq::Agent,
    /// What the agent trusts and presents over HTTPS (`None`: the public web roots).
    tls: Option<Arc<rustls::ClientConfig>>,
    /// A tenant's bearer token, sent with every request ([`NodeClient::with_token`]).
    token: Option<String>,
}

impl NodeClient {
    /// `base` is the node's URL, e.g. `http://127.0.0.1:8080`.
    pub fn new(base: &str) -> NodeClient {
        NodeClient::with_agent(base, NodeClient::agent(), None)
    }

    /// A client of a node's HTTPS listener (`base` an `https://` URL) that trusts and
    /// presents what `tls` says ([`rac::tls_config`]: CA file, client certificate).
    pub fn with_tls(base: &str, tls: std::sync::Arc<rustls::ClientConfig>) -> NodeClient {
        let agent = NodeClient::agent().tls_config(Arc::clone(&tls));
        NodeClient::with_agent(base, agent, Some(tls))
    }

    fn agent() -> ureq::AgentBuilder {
        ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5))
            .timeout(Duration::from_secs(300))
    }

    fn with_agent(
        base: &str,
        agent: ureq::AgentBuilder,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> NodeClient {
        NodeClient {
            base: base.trim_end_matches('/').to_string(),
            agent: agent.build(),
            tls,
            token: None,
        }
    }

    /// The same client calling as the tenant `token` belongs to: every request carries
    /// `Authorization: Bearer TOKEN` (docs/security.md). A node that refuses anonymous
    /// callers answers `401` without it.
    pub fn with_token(mut self, token: impl Into<String>) -> NodeClient {
        self.token = Some(token.into());
        self
    }

    /// `req` with the client's token, if it has one.
    fn authorized(&self, req: ureq::Request) -> ureq::Request {
        match &self.token {
            Some(token) => req.set("Authorization", &format!("Bearer {token}")),
            None => req,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Calls accelerator `name` with `params` (name, value) and `payload`.
    pub fn call(
        &self,
        name: &str,
        params: &[(String, String)],
        payload: &[u8],
        deadline_us: Option<u32>,
    ) -> Result<CallOutput, ClientError> {
        let mut req = self.authorized(self.agent.post(&self.url(&format!("/v1/fn/{name}"))));
        for (k, v) in params {
            req = req.query(k, v);
        }
        if let Some(us) = deadline_us {
            req = req.set("X-Netaccel-Deadline-Us", &us.to_string());
        }
        let resp = self.check(req.send_bytes(payload))?;
        let header_num = |name: &str| {
            resp.header(name)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let queue_ns = header_num("X-Netaccel-Queue-Ns");
        let exec_ns = header_num("X-Netaccel-Exec-Ns");
        let slot = resp.header("X-Netaccel-Slot").and_then(|v| v.parse().ok());
        let output = read_body(resp)?;
        Ok(CallOutput {
            output,
            queue_ns,
            exec_ns,
            slot,
        })
    }

    pub fn accelerators(&self) -> Result<serde_json::Value, ClientError> {
        self.get_json("/v1/accelerators")
    }

    pub fn slots(&self) -> Result<serde_json::Value, ClientError> {
        self.get_json("/v1/slots")
    }

    /// One slot's document (`GET /v1/slots/{id}`): what it holds, its state, what it is
    /// loading.
    pub fn slot(&self, id: u16) -> Result<serde_json::Value, ClientError> {
        self.get_json(&format!("/v1/slots/{id}"))
    }

    /// Loads accelerator `name` into slot `slot`; returns the node's report. `token`
    /// (the node's admin token, or an operator tenant's) is sent instead of the
    /// client's own, when given.
    pub fn load(
        &self,
        slot: u16,
        name: &str,
        token: Option<&str>,
    ) -> Result<serde_json::Value, ClientError> {
        let mut req = self.authorized(self.agent.put(&self.url(&format!("/v1/slots/{slot}"))));
        if let Some(token) = token {
            req = req.set("Authorization", &format!("Bearer {token}"));
        }
        let resp = self.check(req.send_json(serde_json::json!({ "accelerator": name })))?;
        parse_json(resp)
    }

    fn get_json(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        parse_json(self.check(self.authorized(self.agent.get(&self.url(path))).call())?)
    }

    /// `result` with an error status read into [`ClientError::Node`]; over HTTPS a
    /// transport failure that names no TLS cause is explained by a handshake of its
    /// own ([`tls_probe`]), since a failed handshake can surface as "broken pipe".
    fn check(
        &self,
        result: Result<ureq::Response, ureq::Error>,
    ) -> Result<ureq::Response, ClientError> {
        match check(result) {
            Err(ClientError::Transport(m))
                if self.base.starts_with("https://") && tls_advice(&m).is_none() =>
            {
                let config = self.tls.clone().unwrap_or_else(tls_probe::default_config);
                Err(ClientError::Transport(
                    match tls_probe::handshake_error(&self.base, config) {
                        Some(cause) => format!("{m}; the TLS handshake says: {cause}"),
                        None => m,
                    },
                ))
            }
            other => other,
        }
    }
}

fn check(result: Result<ureq::Response, ureq::Error>) -> Result<ureq::Response, ClientError> {
    match result {
        Ok(resp) => Ok(resp),
        Err(ureq::Error::Status(http_status, resp)) => {
            let body = read_body(resp).unwrap_or_default();
            let parsed: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
            let field = |k: &str| {
                parsed
                    .as_ref()
                    .and_then(|v| v[k].as_str())
                    .map(str::to_string)
            };
            Err(ClientError::Node {
                http_status,
                code: field("code").unwrap_or_else(|| "UNKNOWN".to_string()),
                message: field("error")
                    .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned()),
            })
        }
        Err(e) => Err(ClientError::Transport(e.to_string())),
    }
}

fn read_body(resp: ureq::Response) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    resp.into_reader()
        .take(RESPONSE_BYTES_MAX)
        .read_to_end(&mut body)
        .map_err(|e| ClientError::Transport(e.to_string()))?;
    Ok(body)
}

fn parse_json(resp: ureq::Response) -> Result<serde_json::Value, ClientError> {
    let body = read_body(resp)?;
    serde_json::from_slice(&body)
        .map_err(|e| ClientError::Transport(format!("node sent invalid JSON: {e}")))
}
