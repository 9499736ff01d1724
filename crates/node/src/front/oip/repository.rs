//! The model repository extension: which models the node has and whether each is
//! ready (`index`), and placing a model in slots (`load`) or taking it out of them
//! (`unload`), for HTTP `/v2/repository/...` and gRPC `RepositoryIndex`,
//! `RepositoryModelLoad`, `RepositoryModelUnload` alike.
//!
//! The node's models are its catalog: the built-ins, its manifests' accelerators and
//! the ONNX models of its `--models` repository, read once at start. Loading a model
//! does not read files: it puts the model into slots, and unloading takes it out of
//! them, each by the node's one reconfiguration path ([`admin::reconfigure`]: the slot
//! stops admitting, the calls queued before run to completion on the model, then it
//! swaps). So nothing in flight is lost, and a node with a registry asks it first, as
//! for `PUT /v1/slots/{id}`.
//!
//! Which slots: a load takes *spare* slots — open slots whose device can host the model
//! and whose accelerator another slot hosts too, so no other model stops being ready —
//! the least busy first; without enough of them it is refused and says so. An unload
//! gives the model's slots to the first built-in (by id) their device hosts (`echo` on
//! the CPU), which makes them spares. Only models of the repository (ONNX models) are
//! unloaded; built-ins and manifests' accelerators stay, as a Triton server's
//! repository has no way to remove them either.
//!
//! A load's `config` override (Triton's `parameters.config`, a model configuration as
//! JSON) may set `instance_group[].count`, the number of slots the model is to have,
//! and `max_batch_size`: the model is then built again from its files (read at start)
//! with that value in its `config.toml`, every check of a model's load made again; it
//! replaces the old one in the catalog, and each slot hosting it drains its calls on
//! the old one and takes the new one. Every other field it names must equal the
//! model's configuration (`GET /v2/models/{m}/config`). An override that cannot be
//! honoured is refused naming the field before anything changes.
//! Not for: reading new model files at runtime (a restart with `--models` does).

use std::collections::HashMap;
use std::sync::Arc;

use accel::Accelerator;
use rac_proto::Status;
use serde::Serialize;
use serde_json::Value;

use netaccel_onnx::Override;

use super::{model_config, VERSION};
use crate::config::RepositoryIndex;
use crate::front::admin::{self, AdminError, Origin, Reconfigured};
use crate::node::Node;

/// Triton's states of a model in the index.
pub const READY: &str = "READY";
pub const UNAVAILABLE: &str = "UNAVAILABLE";
pub const LOADING: &str = "LOADING";

/// The most slots one load may give a model (`instance_group[].count`).
pub const INSTANCES_MAX: usize = 64;

/// One entry of the index: `{"name", "version", "state", "reason"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IndexEntry {
    pub name: String,
    pub version: String,
    pub state: &'static str,
    pub reason: String,
}

fn error(status: Status, message: String) -> AdminError {
    AdminError {
        status,
        message,
        conflict: false,
    }
}

/// Every model of the node, by name (the models of its repository only with
/// `repository_index = "models"`); with `ready_only`, the ready ones.
pub fn index(node: &Node, ready_only: bool) -> Vec<IndexEntry> {
    let models_only = node.config.repository_index == RepositoryIndex::Models;
    let of_repository =
        |id: u16| node.devices.model(id).is_some() || node.dispatcher.ensemble(id).is_some();
    let mut entries: Vec<IndexEntry> = node
        .dispatcher
        .catalog()
        .iter()
        .filter(|a| !models_only || of_repository(a.descriptor().id))
        .map(|a| entry(node, &**a))
        .filter(|e| !ready_only || e.state == READY)
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

fn entry(node: &Node, accel: &dyn Accelerator) -> IndexEntry {
    let d = accel.descriptor();
    if super::ensemble::of(node, accel).is_some() {
        let (state, reason) = match node.dispatcher.serves(d.id) {
            true => (READY, String::new()),
            false => (
                UNAVAILABLE,
                "a step of the ensemble is not hosted".to_string(),
            ),
        };
        let (name, version) = (d.name.clone(), VERSION.to_string());
        return IndexEntry {
            name,
            version,
            state,
            reason,
        };
    }
    let (mut open, mut arriving) = (0, 0);
    for slot in node.dispatcher.slots() {
        let h = slot.hosting();
        if h.open && h.accel_id == d.id {
            open += 1;
        } else if h.swapping.is_some_and(|(_, to)| to == d.id) {
            arriving += 1;
        }
    }
    let (state, reason) = match (open, arriving) {
        (0, 0) => (UNAVAILABLE, "unloaded: no slot hosts it".to_string()),
        (0, _) => (LOADING, "a slot is loading it".to_string()),
        _ => (READY, String::new()),
    };
    IndexEntry {
        name: d.name.clone(),
        version: VERSION.to_string(),
        state,
        reason,
    }
}

/// The model `name`, or the protocol's not-found refusal.
fn model(node: &Node, name: &str) -> Result<Arc<dyn Accelerator>, AdminError> {
    node.dispatcher
        .catalog()
        .by_name(name)
        .cloned()
        .ok_or_else(|| {
            error(
                Status::UnknownAccelerator,
                crate::front::oip::unknown_model(name),
            )
        })
}

/// What a load's `config` override asks: the slots the model is to have, and the
/// configuration it is to be rebuilt with. `Default`: as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub instances: Option<usize>,
    pub config: Override,
}

/// What the `config` override asks (see [`Wanted`]), after checking that every other
/// field it names is the model's as it is. `max_batch_size` is a number, or a string
/// of one, as protobuf's JSON writes it; without it, the model's file says.
pub fn wanted(accel: &dyn Accelerator, config: Option<&str>) -> Result<Wanted, String> {
    let Some(text) = config else {
        return Ok(Wanted::default());
    };
    let given: Value = serde_json::from_str(text)
        .map_err(|e| format!("parameters.config is not a JSON model configuration: {e}"))?;
    let Value::Object(given) = given else {
        return Err("parameters.config must be a JSON object (a model configuration)".into());
    };
    let current: Value =
        serde_json::from_slice(&model_config(accel)).expect("the node's own JSON parses");
    let mut wanted = Wanted::default();
    for (key, value) in &given {
        match key.as_str() {
            "instance_group" => wanted.instances = Some(instance_count(value)?),
            "max_batch_size" => {
                let n = whole(value)
                    .ok_or("parameters.config: max_batch_size must be a whole number")?;
                wanted.config.max_batch_size = Some(n);
            }
            _ if current.get(key) == Some(value) => {}
            _ => {
                return Err(format!(
                    "parameters.config cannot change {key} of {}: only max_batch_size and \
                     instance_group[].count can be set at load (the model's tensors and \
                     engine are its files')",
                    accel.descriptor().name
                ))
            }
        }
    }
    Ok(wanted)
}

/// A JSON number, or a string of one (protobuf's JSON writes 64-bit integers so).
fn whole(value: &Value) -> Option<u32> {
    match value {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The slots an `instance_group` list asks for: the sum of its counts (1 when a group
/// gives none), between 1 and [`INSTANCES_MAX`]; only CPU groups.
fn instance_count(groups: &Value) -> Result<usize, String> {
    let groups = groups
        .as_array()
        .ok_or("instance_group must be a list of groups")?;
    let mut total = 0u64;
    for g in groups {
        if let Some(kind) = g.get("kind").and_then(Value::as_str) {
            if !matches!(kind, "KIND_CPU" | "KIND_AUTO") {
                return Err(format!(
                    "instance_group kind {kind} is not served: models run on CPU slots"
                ));
            }
        }
        let n = match g.get("count") {
            None => 1,
            Some(c) => c
                .as_u64()
                .ok_or("instance_group count must be a whole number")?,
        };
        total = total.saturating_add(n);
    }
    if total == 0 || total > INSTANCES_MAX as u64 {
        return Err(format!(
            "instance_group asks for {total} instances; a model can have 1 to {INSTANCES_MAX} slots"
        ));
    }
    Ok(usize::try_from(total).expect("bounded above"))
}

/// Places model `name` in slots: as many as `config`'s `instance_group` asks (taking
/// extra ones out when it asks for fewer than it has), or one when it is in none.
/// Returns the reconfigurations done (none when it was loaded already). Errors start
/// with Triton's words, `failed to load '{name}'`, which its clients match.
pub async fn load(
    node: Arc<Node>,
    name: &str,
    config: Option<&str>,
) -> Result<Vec<Reconfigured>, AdminError> {
    place(node, name, config).await.map_err(|mut e| {
        e.message = format!("failed to load '{name}': {}", e.message);
        e
    })
}

async fn place(
    node: Arc<Node>,
    name: &str,
    config: Option<&str>,
) -> Result<Vec<Reconfigured>, AdminError> {
    let accel = model(&node, name)?;
    not_ensemble(&node, &*accel)?;
    let asked = wanted(&*accel, config).map_err(|message| error(Status::BadRequest, message))?;
    let mut done = Vec::new();
    let accel = match rebuilt_with(&node, &*accel, asked.config)? {
        None => accel,
        Some(o) => rebuild(&node, &accel, o, &mut done).await?,
    };
    let hosting = node.dispatcher.slots_hosting(accel.descriptor().id);
    let wanted = asked.instances.unwrap_or_else(|| hosting.len().max(1));
    debug_assert!((1..=INSTANCES_MAX).contains(&wanted));
    if hosting.len() > wanted {
        for &slot in &hosting[wanted..] {
            done.push(free(&node, slot).await?);
        }
        return Ok(done);
    }
    let spares = spares(&node, &accel, wanted - hosting.len());
    if spares.len() < wanted - hosting.len() {
        return Err(error(
            Status::Unavailable,
            format!(
                "no spare slot for {name}: it needs {} more, and every other slot that could \
                 host it holds the only instance of another model; unload a model or \
                 configure more slots",
                wanted - hosting.len()
            ),
        ));
    }
    for slot in spares {
        let reconfigured =
            admin::reconfigure(Arc::clone(&node), slot, name.to_string(), Origin::default())
                .await?;
        done.push(reconfigured);
    }
    Ok(done)
}

/// The override model `accel` is to be rebuilt with for a load asking `o` (the
/// configuration it gives replaces the model's for that load: a load without
/// `max_batch_size` builds the model as its files say); `None` when it is built so
/// already. A built-in or a manifest's accelerator cannot change its batch.
fn rebuilt_with(
    node: &Node,
    accel: &dyn Accelerator,
    o: Override,
) -> Result<Option<Override>, AdminError> {
    let d = accel.descriptor();
    let Some(model) = node.devices.model(d.id) else {
        let batch = accel.tensors().map_or(0, |t| t.max_batch_size);
        if o.max_batch_size.is_some_and(|n| n != batch) {
            return Err(error(
                Status::BadRequest,
                format!(
                    "parameters.config: max_batch_size: {} is an accelerator of the node, not \
                     a model of its repository: its tensors are fixed",
                    d.name
                ),
            ));
        }
        return Ok(None);
    };
    let o = model
        .normalized(o)
        .map_err(|e| error(Status::Internal, format!("its config.toml: {e}")))?;
    Ok((o != model.built_with()).then_some(o))
}

/// One rebuild at a time, so that two overrides of one model do not race to replace it.
static REBUILDS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Builds model `accel` again from its files with override `o` (none: as they say),
/// puts it in the catalog in the old one's place, and has each slot hosting it drain
/// its calls on the old one and take the new one (the unload rule: nothing in flight
/// is lost). An override the model cannot take is refused before anything changes,
/// naming the field; so is a batch below that of an ensemble the model is a step of.
/// A slot whose reconfiguration then fails (the registry refuses it, another one is
/// under way) keeps the old model, and the load's error says which: a later load
/// places the new one.
async fn rebuild(
    node: &Arc<Node>,
    accel: &Arc<dyn Accelerator>,
    o: Override,
    done: &mut Vec<Reconfigured>,
) -> Result<Arc<dyn Accelerator>, AdminError> {
    let d = accel.descriptor();
    let _one = REBUILDS.lock().await;
    let model = node
        .devices
        .model(d.id)
        .expect("rebuilt_with found the model");
    // An ensemble's batch goes through each step: a step takes at least its batch.
    let batch = o.max_batch_size.unwrap_or(u32::MAX);
    let catalog = node.dispatcher.catalog();
    let user = catalog.iter().find(|e| {
        let larger = e.tensors().is_some_and(|t| t.max_batch_size > batch);
        larger
            && node
                .dispatcher
                .ensemble(e.descriptor().id)
                .is_some_and(|e| e.step_ids().any(|s| s == d.id))
    });
    if let Some(e) = user {
        return Err(error(
            Status::BadRequest,
            format!(
                "parameters.config: max_batch_size: {} is a step of ensemble {}, whose batch \
                 of up to {} goes through it",
                d.name,
                e.descriptor().name,
                e.tensors().map_or(0, |t| t.max_batch_size)
            ),
        ));
    }
    drop(catalog);
    let built = tokio::task::spawn_blocking(move || model.overridden(o))
        .await
        .map_err(|e| {
            error(
                Status::Internal,
                format!("rebuilding the model failed: {e}"),
            )
        })?
        .map_err(|e| error(Status::BadRequest, format!("parameters.config: {e}")))?;
    let built = Arc::new(built);
    node.devices.replace_model(Arc::clone(&built));
    let entry: Arc<dyn Accelerator> = built;
    node.dispatcher.replace_entry(&entry);
    tracing::info!(model = %d.name, ?o, "model rebuilt with a configuration override");
    for slot in node.dispatcher.slots_hosting(d.id) {
        let name = d.name.clone();
        done.push(admin::reconfigure(Arc::clone(node), slot, name, Origin::default()).await?);
    }
    Ok(entry)
}

/// Refuses a load that sends model files (`file:…` parameters, Triton's way of
/// loading a model from the request): the node loads the models of its repository
/// only. Triton's words and status for a load whose files it cannot use.
pub fn refuse_files<'k>(mut keys: impl Iterator<Item = &'k str>) -> Result<(), AdminError> {
    match keys.find(|k| k.starts_with("file:")) {
        None => Ok(()),
        Some(_) => Err(error(
            Status::Internal,
            "failed to poll from model repository: model files sent with a load request \
             (`file:` parameters) are not read: the node serves the models of its --models \
             repository"
                .to_string(),
        )),
    }
}

/// Up to `needed` spare slots for `accel` (see the module docs), least busy first.
fn spares(node: &Node, accel: &Arc<dyn Accelerator>, needed: usize) -> Vec<u16> {
    let slots = node.dispatcher.slots();
    let mut hosts: HashMap<u16, usize> = HashMap::new();
    for s in slots {
        *hosts.entry(s.hosting().accel_id).or_default() += 1;
    }
    let mut open: Vec<_> = slots
        .iter()
        .filter(|s| {
            let h = s.hosting();
            h.open && h.accel_id != accel.descriptor().id && can_host(node, s.id, accel)
        })
        .collect();
    open.sort_by_key(|s| s.depth());
    let mut picked = Vec::with_capacity(needed);
    for s in open {
        if picked.len() == needed {
            break;
        }
        let count = hosts.get_mut(&s.hosting().accel_id).expect("counted above");
        if *count >= 2 {
            *count -= 1;
            picked.push(s.id);
        }
    }
    picked
}

/// Refuses to load or unload an ensemble: no slot hosts it, its steps' slots serve it.
fn not_ensemble(node: &Node, accel: &dyn Accelerator) -> Result<(), AdminError> {
    let Some(e) = super::ensemble::of(node, accel) else {
        return Ok(());
    };
    let steps: Vec<&str> = e.step_names().collect();
    Err(error(
        Status::BadRequest,
        format!(
            "{} is an ensemble: it runs on the slots of its steps ({}); load or unload those",
            accel.descriptor().name,
            steps.join(", ")
        ),
    ))
}

fn can_host(node: &Node, slot: u16, accel: &Arc<dyn Accelerator>) -> bool {
    node.devices.of_slot(slot).is_some_and(|d| {
        node.devices
            .with_hostable(accel, |h| d.backend.hosts(h))
            .is_ok()
    })
}

/// Takes model `name` out of every slot, each slot draining its queued calls on it
/// first. Built-ins and manifests' accelerators are refused `BAD_REQUEST`.
pub async fn unload(node: Arc<Node>, name: &str) -> Result<Vec<Reconfigured>, AdminError> {
    let accel = model(&node, name)?;
    not_ensemble(&node, &*accel)?;
    if accel.tensors().is_none() {
        return Err(error(
            Status::BadRequest,
            format!(
                "{name} is an accelerator of the node, not a model of its repository: it is \
                 not unloaded (a slot can be given another with PUT /v1/slots/{{id}})"
            ),
        ));
    }
    let mut done = Vec::new();
    for slot in node.dispatcher.slots_hosting(accel.descriptor().id) {
        done.push(free(&node, slot).await?);
    }
    Ok(done)
}

/// Gives `slot` to the first built-in its device hosts (built-ins have the ids below
/// those of user accelerators, `manifest::ID_MIN`).
async fn free(node: &Arc<Node>, slot: u16) -> Result<Reconfigured, AdminError> {
    let placeholder = node
        .dispatcher
        .catalog()
        .iter()
        .filter(|a| a.descriptor().id < manifest::ID_MIN && can_host(node, slot, a))
        .min_by_key(|a| a.descriptor().id)
        .map(|a| a.descriptor().name.clone())
        .ok_or_else(|| {
            error(
                Status::BadRequest,
                format!("slot {slot}'s device hosts no built-in to hold the slot instead"),
            )
        })?;
    admin::reconfigure(Arc::clone(node), slot, placeholder, Origin::default()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::oip::declared::example::Example;

    #[test]
    fn a_config_override_sets_the_instance_count_and_the_batch_and_nothing_else() {
        let m = Example::default();
        let instances = |c: Option<&str>| wanted(&m, c).map(|w| w.instances);
        assert_eq!(wanted(&m, None), Ok(Wanted::default()));
        let two = r#"{"instance_group":[{"kind":"KIND_CPU","count":2}]}"#;
        assert_eq!(instances(Some(two)), Ok(Some(2)));
        let same = r#"{"max_batch_size":4,"instance_group":[{"count":1},{}]}"#;
        assert_eq!(
            wanted(&m, Some(same)).unwrap().config.max_batch_size,
            Some(4)
        );
        let none = r#"{"instance_group":[{"count":1}]}"#;
        assert_eq!(wanted(&m, Some(none)).unwrap().config, Override::default());
        assert_eq!(instances(Some(same)), Ok(Some(2)));
        for other in [r#"{"max_batch_size":8}"#, r#"{"max_batch_size":"8"}"#] {
            // Given, even as the model has it: the load's configuration says.
            let w = wanted(&m, Some(other)).unwrap();
            assert_eq!(w.config.max_batch_size, Some(8), "{other}");
        }
        for bad in [r#"{"max_batch_size":-1}"#, r#"{"max_batch_size":"lots"}"#] {
            let e = wanted(&m, Some(bad)).unwrap_err();
            assert!(e.contains("max_batch_size must be a whole number"), "{e}");
        }
        let e = wanted(&m, Some(r#"{"platform":"pytorch"}"#)).unwrap_err();
        assert!(e.contains("cannot change platform"), "{e}");
        assert!(refuse_files(["config", "file:1/model.onnx"].into_iter())
            .unwrap_err()
            .message
            .starts_with("failed to poll from model repository"));
        assert!(refuse_files(["config"].into_iter()).is_ok());
        for bad in [
            "not json",
            "[1]",
            r#"{"instance_group":[{"count":0}]}"#,
            r#"{"instance_group":[{"count":65}]}"#,
            r#"{"instance_group":[{"kind":"KIND_GPU","count":1}]}"#,
            r#"{"instance_group":{"count":1}}"#,
        ] {
            assert!(instances(Some(bad)).is_err(), "{bad}");
        }
    }
}
