//! The node's catalog: the built-in accelerators, the fault injector when configured,
//! and the user accelerators of `accelerators_dir`, each listed once with the backend
//! kinds that can host it.
//!
//! A manifest is refused — logged with its file, field and reason, and left out while
//! the node starts with the rest — when the `manifest` crate finds it invalid, when its
//! name or fixed id is taken by a built-in, or when a device that could host it fails
//! to prepare it (an OpenCL program that does not build).

use std::collections::HashMap;
use std::sync::Arc;

use accel::{Accelerator, Catalog};
use manifest::{Manifest, ManifestAccelerator};

use super::{kind_hosts, Backend, Hostable, KINDS};
use crate::config::{Config, DeviceConfig};

/// The catalog, and the manifest of each user accelerator by id.
pub fn assemble(
    config: &Config,
    devices: &[DeviceConfig],
    backends: &[Arc<dyn Backend>],
) -> Result<(Catalog, HashMap<u16, Arc<Manifest>>), String> {
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
    let mut catalog = Catalog::new(entries);
    let ids: Vec<u16> = catalog.iter().map(|a| a.descriptor().id).collect();
    for id in ids {
        let accel = Arc::clone(catalog.by_id(id).expect("listed"));
        let hostable = Hostable {
            accel: &accel,
            manifest: manifests.get(&id),
        };
        let kinds = KINDS
            .into_iter()
            .filter(|k| kind_hosts(*k, hostable))
            .map(|k| k.as_str())
            .collect();
        catalog.set_backends(id, kinds);
    }
    Ok((catalog, manifests))
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
