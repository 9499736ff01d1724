//! `GRPCInferenceService`: the RPCs the node serves, each answered from the node's
//! state; `ModelInfer` runs its call down the same path as an HTTP call
//! ([`crate::core::dispatch::Dispatcher::run`]); `ModelStreamInfer` runs each message of its
//! stream the same way ([`super::stream`]), and counts it in the model's statistics
//! (`ModelStatistics`); the model repository's load and unload are here too. The RPCs the node does not serve (CUDA shared memory, tracing,
//! logging) answer `UNIMPLEMENTED` from the generated trait's defaults.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accel::Accelerator;
use prometheus_client::metrics::counter::Counter;
use rac_proto::Status as NodeStatus;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Request, Response, Status};

use super::pb::model_repository_parameter::ParameterChoice;
use super::pb::{
    ModelInferRequest, ModelInferResponse, RepositoryModelLoadRequest, RepositoryModelLoadResponse,
    RepositoryModelUnloadRequest, RepositoryModelUnloadResponse,
};
use super::{tensor, Peer};
use crate::core::deadline::Deadline;
use crate::core::memory::BodyMemory;
use crate::core::quota::Refused;
use crate::core::slot::{Answer, Call};
use crate::core::tenant::auth::{Action, AuthError, Base, Principal};
use crate::core::tenant::TenantId;
use crate::front::admin::{self, AdminError};
use crate::front::oip::{repository, stats, VERSION};
use crate::node::Node;
use crate::telemetry::audit::{AuditEvent, AuditKind};
use crate::telemetry::logging::Refusal;
use crate::telemetry::Protocol;

/// gRPC status codes, in code order (`Code::Ok` = 0 … `Code::Unauthenticated` = 16).
const CODES: usize = 17;

/// The service. One per network thread; all share the node.
#[derive(Clone)]
pub struct Inference {
    node: Arc<Node>,
    /// `netaccel_requests_total{protocol="grpc", code}` by gRPC status code.
    requests: Vec<Counter>,
}

impl Inference {
    pub fn new(node: Arc<Node>) -> Inference {
        let requests = (0..CODES as i32)
            .map(|c| {
                let name = format!("{:?}", Code::from_i32(c));
                node.metrics.requests("grpc", &name)
            })
            .collect();
        Inference { node, requests }
    }

    pub(super) fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// Counts an RPC's answer, and logs it when it is a refusal the client caused
    /// (as the other front ends do: see `logging`).
    pub(super) fn answered<T>(
        &self,
        peer: Option<&Peer>,
        result: Result<Response<T>, Status>,
    ) -> Result<Response<T>, Status> {
        let code = match &result {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        };
        self.requests[code as usize].inc();
        if let (Err(status), Some(peer)) = (&result, peer) {
            let kind = match code {
                Code::NotFound => Some(Refusal::UnknownAccelerator),
                Code::InvalidArgument => Some(Refusal::Protocol),
                Code::Unauthenticated | Code::PermissionDenied => Some(Refusal::Token),
                _ => None,
            };
            if let Some(kind) = kind {
                self.node.refusals.log(
                    kind,
                    Protocol::Grpc,
                    peer.addr,
                    &format_args!("{code:?}"),
                    &status.message(),
                );
            }
        }
        result
    }

    /// The model `name` at `version` ("" for the latest): every catalog accelerator is
    /// a model with the one version `1`, the built-ins and the models of the model
    /// repository (which declare their own tensors) alike.
    pub(super) fn model(&self, name: &str, version: &str) -> Result<Arc<dyn Accelerator>, Status> {
        let accel = self
            .node
            .dispatcher
            .catalog()
            .by_name(name)
            .cloned()
            .ok_or_else(|| Status::not_found(crate::front::oip::unknown_model(name)))?;
        if !version.is_empty() && version != VERSION {
            return Err(Status::not_found(crate::front::oip::unknown_version(
                name, version,
            )));
        }
        Ok(accel)
    }

    pub(super) fn hosted(&self, accel: &dyn Accelerator) -> bool {
        self.node.dispatcher.serves(accel.descriptor().id)
    }

    /// Runs one `ModelInfer` request; every request that names a model counts in its
    /// statistics (`crate::front::oip::stats`), as a success or a failure.
    pub(super) async fn infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let name = request.get_ref().model_name.as_str();
        let tenant = self.principal_of(&request, Some(Action::Call(name)))?.id;
        let peer = request.extensions().get::<Peer>().map(|p| p.addr);
        let deadline_us = deadline_us(request.metadata()).map_err(Status::invalid_argument)?;
        // The message is whole: queue time and the deadline count from here, as they
        // do for HTTP once the body is in.
        let received = Instant::now();
        let req = request.into_inner();
        let accel = self.model(&req.model_name, &req.model_version)?;
        let accel_id = accel.descriptor().id;
        let arrived = Arrived {
            tenant,
            peer,
            received,
            deadline_us,
        };
        let result = self.run(accel, req, arrived).await;
        match result {
            Ok((response, measured)) => {
                stats::record(&self.node, accel_id, measured);
                Ok(response)
            }
            Err(status) => {
                stats::record_refused(&self.node, accel_id, received);
                Err(status)
            }
        }
    }

    async fn run(
        &self,
        accel: Arc<dyn Accelerator>,
        mut req: ModelInferRequest,
        arrived: Arrived,
    ) -> Result<(Response<ModelInferResponse>, stats::Measured), Status> {
        let Arrived {
            tenant,
            peer,
            received,
            deadline_us,
        } = arrived;
        let accel_id = accel.descriptor().id;
        let in_shm = super::shm::rewrite_request(&self.node.shm, tenant, &mut req)
            .map_err(Status::invalid_argument)?;
        let decoded = tensor::decode(&*accel, &req).map_err(Status::invalid_argument)?;
        drop(req);
        let tensor::InferCall {
            params,
            payload,
            reply,
        } = decoded;
        let input_ns = stats::since_ns(received);
        accel
            .check(&params, Some(payload.len()))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        // The payload waits in a slot's queue like an HTTP body: it is held against the
        // same budget.
        let Some(permit) = self.node.body_budget.try_reserve(payload.len()) else {
            self.node.count_busy(Protocol::Grpc, Some(accel_id));
            return Err(refusal(
                NodeStatus::Busy,
                "the node has no memory free for request bodies; retry".to_string(),
            ));
        };
        let quota = self
            .node
            .quotas
            .admit(tenant, payload.len())
            .map_err(|refused| self.over_quota(peer, &refused))?;
        let batch = stats::batch(&*accel, payload.len());
        let call = Call {
            accel: Arc::clone(&accel),
            params,
            payload,
            out: Vec::new(),
            received,
            deadline: Deadline::after(received, deadline_us),
            tenant,
            permit: Some(BodyMemory::Budget(permit)),
        };
        let Answer {
            status,
            output,
            message,
            slot,
            queue_ns,
            exec_ns,
            ..
        } = (self.node.sequences)
            .run(&self.node.dispatcher, call, reply.sequence())
            .await;
        drop(quota);
        if status == NodeStatus::Busy {
            self.node.count_busy(Protocol::Grpc, Some(accel_id));
        }
        if status != NodeStatus::Ok {
            return Err(refusal(status, message));
        }
        let encoding = Instant::now();
        let mut response = Response::new(tensor::encode(&accel.descriptor().name, &reply, output));
        if !in_shm.is_empty() {
            super::shm::place_outputs(&in_shm, response.get_mut())
                .map_err(Status::invalid_argument)?;
        }
        let output_ns = stats::since_ns(encoding);
        // Where the time went, as HTTP's X-Netaccel-* headers say it.
        let m = response.metadata_mut();
        m.insert("x-netaccel-queue-ns", per_call(queue_ns));
        m.insert("x-netaccel-exec-ns", per_call(exec_ns));
        if let Some(slot) = slot {
            m.insert("x-netaccel-slot", MetadataValue::from(u64::from(slot)));
        }
        let measured = stats::Measured {
            received,
            ok: true,
            batch,
            input_ns,
            queue_ns,
            infer_ns: exec_ns,
            output_ns,
        };
        Ok((response, measured))
    }
}

/// The model repository's load and unload (`crate::front::oip::repository`), for
/// holders of the admin token (metadata `authorization: Bearer <token>`), as over HTTP.
impl Inference {
    pub(super) async fn repository_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Result<RepositoryModelLoadResponse, Status> {
        self.check_admin(&request, &request.get_ref().model_name)?;
        let req = request.into_inner();
        repository::refuse_files(req.parameters.keys().map(String::as_str))
            .map_err(admin_status)?;
        let config = match req
            .parameters
            .get("config")
            .and_then(|p| p.parameter_choice.as_ref())
        {
            None => None,
            Some(ParameterChoice::StringParam(text)) => Some(text.as_str()),
            Some(_) => {
                return Err(Status::invalid_argument(
                    "parameters.config must be a string: the model configuration as JSON",
                ))
            }
        };
        repository::load(Arc::clone(&self.node), &req.model_name, config)
            .await
            .map_err(admin_status)?;
        Ok(RepositoryModelLoadResponse {})
    }

    pub(super) async fn repository_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<RepositoryModelUnloadResponse, Status> {
        self.check_admin(&request, &request.get_ref().model_name)?;
        let name = request.into_inner().model_name;
        repository::unload(Arc::clone(&self.node), &name)
            .await
            .map_err(admin_status)?;
        Ok(RepositoryModelUnloadResponse {})
    }

    /// A call over its tenant's quota: logged within the rate limit, answered
    /// `RESOURCE_EXHAUSTED` with the node's `BUSY` and `retry-after` (seconds).
    fn over_quota(&self, peer: Option<SocketAddr>, refused: &Refused) -> Status {
        let peer = peer.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let code = Code::ResourceExhausted;
        self.node
            .refusals
            .log(Refusal::Quota, Protocol::Grpc, peer, &code, refused);
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "netaccel-status",
            MetadataValue::from_static(NodeStatus::Busy.name()),
        );
        metadata.insert("retry-after", MetadataValue::from(refused.retry_after_s()));
        Status::with_metadata(code, refused.to_string(), metadata)
    }

    /// Who sent a request — its metadata's `authorization: Bearer <token>`, its
    /// connection's certificate, or `anonymous` — if it may do `action` (`None`:
    /// whatever authenticated callers may). Refused `UNAUTHENTICATED` or
    /// `PERMISSION_DENIED`, audited.
    pub(super) fn principal_of<T>(
        &self,
        request: &Request<T>,
        action: Option<Action<'_>>,
    ) -> Result<Principal, Status> {
        let base = request.extensions().get::<Peer>().map_or_else(
            || Base::Connection(self.node.tenants.anonymous()),
            |p| p.base.clone(),
        );
        let what = || action.map_or_else(|| "request".to_string(), |a| a.to_string());
        let auth = &self.node.tenants.auth;
        let who = match auth.identify(&base, bearer(request.metadata())) {
            Ok(who) => who,
            Err(AuthError::Busy) => return Err(Status::unavailable(AuthError::Busy.message())),
            Err(e) => {
                let message = e.message();
                let kind = AuditKind::AuthenticationFailed;
                self.audit(request, kind, "anonymous", &what(), &message);
                return Err(Status::unauthenticated(message));
            }
        };
        match action.and_then(|a| self.node.refusal(&who, a)) {
            Some(message) => {
                self.audit(
                    request,
                    AuditKind::Forbidden,
                    who.label(),
                    &what(),
                    &message,
                );
                Err(Status::permission_denied(message))
            }
            _ => Ok(who),
        }
    }

    /// Loading or unloading `model`: for a caller whose policy allows it, or who
    /// holds the admin token (metadata `authorization: Bearer <token>`).
    fn check_admin<T>(&self, request: &Request<T>, model: &str) -> Result<(), Status> {
        let who = self.principal_of(request, None)?;
        let token = bearer(request.metadata());
        let config = &self.node.config;
        admin::authorize_load(config, &who, token, Some(model)).map_err(|refused| {
            let needs = "loading and unloading models needs the metadata `authorization: Bearer <admin token>`";
            let message = refused.message(needs, "model load/unload");
            let action = format!("load `{model}`");
            if refused.is_forbidden() {
                self.audit(request, AuditKind::Forbidden, who.label(), &action, &message);
                Status::permission_denied(message)
            } else {
                let kind = AuditKind::AuthenticationFailed;
                self.audit(request, kind, who.label(), &action, &message);
                Status::unauthenticated(message)
            }
        })
    }

    /// The audit line of a refused request.
    fn audit<T>(
        &self,
        request: &Request<T>,
        kind: AuditKind,
        who: &str,
        action: &str,
        detail: &str,
    ) {
        let addr = request
            .extensions()
            .get::<Peer>()
            .map_or_else(|| ([0, 0, 0, 0], 0).into(), |p| p.addr);
        let event = AuditEvent::request(kind, Protocol::Grpc, addr, who, action, detail);
        self.node.audit.record(&event);
    }
}

/// An admin operation's refusal as a gRPC status; the registry's refusal is
/// `FAILED_PRECONDITION` (HTTP answers it `409 CONFLICT`).
fn admin_status(e: AdminError) -> Status {
    if e.conflict {
        return Status::failed_precondition(e.message);
    }
    refusal(e.status, e.message)
}

/// The token of metadata `authorization: Bearer <token>`, if that is what it holds.
fn bearer(metadata: &MetadataMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// A figure that differs on every call, as response metadata that HPACK sends as a
/// literal and never enters in the connection's table: entered, each answer's new
/// values pushed out the entries that do repeat, and every answer paid for the
/// insertions, the evictions and the comparisons of its headers with the table's.
fn per_call(value: u64) -> MetadataValue<tonic::metadata::Ascii> {
    let mut value = MetadataValue::from(value);
    value.set_sensitive(true);
    value
}

/// Who sent a request and when it was whole.
struct Arrived {
    tenant: TenantId,
    /// The client's address, for the refusal log.
    peer: Option<SocketAddr>,
    received: Instant,
    deadline_us: u32,
}

/// The gRPC status for a call the node did not run or that failed. The node's own
/// status name travels in the `netaccel-status` metadata key.
fn refusal(status: NodeStatus, message: String) -> Status {
    let code = match status {
        NodeStatus::Ok => Code::Ok,
        NodeStatus::BadRequest | NodeStatus::ProtocolError => Code::InvalidArgument,
        NodeStatus::UnknownAccelerator => Code::NotFound,
        // Retry later: both are transient (full queues, a slot being reconfigured).
        NodeStatus::Busy | NodeStatus::Unavailable => Code::Unavailable,
        NodeStatus::TooLarge => Code::ResourceExhausted,
        NodeStatus::DeadlineExceeded => Code::DeadlineExceeded,
        NodeStatus::Unauthorized => Code::Unauthenticated,
        NodeStatus::Internal => Code::Internal,
    };
    let mut metadata = MetadataMap::new();
    metadata.insert("netaccel-status", MetadataValue::from_static(status.name()));
    Status::with_metadata(code, message, metadata)
}

/// The call's deadline in microseconds (0: none): the sooner of the gRPC deadline
/// (`grpc-timeout`, which clients set from their call timeout) and netaccel's own
/// `x-netaccel-deadline-us`, as over HTTP.
fn deadline_us(metadata: &MetadataMap) -> Result<u32, String> {
    let own = match metadata.get("x-netaccel-deadline-us") {
        Some(v) => Deadline::parse_http(v.as_bytes())?,
        None => 0,
    };
    let grpc = match metadata.get("grpc-timeout") {
        Some(v) => grpc_timeout(v.as_bytes())
            .ok_or_else(|| format!("grpc-timeout {v:?} is not a gRPC timeout"))?,
        None => None,
    };
    Ok(match (own, grpc) {
        (0, None) => 0,
        (0, Some(g)) => g,
        (own, None) => own,
        (own, Some(g)) => own.min(g),
    })
}

/// A `grpc-timeout` value (up to 8 digits and a unit: `H`, `M`, `S`, `m`, `u`, `n`) in
/// whole microseconds, rounded up so that a short timeout is not read as none; `None`
/// inside when it is longer than a call deadline can be (`u32::MAX` µs, 71 minutes),
/// and outer `None` when it is not a timeout.
fn grpc_timeout(value: &[u8]) -> Option<Option<u32>> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let duration = match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    };
    let us = duration.as_nanos().div_ceil(1000);
    Some(u32::try_from(us).ok().filter(|&us| us > 0))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_read_in_microseconds_rounded_up() {
        assert_eq!(grpc_timeout(b"250u"), Some(Some(250)));
        assert_eq!(grpc_timeout(b"3m"), Some(Some(3000)));
        assert_eq!(grpc_timeout(b"2S"), Some(Some(2_000_000)));
        assert_eq!(grpc_timeout(b"1n"), Some(Some(1)));
        assert_eq!(grpc_timeout(b"1500n"), Some(Some(2)));
        // Beyond what a call deadline can hold: no deadline from it.
        assert_eq!(grpc_timeout(b"2H"), Some(None));
        assert_eq!(grpc_timeout(b"0m"), Some(None));
        for bad in [
            &b""[..],
            b"m",
            b"10",
            b"10x",
            b"123456789m",
            b"-1m",
            b"1.5S",
        ] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_sooner_deadline_wins() {
        let mut m = MetadataMap::new();
        assert_eq!(deadline_us(&m), Ok(0));
        m.insert("grpc-timeout", MetadataValue::from_static("5m"));
        assert_eq!(deadline_us(&m), Ok(5000));
        m.insert("x-netaccel-deadline-us", MetadataValue::from_static("100"));
        assert_eq!(deadline_us(&m), Ok(100));
        m.insert("x-netaccel-deadline-us", MetadataValue::from_static("9000"));
        assert_eq!(deadline_us(&m), Ok(5000));
        m.insert("x-netaccel-deadline-us", MetadataValue::from_static("soon"));
        assert!(deadline_us(&m).is_err());
    }

    #[test]
    fn node_statuses_map_to_grpc_codes() {
        let code = |s| refusal(s, String::new()).code();
        assert_eq!(code(NodeStatus::Busy), Code::Unavailable);
        assert_eq!(code(NodeStatus::UnknownAccelerator), Code::NotFound);
        assert_eq!(code(NodeStatus::DeadlineExceeded), Code::DeadlineExceeded);
        assert_eq!(code(NodeStatus::BadRequest), Code::InvalidArgument);
        assert_eq!(code(NodeStatus::Internal), Code::Internal);
        let busy = refusal(NodeStatus::Busy, "full".into());
        assert_eq!(busy.metadata().get("netaccel-status").unwrap(), "BUSY");
    }
}
