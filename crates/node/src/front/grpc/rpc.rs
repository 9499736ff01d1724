//! The RPCs of `GRPCInferenceService`: health and metadata answered from the catalog,
//! `ModelInfer` by [`Inference`](super::service::Inference), `ModelStreamInfer` by a
//! stream of them (`stream.rs`), and the model configuration documents Triton's
//! clients read.

use accel::tensors::{TensorSpec, Tensors};
use accel::{Accelerator, Descriptor};
use tonic::{Request, Response, Status};

use super::pb::grpc_inference_service_server::GrpcInferenceService;
use super::pb::model_metadata_response::TensorMetadata;
use super::pb::{
    model_config, model_ensembling, model_input, model_instance_group, model_version_policy,
    CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse,
    CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse,
    CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse, DataType as ConfigType,
    ModelConfig, ModelConfigRequest, ModelConfigResponse, ModelEnsembling, ModelInferRequest,
    ModelInferResponse, ModelInput, ModelInstanceGroup, ModelMetadataRequest,
    ModelMetadataResponse, ModelOutput, ModelReadyRequest, ModelReadyResponse,
    ModelSequenceBatching, ModelStatisticsRequest, ModelStatisticsResponse, ModelVersionPolicy,
    RepositoryIndexRequest, RepositoryIndexResponse, RepositoryModelLoadRequest,
    RepositoryModelLoadResponse, RepositoryModelUnloadRequest, RepositoryModelUnloadResponse,
    ServerLiveRequest, ServerLiveResponse, ServerMetadataRequest, ServerMetadataResponse,
    ServerReadyRequest, ServerReadyResponse, SystemSharedMemoryRegisterRequest,
    SystemSharedMemoryRegisterResponse, SystemSharedMemoryStatusRequest,
    SystemSharedMemoryStatusResponse, SystemSharedMemoryUnregisterRequest,
    SystemSharedMemoryUnregisterResponse,
};
use super::service::Inference;
use super::Peer;
use crate::core::tenant::auth::Action;
use crate::front::oip::shm::CUDA_NOT_SUPPORTED;
use crate::front::oip::stats::{self, Statistics};
use crate::front::oip::{ensemble, repository};
use crate::front::oip::{node_ready, EXTENSIONS};
use crate::front::oip::{DataType, Signature, OUTPUT, VERSION};

/// The protobuf enum of a datatype: its value named as the model configuration names it.
fn config_type(dt: DataType) -> ConfigType {
    ConfigType::from_str_name(dt.config_name()).expect("every datatype has a config enum value")
}

/// Triton's model configuration, the fields clients and `perf_analyzer` read (as
/// `GET /v2/models/{m}/config` gives them). `max_batch_size` 0: shapes are whole.
fn model_config(accel: &dyn Accelerator) -> ModelConfig {
    let d = accel.descriptor();
    if let Some(t) = accel.tensors() {
        // A stateful model's control inputs are the node's to fill, not inputs.
        let sent = crate::front::oip::sequence::request_tensors(t, accel.sequence());
        return declared_config(accel, d, &sent);
    }
    let sig = Signature::of(d);
    let data_type = config_type(sig.datatype) as i32;
    ModelConfig {
        name: d.name.clone(),
        platform: "netaccel".into(),
        backend: "netaccel".into(),
        version_policy: Some(ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(
                model_version_policy::Latest { num_versions: 1 },
            )),
        }),
        max_batch_size: 0,
        input: sig
            .inputs()
            .iter()
            .map(|name| ModelInput {
                name: name.to_string(),
                data_type,
                dims: sig.shape().to_vec(),
                ..Default::default()
            })
            .collect(),
        output: vec![ModelOutput {
            name: OUTPUT.into(),
            data_type,
            dims: sig.shape().to_vec(),
            ..Default::default()
        }],
        instance_group: vec![ModelInstanceGroup {
            kind: model_instance_group::Kind::Cpu as i32,
            count: 1,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The configuration of a model that declares its tensors, as `GET
/// /v2/models/{m}/config` gives it: its `max_batch_size`, and Triton's `dims` leaving
/// out the batch axis.
fn declared_config(accel: &dyn Accelerator, d: &Descriptor, t: &Tensors) -> ModelConfig {
    let input = |s: &TensorSpec| ModelInput {
        name: s.name.clone(),
        data_type: config_type(s.datatype) as i32,
        dims: s.dims.iter().map(|&d| accel::tensors::dim_i64(d)).collect(),
        format: accel
            .tensor_config(&s.name)
            .format
            .and_then(|f| model_input::Format::from_str_name(&f))
            .map_or(0, |f| f as i32),
        ..Default::default()
    };
    let output = |s: &TensorSpec| ModelOutput {
        name: s.name.clone(),
        data_type: config_type(s.datatype) as i32,
        dims: s.dims.iter().map(|&d| accel::tensors::dim_i64(d)).collect(),
        label_filename: accel
            .tensor_config(&s.name)
            .label_filename
            .unwrap_or_default(),
        ..Default::default()
    };
    ModelConfig {
        name: d.name.clone(),
        platform: "onnx".into(),
        backend: accel.engine().unwrap_or("netaccel").into(),
        version_policy: Some(ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(
                model_version_policy::Latest { num_versions: 1 },
            )),
        }),
        max_batch_size: t.max_batch_size as i32,
        input: t.inputs.iter().map(input).collect(),
        output: t.outputs.iter().map(output).collect(),
        instance_group: vec![ModelInstanceGroup {
            kind: model_instance_group::Kind::Cpu as i32,
            count: 1,
            ..Default::default()
        }],
        scheduling_choice: accel
            .sequence()
            .map(|p| model_config::SchedulingChoice::SequenceBatching(sequence_batching(p))),
        ..Default::default()
    }
}

/// A stateful model's `sequence_batching`, as Triton's configuration gives it.
fn sequence_batching(policy: &accel::sequence::Policy) -> ModelSequenceBatching {
    use super::pb::model_sequence_batching::{control, Control, ControlInput, StrategyChoice};
    use accel::sequence::{ControlKind, Strategy};
    let control_input = policy
        .controls
        .iter()
        .map(|c| {
            let kind = control::Kind::from_str_name(c.kind.config_name())
                .expect("every control kind is in the protocol's enum");
            let (f, t) = c.values;
            let mut control = Control {
                kind: kind as i32,
                ..Default::default()
            };
            match (c.kind, c.datatype) {
                (ControlKind::CorrId, dt) => control.data_type = config_type(dt) as i32,
                (_, DataType::Int32) => control.int32_false_true = vec![f as i32, t as i32],
                (_, DataType::Bool) => control.bool_false_true = vec![f != 0.0, t != 0.0],
                _ => control.fp32_false_true = vec![f as f32, t as f32],
            }
            ControlInput {
                name: c.input.clone(),
                control: vec![control],
            }
        })
        .collect();
    ModelSequenceBatching {
        max_sequence_idle_microseconds: policy.max_idle.as_micros() as u64,
        control_input,
        strategy_choice: Some(match policy.strategy {
            Strategy::Direct => StrategyChoice::Direct(Default::default()),
            Strategy::Oldest => StrategyChoice::Oldest(Default::default()),
        }),
        ..Default::default()
    }
}

/// An ensemble's configuration: a model's, with its platform and steps.
fn ensemble_config(e: &crate::core::ensemble::Ensemble, config: &mut ModelConfig) {
    let map = |pairs: &[(String, String)]| pairs.iter().cloned().collect();
    let step = e
        .scheduling()
        .iter()
        .map(|s| model_ensembling::Step {
            model_name: s.model_name.clone(),
            model_version: -1,
            input_map: map(&s.input_map),
            output_map: map(&s.output_map),
            ..Default::default()
        })
        .collect();
    config.platform = ensemble::PLATFORM.into();
    config.backend = String::new();
    config.instance_group.clear();
    config.scheduling_choice = Some(model_config::SchedulingChoice::EnsembleScheduling(
        ModelEnsembling {
            step,
            ..Default::default()
        },
    ));
}

fn model_metadata(accel: &dyn Accelerator) -> ModelMetadataResponse {
    let d = accel.descriptor();
    if let Some(t) = accel.tensors() {
        let sent = crate::front::oip::sequence::request_tensors(t, accel.sequence());
        let t = &*sent;
        let tensor = |s: &TensorSpec| TensorMetadata {
            name: s.name.clone(),
            datatype: s.datatype.name().to_string(),
            shape: t.declared_shape(s),
        };
        return ModelMetadataResponse {
            name: d.name.clone(),
            versions: vec![VERSION.into()],
            platform: "onnx".into(),
            inputs: t.inputs.iter().map(tensor).collect(),
            outputs: t.outputs.iter().map(tensor).collect(),
        };
    }
    let sig = Signature::of(d);
    let tensor = |name: &str| TensorMetadata {
        name: name.to_string(),
        datatype: sig.datatype.name().to_string(),
        shape: sig.shape().to_vec(),
    };
    ModelMetadataResponse {
        name: d.name.clone(),
        versions: vec![VERSION.into()],
        platform: "netaccel".into(),
        inputs: sig.inputs().iter().map(|n| tensor(n)).collect(),
        outputs: vec![tensor(OUTPUT)],
    }
}

/// The statistics document as the protocol's message (the same fields: `oip::stats`).
fn statistics(doc: Statistics) -> ModelStatisticsResponse {
    use super::pb;
    let d = |d: stats::Duration| {
        Some(pb::StatisticDuration {
            count: d.count,
            ns: d.ns,
        })
    };
    let model = |m: stats::ModelStatistics| {
        let i = m.inference_stats;
        pb::ModelStatistics {
            name: m.name,
            version: m.version,
            last_inference: m.last_inference,
            inference_count: m.inference_count,
            execution_count: m.execution_count,
            inference_stats: Some(pb::InferStatistics {
                success: d(i.success),
                fail: d(i.fail),
                queue: d(i.queue),
                compute_input: d(i.compute_input),
                compute_infer: d(i.compute_infer),
                compute_output: d(i.compute_output),
                cache_hit: d(i.cache_hit),
                cache_miss: d(i.cache_miss),
            }),
            batch_stats: m
                .batch_stats
                .into_iter()
                .map(|b| pb::InferBatchStatistics {
                    batch_size: b.batch_size,
                    compute_input: d(b.compute_input),
                    compute_infer: d(b.compute_infer),
                    compute_output: d(b.compute_output),
                })
                .collect(),
            ..Default::default()
        }
    };
    ModelStatisticsResponse {
        model_stats: doc.model_stats.into_iter().map(model).collect(),
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Inference {
    async fn server_live(
        &self,
        _: Request<ServerLiveRequest>,
    ) -> Result<Response<ServerLiveResponse>, Status> {
        self.answered(None, Ok(Response::new(ServerLiveResponse { live: true })))
    }

    async fn server_ready(
        &self,
        _: Request<ServerReadyRequest>,
    ) -> Result<Response<ServerReadyResponse>, Status> {
        let ready = node_ready(self.node());
        self.answered(None, Ok(Response::new(ServerReadyResponse { ready })))
    }

    /// A model is ready when a slot hosts it; an unknown model or version is not ready
    /// (an answer, not an error, as Triton gives it).
    async fn model_ready(
        &self,
        request: Request<ModelReadyRequest>,
    ) -> Result<Response<ModelReadyResponse>, Status> {
        let req = request.get_ref();
        let ready = self
            .model(&req.name, &req.version)
            .is_ok_and(|a| self.hosted(&*a));
        self.answered(None, Ok(Response::new(ModelReadyResponse { ready })))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        self.answered(
            None,
            Ok(Response::new(ServerMetadataResponse {
                name: "netaccel".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
            })),
        )
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let peer = request.extensions().get::<Peer>().cloned();
        let req = request.get_ref();
        let result = self
            .principal_of(&request, Some(Action::Catalog))
            .and_then(|_| self.model(&req.name, &req.version))
            .map(|a| {
                let mut metadata = model_metadata(&*a);
                if ensemble::of(self.node(), &*a).is_some() {
                    metadata.platform = ensemble::PLATFORM.into();
                }
                Response::new(metadata)
            });
        self.answered(peer.as_ref(), result)
    }

    async fn model_infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let peer = request.extensions().get::<Peer>().cloned();
        let req = request.get_ref();
        let decoupled = self
            .model(&req.model_name, &req.model_version)
            .is_ok_and(|m| m.responses().is_some());
        if decoupled {
            let refused = Err(Status::unimplemented(super::decoupled::UNARY_REFUSAL));
            return self.answered(peer.as_ref(), refused);
        }
        let result = self.infer(request).await;
        self.answered(peer.as_ref(), result)
    }

    /// Inferences over one bidirectional stream (see [`super::stream`]).
    async fn model_stream_infer(
        &self,
        request: Request<tonic::Streaming<ModelInferRequest>>,
    ) -> Result<Response<super::stream::Answers>, Status> {
        Ok(Response::new(super::stream::serve(self.clone(), request)))
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        let peer = request.extensions().get::<Peer>().cloned();
        let req = request.get_ref();
        let result = self
            .principal_of(&request, Some(Action::Metrics))
            .and_then(|_| {
                stats::select(self.node(), &req.name, &req.version).map_err(Status::not_found)
            })
            .map(|doc| Response::new(statistics(doc)));
        self.answered(peer.as_ref(), result)
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        use super::pb::repository_index_response::ModelIndex;
        if let Err(refused) = self.principal_of(&request, Some(Action::Catalog)) {
            return self.answered(None, Err(refused));
        }
        let models = repository::index(self.node(), request.get_ref().ready)
            .into_iter()
            .map(|e| ModelIndex {
                name: e.name,
                version: e.version,
                state: e.state.to_string(),
                reason: e.reason,
            })
            .collect();
        self.answered(None, Ok(Response::new(RepositoryIndexResponse { models })))
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        let peer = request.extensions().get::<Peer>().cloned();
        let result = self.repository_load(request).await;
        self.answered(peer.as_ref(), result.map(Response::new))
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        let peer = request.extensions().get::<Peer>().cloned();
        let result = self.repository_unload(request).await;
        self.answered(peer.as_ref(), result.map(Response::new))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<SystemSharedMemoryStatusRequest>,
    ) -> Result<Response<SystemSharedMemoryStatusResponse>, Status> {
        use super::pb::system_shared_memory_status_response::RegionStatus;
        let tenant = match self.principal_of(&request, None) {
            Ok(who) => who.id,
            Err(refused) => return self.answered(None, Err(refused)),
        };
        let name = Some(request.get_ref().name.as_str()).filter(|n| !n.is_empty());
        let result = self.node().shm.status(tenant, name).map(|list| {
            let regions = list
                .into_iter()
                .map(|r| {
                    let status = RegionStatus {
                        name: r.name.clone(),
                        key: r.key,
                        offset: r.offset,
                        byte_size: r.byte_size,
                    };
                    (r.name, status)
                })
                .collect();
            Response::new(SystemSharedMemoryStatusResponse { regions })
        });
        self.answered(None, result.map_err(Status::invalid_argument))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<SystemSharedMemoryRegisterRequest>,
    ) -> Result<Response<SystemSharedMemoryRegisterResponse>, Status> {
        let key = request.get_ref().key.clone();
        let tenant = match self.principal_of(&request, Some(Action::SharedMemory(&key))) {
            Ok(who) => who.id,
            Err(refused) => return self.answered(None, Err(refused)),
        };
        let r = request.get_ref();
        let result = self
            .node()
            .shm
            .register(tenant, &r.name, &r.key, r.offset, r.byte_size)
            .map(|()| Response::new(SystemSharedMemoryRegisterResponse {}));
        self.answered(None, result.map_err(Status::invalid_argument))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<SystemSharedMemoryUnregisterResponse>, Status> {
        let tenant = match self.principal_of(&request, None) {
            Ok(who) => who.id,
            Err(refused) => return self.answered(None, Err(refused)),
        };
        let name = Some(request.get_ref().name.as_str()).filter(|n| !n.is_empty());
        let result = self
            .node()
            .shm
            .unregister(tenant, name)
            .map(|()| Response::new(SystemSharedMemoryUnregisterResponse {}));
        self.answered(None, result.map_err(Status::invalid_argument))
    }

    /// CUDA shared memory is not served (the node has no CUDA device): registering is
    /// refused with the protocol's error, and there is never a region to list or
    /// unregister, as over HTTP.
    async fn cuda_shared_memory_register(
        &self,
        _: Request<CudaSharedMemoryRegisterRequest>,
    ) -> Result<Response<CudaSharedMemoryRegisterResponse>, Status> {
        self.answered(None, Err(Status::invalid_argument(CUDA_NOT_SUPPORTED)))
    }

    async fn cuda_shared_memory_status(
        &self,
        _: Request<CudaSharedMemoryStatusRequest>,
    ) -> Result<Response<CudaSharedMemoryStatusResponse>, Status> {
        let none = CudaSharedMemoryStatusResponse::default();
        self.answered(None, Ok(Response::new(none)))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        _: Request<CudaSharedMemoryUnregisterRequest>,
    ) -> Result<Response<CudaSharedMemoryUnregisterResponse>, Status> {
        let done = CudaSharedMemoryUnregisterResponse {};
        self.answered(None, Ok(Response::new(done)))
    }

    async fn model_config(
        &self,
        request: Request<ModelConfigRequest>,
    ) -> Result<Response<ModelConfigResponse>, Status> {
        let peer = request.extensions().get::<Peer>().cloned();
        let req = request.get_ref();
        let result = self
            .principal_of(&request, Some(Action::Catalog))
            .and_then(|_| self.model(&req.name, &req.version))
            .map(|a| {
                let mut config = model_config(&*a);
                if let Some(e) = ensemble::of(self.node(), &*a) {
                    ensemble_config(e, &mut config);
                }
                Response::new(ModelConfigResponse {
                    config: Some(config),
                })
            });
        self.answered(peer.as_ref(), result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel::Catalog;

    #[test]
    fn config_and_metadata_declare_the_signature() {
        let c = Catalog::builtin();
        let cfg = model_config(&**c.by_name("matmul").unwrap());
        assert_eq!(cfg.input.len(), 2);
        assert_eq!(cfg.input[1].name, "INPUT1");
        assert_eq!(cfg.input[0].data_type, ConfigType::TypeFp32 as i32);
        assert_eq!(cfg.output[0].dims, [-1, -1]);
        assert_eq!(cfg.max_batch_size, 0);
        let m = model_metadata(&**c.by_name("topk").unwrap());
        assert_eq!(m.inputs[0].datatype, "INT32");
        assert_eq!(m.inputs[0].shape, [-1]);
        assert_eq!(m.versions, ["1"]);
    }

    #[test]
    fn a_declared_model_has_its_own_tensors_and_batch_axis() {
        let m = crate::front::oip::declared::example::Example::default();
        let cfg = model_config(&m);
        assert_eq!(cfg.platform, "onnx");
        assert_eq!(cfg.max_batch_size, 4);
        assert_eq!(cfg.input[1].name, "floats");
        assert_eq!(cfg.input[1].data_type, ConfigType::TypeFp32 as i32);
        // Triton's dims leave the batch axis out; metadata shapes have it as -1.
        assert_eq!(cfg.input[0].dims, [3]);
        assert_eq!(cfg.output[0].data_type, ConfigType::TypeInt32 as i32);
        let md = model_metadata(&m);
        assert_eq!(md.platform, "onnx");
        assert_eq!(md.inputs[0].shape, [-1, 3]);
        assert_eq!(md.outputs[1].name, "scores");
        assert_eq!(md.outputs[1].shape, [-1, 2]);
    }
}
