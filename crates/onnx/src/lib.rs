//! ONNX models as netaccel accelerators.
//!
//! A *model repository* is a folder of models laid out as Triton's (`NAME/VERSION/
//! model.onnx` beside a `config.toml` declaring its tensors, max batch and engine).
//! This crate reads it ([`repository`]), checks each model against its config, and
//! has its engine optimise and plan it once ([`Model`]); a slot then runs calls
//! through a [`Session`]. Two engines sit behind that one interface: tract (a
//! maintained pure-Rust engine, built in, the default) and ONNX Runtime
//! ([`onnxruntime`], loaded from a library the user points the node at), much faster
//! on small convolutional models; a model's `backend` chooses. A third engine,
//! [`image`], runs no ONNX file: it decodes and scales images, the first step of an
//! image classifier's ensemble.
//!
//! It knows nothing about sockets, slots or queues: the node lists each model in its
//! catalog and its CPU device hosts them. It is a crate of its own so that tract,
//! which takes longer to build than the rest of the node, builds once and apart, and
//! so that what depends on it is explicit.
//!
//! A model's payload over every transport is its inputs' little-endian elements,
//! tensor after tensor (see `accel::tensors`); its result, its outputs the same way.

pub mod batching;
pub mod config;
mod element;
pub mod ensemble;
pub mod image;
pub mod model;
pub mod onnxruntime;
pub mod repository;
pub mod sequencing;

pub use config::{Backend, ModelConfig, Override};
pub use model::{Engines, Model, Session};
pub use repository::{scan, Found, Scan};

impl Found {
    /// Plans the model found, as accelerator `id`, on the engine its config names.
    pub fn into_model(self, id: u16, engines: &Engines) -> Result<Model, String> {
        let model = Model::new(
            &self.name,
            self.version,
            id,
            &self.onnx,
            &self.config_text,
            self.config,
            engines,
        )?;
        Ok(model.with_labels(self.labels))
    }
}
