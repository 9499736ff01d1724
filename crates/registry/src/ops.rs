//! The operations behind the routes: nodes, functions, instances and reconfiguration
//! requests. Each is a transaction on the state (see `registry`), followed by the
//! allocations it calls for.

use std::time::Instant;

use serde_json::Value;
use tracing::info;

use crate::alloc::Reconfigure;
use crate::error::ApiError;
use crate::model::{
    function_record, FunctionRecord, FunctionSpec, InstanceSpec, NodeRegistration,
    ReconfigurationRequest, SlotRef,
};
use crate::registry::{Alloc, Registry};

/// What `POST /v1/reconfigurations` answers.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    Allowed { migrated: Vec<String> },
    Refused { reason: String },
}

impl Verdict {
    /// The body that answers it.
    pub fn body(&self) -> registry_api::Verdict {
        match self {
            Verdict::Allowed { migrated } => registry_api::Verdict::allowed(migrated.clone()),
            Verdict::Refused { reason } => registry_api::Verdict::refused(reason.clone()),
        }
    }
}

/// Whether `POST …/instances` made a new instance or found the one named.
pub enum Created {
    New(Value),
    Existing(Value),
}

impl Registry {
    // ---- nodes ----

    /// `PUT /v1/nodes/{name}`: registers or renews; returns the lease in ms.
    pub async fn register_node(
        self: &std::sync::Arc<Self>,
        name: &str,
        reg: &NodeRegistration,
    ) -> Result<u64, ApiError> {
        let now = Instant::now();
        let (followups, arrived) = {
            let mut st = self.lock().await;
            if st.node(name).is_none() && st.node_count() >= self.config.nodes_max {
                return Err(ApiError::full(format!(
                    "the registry holds its maximum of {} nodes (--nodes-max)",
                    self.config.nodes_max
                )));
            }
            let upsert = st.upsert_node(name, reg, now, now + self.config.lease);
            if upsert.created {
                info!(node = name, "node registered");
            }
            if upsert.revived {
                info!(node = name, "node renewed its lease again: ready");
            }
            if !upsert.displaced.is_empty() {
                info!(node = name, instances = ?upsert.displaced,
                    "the node reports slots gone or holding another accelerator: migrating their instances");
            }
            let followups = self.plan_migration(&mut st, &upsert.displaced, &[]);
            self.commit(&mut st).await?;
            (followups, upsert.created || upsert.revived)
        };
        self.spawn_followups(followups, Vec::new());
        if arrived {
            let registry = self.clone();
            self.spawn_background(async move { registry.place_unbound().await });
        }
        Ok(self.config.lease.as_millis() as u64)
    }

    /// `DELETE /v1/nodes/{name}`: forgets the node and migrates its instances at once.
    pub async fn deregister_node(self: &std::sync::Arc<Self>, name: &str) -> Result<(), ApiError> {
        let followups = {
            let mut st = self.lock().await;
            if st.node(name).is_none() {
                return Err(ApiError::not_found(format!(
                    "node {name} is not registered"
                )));
            }
            let displaced = st.remove_node(name);
            info!(node = name, instances = ?displaced, "node deregistered: migrating its instances");
            let followups = self.plan_migration(&mut st, &displaced, &[]);
            self.commit(&mut st).await?;
            followups
        };
        self.run_followups(followups, Vec::new()).await;
        Ok(())
    }

    /// `GET /v1/nodes`.
    pub async fn nodes_json(&self) -> Value {
        let st = self.lock().await;
        Value::Array(st.nodes().map(|n| st.node_json(n)).collect())
    }

    // ---- functions ----

    /// `PUT /v1/functions/{name}`: records the function, then allocates or releases
    /// instances until there are `spec.instances`. Instances that find no slot stay
    /// unbound (`"slot":null`) and the rebalancer retries them; when what the
    /// function needs changes, its instances are placed again.
    pub async fn put_function(
        self: &std::sync::Arc<Self>,
        name: &str,
        spec: &FunctionSpec,
    ) -> Result<Value, ApiError> {
        let wanted = spec.instances as usize;
        let (to_place, committed) = {
            let mut st = self.lock().await;
            let existing = st.function(name);
            if existing.is_none() && st.function_count() >= self.config.functions_max {
                return Err(ApiError::full(format!(
                    "the registry holds its maximum of {} functions (--functions-max)",
                    self.config.functions_max
                )));
            }
            let have = existing.map_or(0, |f| f.instances.len());
            if wanted > have && st.instance_count() + (wanted - have) > self.config.instances_max {
                return Err(ApiError::full(format!(
                    "{} more instances would pass the registry's maximum of {} (--instances-max)",
                    wanted - have,
                    self.config.instances_max
                )));
            }
            let record = function_record(spec, name);
            let replace = existing.is_some_and(|f| f.record.placement_differs(&record));
            if existing.map(|f| &f.record) != Some(&record) {
                st.put_function(record);
            }
            let mut ids: Vec<String> = st
                .function(name)
                .expect("just put")
                .instances
                .iter()
                .cloned()
                .collect();
            if wanted < have {
                // Release the unbound instances first, then the newest.
                ids.sort_by_key(|id| {
                    (
                        st.instance(id).is_some_and(|i| i.binding.is_some()),
                        id.clone(),
                    )
                });
                for id in ids.drain(..have - wanted) {
                    st.delete_instance(&id);
                }
            }
            let mut to_place = if replace { ids } else { Vec::new() };
            for _ in have..wanted {
                let id = st.new_instance_id(name);
                st.create_instance(&id, name);
                to_place.push(id);
            }
            self.commit(&mut st).await?;
            (to_place, st.function_json(name))
        };
        for id in &to_place {
            if let Err(e) = self.allocate(id, Alloc::default()).await {
                info!(instance = %id, error = %e, "instance left unbound for now");
            }
        }
        match self.function_json(name).await {
            // Deleted since it was stored: the PUT took effect, and says so with the
            // function as it stored it, not with a 404 that reads as "not done" (found
            // by bench/jepsen: docs/jepsen.md, anomaly 4).
            Err(e) if e.status == 404 => Ok(committed),
            answer => answer,
        }
    }

    pub async fn function_json(&self, name: &str) -> Result<Value, ApiError> {
        let st = self.lock().await;
        match st.function(name) {
            Some(_) => Ok(st.function_json(name)),
            None => Err(ApiError::not_found(format!("there is no function {name}"))),
        }
    }

    pub async fn functions_json(&self) -> Value {
        let st = self.lock().await;
        Value::Array(
            st.functions()
                .map(|f| st.function_json(&f.record.name))
                .collect(),
        )
    }

    pub async fn delete_function(&self, name: &str) -> Result<(), ApiError> {
        let mut st = self.lock().await;
        if st.function(name).is_none() {
            return Err(ApiError::not_found(format!("there is no function {name}")));
        }
        st.delete_function(name);
        self.commit(&mut st).await
    }

    // ---- instances ----

    /// `POST /v1/functions/{name}/instances`: one more instance, allocated. An id the
    /// function already has answers that instance (a retried request is harmless).
    pub async fn create_instance(
        self: &std::sync::Arc<Self>,
        function: &str,
        spec: &InstanceSpec,
    ) -> Result<Created, ApiError> {
        let id = {
            let mut st = self.lock().await;
            let Some(f) = st.function(function) else {
                return Err(ApiError::not_found(format!(
                    "there is no function {function}"
                )));
            };
            let record = f.record.clone();
            if let Some(id) = &spec.id {
                if let Some(existing) = st.instance(id) {
                    if existing.function == function {
                        return Ok(Created::Existing(st.binding_json(id)));
                    }
                    return Err(ApiError::bad_request(format!(
                        "instance id {id} belongs to function {}",
                        existing.function
                    )));
                }
            }
            if st.instance_count() >= self.config.instances_max {
                return Err(ApiError::full(format!(
                    "the registry holds its maximum of {} instances (--instances-max)",
                    self.config.instances_max
                )));
            }
            // Nothing is created when nothing could take it.
            let req = st.request(&record, &[], Reconfigure::Any);
            if st.inventory.allocate(&req, &self.config.policy) == crate::alloc::Decision::NoDevice
            {
                return Err(ApiError::no_device(format!(
                    "no slot can take an instance of {function} ({}): none compatible has room or can be reconfigured",
                    record.accelerator
                )));
            }
            let id = match &spec.id {
                Some(id) => id.clone(),
                None => st.new_instance_id(function),
            };
            st.create_instance(&id, function);
            self.commit(&mut st).await?;
            id
        };
        let how = Alloc {
            preferred: spec.node.clone(),
            ..Alloc::default()
        };
        match self.allocate(&id, how).await {
            Ok(_) => {
                let st = self.lock().await;
                match st.instance(&id) {
                    Some(_) => Ok(Created::New(st.binding_json(&id))),
                    None => Err(ApiError::not_found(format!(
                        "instance {id} was deleted meanwhile"
                    ))),
                }
            }
            // The instance is gone (deleted meanwhile): nothing of this request's to
            // undo, and an instance under the same id now is another request's (found
            // by bench/jepsen: the cleanup below deleted it).
            Err(e) if e.status == 404 => Err(e),
            // The creation is stored, and others may have read the instance since; the
            // placement's commit failed, and its outcome is unknown (etcd may have
            // applied a transaction whose answer was lost). Deleting the instance now
            // would undo a write others saw, with no DELETE (found by bench/jepsen
            // when an etcd member was killed: docs/jepsen.md, anomaly 7). It stays;
            // unbound, the rebalancer places it.
            Err(e) if e.code != "NO_DEVICE" => Err(ApiError::unavailable(format!(
                "instance {id} was created, but its placement is of unknown outcome ({}); it stays, and the registry places it if it is unbound",
                e.message
            ))),
            Err(e) => {
                let mut st = self.lock().await;
                if st.instance(&id).is_some() {
                    st.delete_instance(&id);
                    self.commit(&mut st).await?;
                }
                Err(e)
            }
        }
    }

    /// Records instance `id` of `function` (registered when new) bound to `slot`,
    /// pinned there: someone else chose the slot (the kube-scheduler, for a DRA
    /// claim). Slots are shared, so the slot may hold other instances too. An instance
    /// already recorded under `id` is left as it is.
    pub async fn bind_pinned(
        &self,
        function: FunctionRecord,
        id: &str,
        slot: &SlotRef,
    ) -> Result<(), ApiError> {
        let mut st = self.lock().await;
        if st.instance(id).is_some() {
            return Ok(());
        }
        let Some(idx) = st.slot_idx(slot) else {
            return Err(ApiError::not_found(format!(
                "node {} has no slot {} on device {}",
                slot.node, slot.slot, slot.device
            )));
        };
        match st.function(&function.name) {
            Some(f) if f.record != function => {
                return Err(ApiError::bad_request(format!(
                    "function {} exists with other needs",
                    function.name
                )))
            }
            Some(_) => {}
            None if st.function_count() >= self.config.functions_max => {
                return Err(ApiError::full(format!(
                    "the registry holds its maximum of {} functions (--functions-max)",
                    self.config.functions_max
                )))
            }
            None => st.put_function(function.clone()),
        }
        if st.instance_count() >= self.config.instances_max {
            return Err(ApiError::full(format!(
                "the registry holds its maximum of {} instances (--instances-max)",
                self.config.instances_max
            )));
        }
        st.create_pinned_instance(id, &function.name, idx);
        info!(instance = id, function = %function.name, slot = ?slot, "pinned instance recorded");
        self.commit(&mut st).await
    }

    pub async fn delete_instance(&self, function: &str, id: &str) -> Result<(), ApiError> {
        let mut st = self.lock().await;
        if st.instance(id).is_none_or(|i| i.function != function) {
            return Err(ApiError::not_found(format!(
                "function {function} has no instance {id}"
            )));
        }
        st.delete_instance(id);
        self.commit(&mut st).await
    }

    /// `POST …/instances/{id}/unreachable`: a client of instance `id` could not reach
    /// the node of its binding `generation`. If that binding is still current the
    /// instance is moved to a slot on another node (the node itself stays: others may
    /// reach it); if it moved meanwhile, the current binding is the answer. A pinned
    /// instance is not moved (whoever pinned it decides), nor one no other node can
    /// take (`409 NO_DEVICE`, it stays where it is).
    pub async fn report_unreachable(
        self: &std::sync::Arc<Self>,
        function: &str,
        id: &str,
        generation: u64,
    ) -> Result<Value, ApiError> {
        let exclude = {
            let mut st = self.lock().await;
            let Some(instance) = st.instance(id).filter(|i| i.function == function) else {
                return Err(ApiError::not_found(format!(
                    "function {function} has no instance {id}"
                )));
            };
            let Some(bound) = &instance.binding else {
                return Ok(st.binding_json(id));
            };
            if instance.generation != generation {
                return Ok(st.binding_json(id));
            }
            if instance.pinned {
                return Err(ApiError::conflict(format!(
                    "instance {id} is pinned to node {} (a claim's); whoever pinned it moves it",
                    bound.node
                )));
            }
            let node = bound.node.clone();
            // Other placements avoid it for a lease: long enough for a dead node to be
            // declared lost, short enough for a node cut off from some clients only.
            st.set_suspect(&node, Instant::now() + self.config.lease);
            st.node(&node)
                .expect("a bound instance's node exists")
                .slots
                .clone()
        };
        self.metrics.unreachable_report();
        let how = crate::registry::Alloc {
            exclude,
            unbind_on_failure: false,
            ..crate::registry::Alloc::default()
        };
        self.allocate(id, how).await?;
        let st = self.lock().await;
        match st.instance(id) {
            Some(_) => Ok(st.binding_json(id)),
            None => Err(ApiError::not_found(format!(
                "instance {id} was deleted meanwhile"
            ))),
        }
    }

    // ---- reconfiguration validation ----

    /// `POST /v1/reconfigurations`: may this node load another accelerator into this
    /// slot? Allowed for an instance bound to the slot, for the admin, or when nothing
    /// is bound; the instances it displaces are migrated.
    pub async fn validate_reconfiguration(
        self: &std::sync::Arc<Self>,
        req: &ReconfigurationRequest,
        admin: bool,
    ) -> Result<Verdict, ApiError> {
        let (verdict, followups, chain) = {
            let mut st = self.lock().await;
            if st.node(&req.node).is_none() {
                return Err(ApiError::not_found(format!(
                    "node {} is not registered",
                    req.node
                )));
            }
            let slot = SlotRef {
                node: req.node.clone(),
                device: req.device.clone(),
                slot: req.slot,
            };
            let Some(idx) = st.slot_idx(&slot) else {
                return Err(ApiError::not_found(format!(
                    "node {} has no slot {} on device {}",
                    req.node, req.slot, req.device
                )));
            };
            if let Some(id) = &req.instance {
                if st.instance(id).is_none() {
                    return Err(ApiError::not_found(format!("there is no instance {id}")));
                }
            }
            let view = st.inventory.get(idx).expect("live slot");
            let holds = view.spec.accelerator.to_string();
            if let Some(catalog) = &view.spec.catalog {
                if !catalog.contains(&req.accelerator) {
                    return Ok(Verdict::Refused {
                        reason: format!(
                            "device {} of node {} cannot load {} (not among its accelerators)",
                            req.device, req.node, req.accelerator
                        ),
                    });
                }
            }
            if let Some((loading, _)) = &st.soft(idx).pending {
                return Ok(if *loading == req.accelerator {
                    // The registry's own reconfiguration: it migrates when it is done.
                    Verdict::Allowed {
                        migrated: Vec::new(),
                    }
                } else {
                    Verdict::Refused {
                        reason: format!("the registry is loading {loading} into this slot"),
                    }
                });
            }
            let bound = st.bound_to(idx);
            let requester_bound = req.instance.as_ref().is_some_and(|i| bound.contains(i));
            let pinned = st.pinned_on(idx);
            if !admin && !pinned.is_empty() && holds != req.accelerator {
                // The scheduler gave this slot to a claim: only the admin may take it
                // away (its Pods are then evicted).
                return Ok(Verdict::Refused {
                    reason: format!(
                        "the slot is allocated to a Kubernetes ResourceClaim ({}); only the admin may reconfigure it",
                        pinned.join(", ")
                    ),
                });
            }
            if !(admin || requester_bound || bound.is_empty()) {
                return Ok(Verdict::Refused {
                    reason: format!(
                        "{} instance(s) are bound to the slot ({}); only one of them or the admin may reconfigure it",
                        bound.len(),
                        bound.join(", ")
                    ),
                });
            }
            if holds == req.accelerator {
                return Ok(Verdict::Allowed {
                    migrated: Vec::new(),
                });
            }
            let grace = Instant::now() + self.config.lease;
            let displaced =
                st.set_slot_accelerator(idx, &req.accelerator, req.instance.as_deref(), grace);
            info!(node = %req.node, slot = req.slot, from = %holds, to = %req.accelerator,
                instances = ?displaced, "reconfiguration allowed: migrating the instances it displaces");
            let followups = self.plan_migration(&mut st, &displaced, &[idx]);
            self.commit(&mut st).await?;
            (
                Verdict::Allowed {
                    migrated: displaced,
                },
                followups,
                vec![idx],
            )
        };
        self.spawn_followups(followups, chain);
        Ok(verdict)
    }
}
