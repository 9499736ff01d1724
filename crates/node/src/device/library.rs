//! The node's catalog: the built-in accelerators, the fault injector when configured,
//! the user accelerators of `accelerators_dir` and the ONNX models of `models_dir`,
//! each listed once with the backend kinds that can host it.
//!
//! A manifest is refused — logged with its file, field and reason, and left out while
//! the node starts with the rest — when the `manifest` crate finds it invalid, when its
//! name or fixed id is taken by a built-in, or when a device that could host it fails
//! to prepare it (an OpenCL program that does not build). A model is refused the same
//! way when the `netaccel-onnx` crate cannot read or plan it, or when its name is
//! taken; a model's id is its config's or derived from its name, and one that another
//! model or accelerator has stops the node at start, naming both.

use std::collections::HashMap;
use std::sync::Arc;

use accel::{Accelerator, Catalog};
use manifest::{Manifest, ManifestAccelerator};
use netaccel_onnx::Model;

use super::{kind_hosts, Backend, Hostable, StartError, KINDS};
use super::{DeviceConfig, DevicesSection};

/// What [`assemble`] gives: the catalog, the manifest of each user accelerator and
/// the model of each ONNX model, by id.
pub struct Assembled {
    pub catalog: Catalog,
    pub manifests: HashMap<u16, Arc<Manifest>>,
    pub models: HashMap<u16, Arc<Model>>,
    /// The repository's ensembles with their ids, not yet in the catalog: the core
    /// resolves them against it (`crate::core::ensemble`).
    pub ensembles: Vec<(netaccel_onnx::Found, u16)>,
}

/// The catalog, and the manifest of each user accelerator by id.
pub fn assemble(
    config: &DevicesSection,
    devices: &[DeviceConfig],
    backends: &[Arc<dyn Backend>],
) -> Result<Assembled, StartError> {
    let mut entries = accel::builtins();
    if config.fault_injection {
        entries.push(accel::fault_injection());
    }
    let mut manifests = HashMap::new();
    if let Some(dir) = &config.accelerators_dir {
        let loaded = manifest::load_dir(dir)?;
        for e in &loaded.errors {
            refuse(&e.to_string());
        }
        let mut valid = Vec::new();
        for m in loaded.manifests {
            let taken = entries
                .iter()
                .map(|a| a.descriptor())
                .find(|d| d.name == m.name || Some(d.id) == m.id);
            match taken {
                Some(d) if d.name == m.name => refuse(&format!(
                    "{}: name: `{}` is a built-in accelerator's name",
                    m.file.display(),
                    m.name
                )),
                Some(d) => refuse(&format!(
                    "{}: id: {} is the id of {}",
                    m.file.display(),
                    d.id,
                    d.name
                )),
                None => valid.push(m),
            }
        }
        // Fixed ids first, then the others from the lowest free id, in folder order
        // (which is stable across restarts while the directory does not change).
        let mut used: Vec<u16> = entries
            .iter()
            .map(|a| a.descriptor().id)
            .chain(valid.iter().filter_map(|m| m.id))
            .collect();
        let mut next = manifest::ID_MIN;
        for m in valid {
            let id = match m.id {
                Some(id) => id,
                None => {
                    while used.contains(&next) {
                        next += 1;
                    }
                    if next > manifest::ID_MAX {
                        refuse(&format!(
                            "{}: id: no free accelerator id left",
                            m.file.display()
                        ));
                        continue;
                    }
                    used.push(next);
                    next
                }
            };
            let m = Arc::new(m);
            let entry: Arc<dyn Accelerator> =
                Arc::new(ManifestAccelerator::new(Arc::clone(&m), id));
            match prepare(&entry, &m, devices, backends) {
                Ok(()) => {
                    tracing::info!(
                        accelerator = %m.name,
                        id,
                        hash = %m.hash,
                        file = %m.file.display(),
                        "user accelerator loaded"
                    );
                    entries.push(entry);
                    manifests.insert(id, m);
                }
                Err(e) => refuse(&e),
            }
        }
    }
    let mut models = HashMap::new();
    let mut ensembles = Vec::new();
    if let Some(dir) = &config.models_dir {
        let engines = netaccel_onnx::Engines {
            onnxruntime_library: config.onnxruntime_library.clone(),
        };
        ensembles = add_models(dir, &engines, &mut entries, &mut models)?;
    }
    let mut catalog = Catalog::new(entries);
    let ids: Vec<u16> = catalog.iter().map(|a| a.descriptor().id).collect();
    for id in ids {
        let accel = Arc::clone(catalog.by_id(id).expect("listed"));
        let hostable = Hostable {
            accel: &accel,
            manifest: manifests.get(&id),
            model: models.get(&id),
        };
        let kinds = KINDS
            .into_iter()
            .filter(|k| kind_hosts(*k, hostable))
            .map(|k| k.as_str())
            .collect();
        catalog.set_backends(id, kinds);
    }
    Ok(Assembled {
        catalog,
        manifests,
        models,
        ensembles,
    })
}

/// Reads the model repository `dir` and adds each model it can plan to `entries`,
/// with the id its config fixes or, without one, [`model_id_from_name`]'s: a model's
/// id never depends on which other models are in the repository or refused. A model
/// that cannot be served is logged and left out; an unreadable `dir` is an error, and
/// so is an id two models (or a model and a user accelerator) would share, naming both.
/// Returns the ensembles found, with their ids, for the core to resolve.
fn add_models(
    dir: &std::path::Path,
    engines: &netaccel_onnx::Engines,
    entries: &mut Vec<Arc<dyn Accelerator>>,
    models: &mut HashMap<u16, Arc<Model>>,
) -> Result<Vec<(netaccel_onnx::Found, u16)>, StartError> {
    let scan = netaccel_onnx::scan(dir)?;
    for e in &scan.errors {
        refuse_model(e);
    }
    let mut planned: Vec<(netaccel_onnx::Found, u16)> = Vec::with_capacity(scan.found.len());
    for found in scan.found {
        let folder = found.folder.display().to_string();
        if let Some(d) = entries
            .iter()
            .map(|a| a.descriptor())
            .find(|d| d.name == found.name)
        {
            refuse_model(&format!(
                "{folder}: name: taken by accelerator {} (id {})",
                d.name, d.id
            ));
            continue;
        }
        let id = match found.config.id {
            Some(id) if !(manifest::ID_MIN..=manifest::ID_MAX).contains(&id) => {
                refuse_model(&format!(
                    "{folder}: id: {id} is outside {}..={}",
                    manifest::ID_MIN,
                    manifest::ID_MAX
                ));
                continue;
            }
            Some(id) => id,
            None => model_id_from_name(&found.name),
        };
        planned.push((found, id));
    }
    check_model_ids(&planned, entries)?;
    let mut ensembles = Vec::new();
    for (found, id) in planned {
        if found.config.ensemble.is_some() {
            ensembles.push((found, id));
            continue;
        }
        let folder = found.folder.display().to_string();
        let started = std::time::Instant::now();
        match found.into_model(id, engines) {
            Ok(model) => {
                let model = Arc::new(model);
                tracing::info!(
                    model = %model.descriptor().name,
                    version = model.version(),
                    id,
                    backend = model.backend().name(),
                    hash = %model.descriptor().hash,
                    planned_ms = started.elapsed().as_millis() as u64,
                    "ONNX model loaded"
                );
                entries.push(Arc::clone(&model) as Arc<dyn Accelerator>);
                models.insert(id, model);
            }
            Err(e) => refuse_model(&format!("{folder}: {e}")),
        }
    }
    Ok(ensembles)
}

/// The id of a model whose config fixes none: the 64-bit FNV-1a hash of its name's
/// bytes, modulo the 65,279 ids user accelerators may have, plus 256 (so in
/// `ID_MIN..=ID_MAX`). The same name gets the same id on every node and every start.
pub fn model_id_from_name(name: &str) -> u16 {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let span = u64::from(manifest::ID_MAX - manifest::ID_MIN) + 1;
    let id = manifest::ID_MIN + (hash % span) as u16;
    debug_assert!((manifest::ID_MIN..=manifest::ID_MAX).contains(&id));
    id
}

/// Refuses ids that two planned models, or a model and an accelerator already in the
/// catalog, would share: which one would be served must not depend on folder order.
fn check_model_ids(
    planned: &[(netaccel_onnx::Found, u16)],
    entries: &[Arc<dyn Accelerator>],
) -> Result<(), StartError> {
    let how = |f: &netaccel_onnx::Found| {
        if f.config.id.is_some() {
            "fixed by its config.toml"
        } else {
            "derived from its name"
        }
    };
    for (i, (found, id)) in planned.iter().enumerate() {
        let fix = "give one of them another `id = N` (256..=65534) in its config.toml";
        if let Some((other, _)) = planned[..i].iter().find(|(_, other)| other == id) {
            return Err(StartError::Config(format!(
                "models {} and {} both have accelerator id {id} ({}, {}): {fix}",
                other.name,
                found.name,
                how(other),
                how(found)
            )));
        }
        if let Some(d) = entries.iter().map(|a| a.descriptor()).find(|d| d.id == *id) {
            return Err(StartError::Config(format!(
                "model {} and accelerator {} both have id {id} (the model's {}): {fix}",
                found.name,
                d.name,
                how(found)
            )));
        }
    }
    Ok(())
}

fn refuse_model(message: &str) {
    tracing::error!("ONNX model refused: {message}");
}

/// Has every device that can host `m` prepare it.
fn prepare(
    entry: &Arc<dyn Accelerator>,
    m: &Arc<Manifest>,
    devices: &[DeviceConfig],
    backends: &[Arc<dyn Backend>],
) -> Result<(), String> {
    let hostable = Hostable {
        accel: entry,
        manifest: Some(m),
        model: None,
    };
    for (d, backend) in devices.iter().zip(backends) {
        if backend.hosts(hostable).is_ok() {
            backend.prepare(hostable).map_err(|e| {
                format!(
                    "{}: {}: on device {}: {e}",
                    m.file.display(),
                    section(d),
                    d.name
                )
            })?;
        }
    }
    Ok(())
}

/// The manifest section a device of `d`'s kind runs.
fn section(d: &DeviceConfig) -> &'static str {
    d.backend.as_str()
}

fn refuse(message: &str) {
    tracing::error!("accelerator manifest refused: {message}");
}
