//! `ModelStreamInfer`: inferences over one bidirectional gRPC stream, as tritonclient's
//! `start_stream` / `async_stream_infer` send them.
//!
//! Each message the client sends is one `ModelInferRequest`, run exactly as a
//! `ModelInfer` call (same decoding, admission, tenant, metrics, deadline rules); each
//! answer is one `ModelStreamInferResponse`: the inference, or `error_message` with the
//! same sentence `ModelInfer` would have given as its status (and the request's `id`
//! and model in `infer_response`, so a client can tell which request failed). An error
//! answers that one request; the stream goes on.
//!
//! Order. Requests run concurrently, up to [`IN_FLIGHT_MAX`] per stream, and answers go
//! back as calls finish, which on a model with several slots need not be the order of
//! the requests: match them by `id`, as Triton's clients do. (One slot runs its calls
//! in arrival order, so its answers come in order.)
//!
//! Bounds. At most [`IN_FLIGHT_MAX`] requests of a stream are running, and at most
//! [`ANSWERS_QUEUED_MAX`] answers wait for the client to read them; beyond either the
//! node stops reading the stream, and HTTP/2's flow control holds the client back. So
//! a stream whose client never reads holds at most that many answers.
//!
//! Deadlines. The stream's own `grpc-timeout` bounds the whole stream (tonic and the
//! client enforce it), not each request; `x-netaccel-deadline-us` in the stream's
//! metadata applies to each request, as it would to a `ModelInfer` call.
//!
//! Decoupled models ([`decoupled`]): a request's run answers with several messages,
//! sent one by one through the same bounded queue.
//!
//! Cancellation. A stream its client cancels (or whose answers nobody reads any more)
//! ends at once: its requests still queued at slots never run, those running finish
//! and their answers are dropped (`core::slot::cancel`).
//!
//! Drain. When the node shuts down, the stream stops taking requests, answers those it
//! has, and ends with status OK, so the client sees every answer it is owed.

use std::pin::Pin;

use futures_util::stream::FuturesUnordered;
use futures_util::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::decoupled;
use super::pb::{ModelInferRequest, ModelInferResponse, ModelStreamInferResponse};
use super::service::Inference;
use super::Peer;

/// Requests of one stream running at once.
pub const IN_FLIGHT_MAX: usize = 64;
/// Answers of one stream waiting for the client to read them.
pub const ANSWERS_QUEUED_MAX: usize = 16;

/// The answers of a stream, as the generated service trait wants them.
pub type Answers =
    Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send + 'static>>;

/// Starts serving the stream `request` opened: a task reads it and runs its requests;
/// the answers come out of the returned stream.
pub fn serve(service: Inference, request: Request<Streaming<ModelInferRequest>>) -> Answers {
    let peer = request.extensions().get::<Peer>().cloned();
    let mut metadata = request.metadata().clone();
    // The stream's deadline is the stream's, not each request's.
    metadata.remove("grpc-timeout");
    let mut incoming = request.into_inner();
    let (tx, rx) = tokio::sync::mpsc::channel(ANSWERS_QUEUED_MAX);
    let mut shutdown = service.node().shutdown_signal();
    tokio::spawn(async move {
        let mut running = FuturesUnordered::new();
        let mut reading = !*shutdown.borrow_and_update();
        loop {
            tokio::select! {
                message = incoming.message(), if reading && running.len() < IN_FLIGHT_MAX => {
                    match message {
                        Ok(Some(message)) => {
                            let (id, model) = (message.id.clone(), message.model_name.clone());
                            // A decoupled model's run answers with several responses.
                            let responses = service
                                .model(&message.model_name, &message.model_version)
                                .ok()
                                .and_then(|m| m.responses());
                            let empty_final = decoupled::wants_empty_final(&message);
                            let mut one = Request::new(message);
                            *one.metadata_mut() = metadata.clone();
                            if let Some(peer) = &peer {
                                one.extensions_mut().insert(peer.clone());
                            }
                            let (service, peer) = (&service, &peer);
                            running.push(async move {
                                let result = service.infer(one).await;
                                let result = service.answered(peer.as_ref(), result);
                                (id, model, result, responses.map(|r| (r, empty_final)))
                            });
                        }
                        // The client closed its side: answer what is running, then end.
                        Ok(None) => reading = false,
                        // The client cancelled the stream (or it broke): nobody is left
                        // to answer. Dropping the calls running withdraws those still
                        // queued (`core::slot::cancel`).
                        Err(_) => return,
                    }
                }
                Some((id, model, result, decoupled)) = running.next(), if !running.is_empty() => {
                    for message in answers(id, model, result, decoupled) {
                        if tx.send(Ok(message)).await.is_err() {
                            // The client is gone: nobody to answer.
                            return;
                        }
                    }
                }
                _ = shutdown.changed(), if reading => reading = false,
                // The answers' receiver is gone (the client left): as a cancel.
                () = tx.closed(), if reading || !running.is_empty() => return,
                else => return,
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// The stream messages of one request: its inference (a decoupled model's, split
/// into its responses, `decoupled` saying how many and whether an empty final one
/// follows), or the one error `ModelInfer` would have answered.
fn answers(
    id: String,
    model: String,
    result: Result<Response<ModelInferResponse>, Status>,
    decoupled: Option<(usize, bool)>,
) -> Vec<ModelStreamInferResponse> {
    match (result, decoupled) {
        (Ok(response), Some((responses, empty_final))) => {
            decoupled::split(response.into_inner(), responses, empty_final)
                .into_iter()
                .map(|r| ModelStreamInferResponse {
                    error_message: String::new(),
                    infer_response: Some(r),
                })
                .collect()
        }
        (result, _) => vec![answer(id, model, result)],
    }
}

/// One stream message: the inference, or the error `ModelInfer` would have answered,
/// named with the request's `id` and model.
fn answer(
    id: String,
    model: String,
    result: Result<Response<ModelInferResponse>, Status>,
) -> ModelStreamInferResponse {
    match result {
        Ok(response) => ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(response.into_inner()),
        },
        Err(status) => ModelStreamInferResponse {
            error_message: status.message().to_string(),
            infer_response: Some(ModelInferResponse {
                model_name: model,
                id,
                ..Default::default()
            }),
        },
    }
}
