//! The registry's state: the records the store holds, the indexes allocation needs
//! (the [`Inventory`], instances per slot) and the soft state nodes report again with
//! every lease renewal.
//!
//! Every change goes through a method here that applies it to the indexes at once and
//! records a [`Change`] for the store; [`State::take_changes`] hands the transaction to
//! the registry, which commits it (see `store`). Methods never do I/O and never wait,
//! so a transaction is a plain sequence of calls under the registry's lock.
//!
//! Invariants (checked by [`State::check_invariants`] at the end of every transaction
//! in debug builds, and by the tests):
//! - an instance is bound to at most one slot, and every binding names a live slot;
//! - a slot's instance count in the inventory is the number of instances bound to it;
//! - slots of lost nodes are not ready in the inventory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use registry_api as api;
use serde_json::Value;

use crate::alloc::{Inventory, Reconfigure, Request, SlotIdx, SlotSpec};
use crate::model::{
    node_record, FunctionRecord, InstanceRecord, Meta, NodeRecord, NodeRegistration, NodeState,
    SlotId, SlotRecord, SlotRef,
};
use crate::store::{Change, Revision, Snapshot};

/// A node and where its slots are in the inventory.
pub struct Node {
    pub record: NodeRecord,
    /// Inventory index of each slot, in record order (devices, then their slots).
    pub slots: Vec<SlotIdx>,
    pub lease_deadline: Instant,
    pub lost_since: Option<Instant>,
    /// A client reported it unreachable: new placements go elsewhere while another
    /// slot can take them, until then (never stored).
    pub suspect_until: Option<Instant>,
}

/// What the registry knows about a slot beyond its record, rebuilt from lease
/// renewals and never stored.
#[derive(Clone, Debug, Default)]
pub struct SlotSoft {
    pub queue_depth: u32,
    /// A reconfiguration the registry has asked the node for: (accelerator, op id).
    pub pending: Option<(String, u64)>,
    /// After the registry changed the slot's accelerator, lease reports until this
    /// instant that still show another accelerator were sent before the change.
    pub grace_until: Option<Instant>,
    /// Since when no instance is bound (for releasing unused slots).
    pub unused_since: Option<Instant>,
    /// The rebalancer leaves the slot alone until then (it moved an instance off it).
    pub cooldown_until: Option<Instant>,
    /// The slot's utilisation came from Prometheus and holds until then: the node's
    /// lease reports do not overwrite it (see `prometheus`).
    pub prometheus_until: Option<Instant>,
}

pub struct Function {
    pub record: FunctionRecord,
    pub instances: BTreeSet<String>,
}

/// Result of a node registration or renewal.
#[derive(Debug, Default)]
pub struct Upsert {
    pub created: bool,
    /// The node was lost and holds a lease again.
    pub revived: bool,
    /// Instances whose slot vanished or now holds another accelerator; the caller
    /// migrates them.
    pub displaced: Vec<String>,
}

#[derive(Default)]
pub struct State {
    pub revision: Revision,
    nodes: BTreeMap<String, Node>,
    functions: BTreeMap<String, Function>,
    instances: BTreeMap<String, InstanceRecord>,
    meta: Meta,
    pub inventory: Inventory,
    bound: HashMap<SlotIdx, BTreeSet<String>>,
    soft: HashMap<SlotIdx, SlotSoft>,
    changes: Vec<Change>,
    touched: BTreeSet<String>,
}

fn slot_spec(record: &NodeRecord, device: usize, slot: usize) -> SlotSpec {
    let d = &record.devices[device];
    let s = &d.slots[slot];
    SlotSpec {
        node: Arc::from(record.name.as_str()),
        device: Arc::from(d.id.as_str()),
        slot: s.id,
        backend: Arc::from(d.backend.as_str()),
        vendor: Arc::from(d.vendor.as_str()),
        catalog: d.accelerators.as_ref().map(|c| Arc::from(c.clone())),
        accelerator: Arc::from(s.accelerator.as_str()),
        hash: Arc::from(s.hash.as_str()),
    }
}

impl State {
    /// Rebuilds the state from a store snapshot. Every ready node gets a fresh lease
    /// ending at `lease_deadline`; bindings that name a slot that does not exist are
    /// dropped (recorded as changes, so the caller commits the repair).
    pub fn from_snapshot(snap: Snapshot, now: Instant, lease_deadline: Instant) -> State {
        let mut st = State {
            revision: snap.revision,
            meta: snap.meta,
            ..State::default()
        };
        for record in snap.nodes {
            st.insert_node(record, lease_deadline, now);
        }
        for record in snap.functions {
            st.functions.insert(
                record.name.clone(),
                Function {
                    record,
                    instances: BTreeSet::new(),
                },
            );
        }
        for mut record in snap.instances {
            let Some(function) = st.functions.get_mut(&record.function) else {
                st.changes.push(Change::DeleteInstance(record.id));
                continue;
            };
            function.instances.insert(record.id.clone());
            let slot = record.binding.as_ref().and_then(|b| st.slot_idx(b));
            if record.binding.is_some() && slot.is_none() {
                record.binding = None;
                record.generation += 1;
                st.changes.push(Change::PutInstance(record.clone()));
            }
            let id = record.id.clone();
            st.instances.insert(id.clone(), record);
            if let Some(idx) = slot {
                st.attach(&id, idx);
            }
        }
        st
    }

    fn insert_node(&mut self, record: NodeRecord, lease_deadline: Instant, now: Instant) {
        let mut slots = Vec::new();
        for (d, device) in record.devices.iter().enumerate() {
            for s in 0..device.slots.len() {
                let idx = self.inventory.insert(slot_spec(&record, d, s));
                self.soft.insert(
                    idx,
                    SlotSoft {
                        unused_since: Some(now),
                        ..SlotSoft::default()
                    },
                );
                slots.push(idx);
            }
        }
        let lost = record.state == NodeState::Lost;
        if lost {
            for &idx in &slots {
                self.inventory.set_ready(idx, false);
            }
        }
        self.nodes.insert(
            record.name.clone(),
            Node {
                record,
                slots,
                lease_deadline,
                lost_since: lost.then_some(now),
                suspect_until: None,
            },
        );
    }

    /// Hands over the transaction: the changes to commit and the instances whose
    /// binding changed (or that were deleted), whose watchers to wake.
    ///
    /// Every transaction ends here (a commit, or a state rebuilt from a snapshot), so
    /// in debug builds the invariants are checked here, after every transaction.
    pub fn take_changes(&mut self) -> (Vec<Change>, BTreeSet<String>) {
        #[cfg(debug_assertions)]
        self.check_invariants();
        (
            std::mem::take(&mut self.changes),
            std::mem::take(&mut self.touched),
        )
    }

    // ---- lookups ----

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.get(name)
    }

    pub fn functions(&self) -> impl Iterator<Item = &Function> {
        self.functions.values()
    }

    pub fn instance(&self, id: &str) -> Option<&InstanceRecord> {
        self.instances.get(id)
    }

    pub fn instances(&self) -> impl Iterator<Item = &InstanceRecord> {
        self.instances.values()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    pub fn instance_count(&self) -> usize {
        self.instances.len()
    }

    pub fn slot_idx(&self, slot: &SlotRef) -> Option<SlotIdx> {
        let idx = self.inventory.find(&slot.node, slot.slot)?;
        (*self.inventory.get(idx)?.spec.device == *slot.device).then_some(idx)
    }

    pub fn slot_ref(&self, idx: SlotIdx) -> SlotRef {
        let spec = &self.inventory.get(idx).expect("live slot").spec;
        SlotRef {
            node: spec.node.to_string(),
            device: spec.device.to_string(),
            slot: spec.slot,
        }
    }

    /// The slot an instance is bound to.
    pub fn bound_slot(&self, id: &str) -> Option<SlotIdx> {
        self.instances
            .get(id)?
            .binding
            .as_ref()
            .and_then(|b| self.slot_idx(b))
    }

    /// Instances bound to a slot, in id order.
    pub fn bound_to(&self, idx: SlotIdx) -> Vec<String> {
        self.bound
            .get(&idx)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Sets the utilisation of each `(node, slot id, utilisation)` Prometheus named,
    /// holding until `valid_until`; how many slots it set.
    pub fn set_prometheus_utilization(
        &mut self,
        slots: &[(String, crate::model::SlotId, f64)],
        valid_until: Instant,
    ) -> usize {
        let mut applied = 0;
        for (node, slot, utilization) in slots {
            let Some(entry) = self.nodes.get(node) else {
                continue;
            };
            let matching: Vec<SlotIdx> = entry
                .slots
                .iter()
                .copied()
                .filter(|&idx| {
                    self.inventory
                        .get(idx)
                        .is_some_and(|v| v.spec.slot == *slot)
                })
                .collect();
            for idx in matching {
                self.inventory.set_utilization(idx, *utilization);
                self.soft_mut(idx).prometheus_until = Some(valid_until);
                applied += 1;
            }
        }
        applied
    }

    pub fn soft(&self, idx: SlotIdx) -> &SlotSoft {
        self.soft.get(&idx).expect("live slot")
    }

    pub fn soft_mut(&mut self, idx: SlotIdx) -> &mut SlotSoft {
        self.soft.get_mut(&idx).expect("live slot")
    }

    /// The allocation request for one instance of `function`.
    pub fn request<'a>(
        &'a self,
        function: &'a FunctionRecord,
        exclude: &'a [SlotIdx],
        reconfigure: Reconfigure,
    ) -> Request<'a> {
        Request {
            accelerator: &function.accelerator,
            hash: function.hash.as_deref(),
            backend: function.query.backend.as_deref(),
            vendor: function.query.vendor.as_deref(),
            node: function.query.node.as_deref(),
            exclude,
            reconfigure,
        }
    }

    // ---- nodes ----

    /// Registers a node or renews its lease with what it reports. Reports that
    /// contradict a reconfiguration the registry has in flight, or made less than a
    /// lease ago, keep the registry's view of that slot (they were sent before it).
    pub fn upsert_node(
        &mut self,
        name: &str,
        reg: &NodeRegistration,
        now: Instant,
        lease_deadline: Instant,
    ) -> Upsert {
        let mut upsert = Upsert::default();
        let mut record = node_record(reg, name);
        match self.nodes.get(name) {
            None => {
                upsert.created = true;
                self.changes.push(Change::PutNode(record.clone()));
                self.insert_node(record, lease_deadline, now);
            }
            Some(old) => {
                let mut believed: HashMap<SlotId, (SlotIdx, &str, &str)> = HashMap::new();
                let mut k = 0;
                for d in &old.record.devices {
                    for s in &d.slots {
                        believed.insert(s.id, (old.slots[k], &s.accelerator, &s.hash));
                        k += 1;
                    }
                }
                for d in &mut record.devices {
                    for s in &mut d.slots {
                        let Some(&(idx, accel, hash)) = believed.get(&s.id) else {
                            continue;
                        };
                        let soft = self.soft(idx);
                        let shielded =
                            soft.pending.is_some() || soft.grace_until.is_some_and(|t| now < t);
                        if shielded && s.accelerator != accel {
                            s.accelerator = accel.to_string();
                            s.hash = hash.to_string();
                        }
                    }
                }
                let revived = old.record.state == NodeState::Lost;
                upsert.revived = revived;
                upsert.displaced = self.replace_node(record, now);
            }
        }
        let node = self.nodes.get_mut(name).expect("just upserted");
        node.lease_deadline = lease_deadline;
        let slots = node.slots.clone();
        let mut k = 0;
        for d in &reg.devices {
            for s in &d.slots {
                let idx = slots[k];
                k += 1;
                let soft = self.soft_mut(idx);
                soft.queue_depth = s.queue_depth;
                if soft.prometheus_until.is_none_or(|t| t <= now) {
                    self.inventory.set_utilization(idx, s.busy_ratio);
                }
            }
        }
        upsert
    }

    /// Puts `record` (state ready) in place of the node's current record, keeping the
    /// inventory entries of slots that stay; the instances that lose their slot or its
    /// accelerator.
    fn replace_node(&mut self, record: NodeRecord, now: Instant) -> Vec<String> {
        let name = record.name.clone();
        let old = self.nodes.remove(&name).expect("node exists");
        let keep = kept_slots(&old, &record);
        let mut displaced = self.drop_slots_not_kept(&old, &keep);
        let slots = self.place_reported_slots(&record, &keep, now, &mut displaced);
        if record != old.record {
            self.changes.push(Change::PutNode(record.clone()));
        }
        let moved = (record.http, record.rac, record.opencl, record.extra)
            != (
                old.record.http,
                old.record.rac,
                old.record.opencl,
                old.record.extra,
            );
        if moved {
            // Same slots at new addresses: every binding to them reads differently now.
            for &idx in &slots {
                for id in self.bound_to(idx) {
                    if !displaced.contains(&id) {
                        self.bump_generation(&id);
                    }
                }
            }
        }
        self.nodes.insert(
            name,
            Node {
                record,
                slots,
                lease_deadline: old.lease_deadline,
                lost_since: None,
                suspect_until: old.suspect_until,
            },
        );
        displaced
    }

    /// Unbinds and removes the slots of `old` that `keep` does not keep; answers the
    /// instances displaced.
    fn drop_slots_not_kept(&mut self, old: &Node, keep: &HashMap<SlotId, SlotIdx>) -> Vec<String> {
        let kept: std::collections::HashSet<SlotIdx> = keep.values().copied().collect();
        let mut displaced = Vec::new();
        for &idx in &old.slots {
            if !kept.contains(&idx) {
                for id in self.bound_to(idx) {
                    self.set_binding(&id, None);
                    displaced.push(id);
                }
                self.inventory.remove(idx);
                self.soft.remove(&idx);
            }
        }
        displaced
    }

    /// The inventory index of each slot `record` reports, in record order: a kept
    /// slot's own (updated to what it now holds; its instances that no longer fit are
    /// added to `displaced`), a new slot's fresh.
    fn place_reported_slots(
        &mut self,
        record: &NodeRecord,
        keep: &HashMap<SlotId, SlotIdx>,
        now: Instant,
        displaced: &mut Vec<String>,
    ) -> Vec<SlotIdx> {
        let mut slots = Vec::new();
        for (d, device) in record.devices.iter().enumerate() {
            for (s, slot) in device.slots.iter().enumerate() {
                let idx = match keep.get(&slot.id) {
                    Some(&idx) => {
                        let was = self
                            .inventory
                            .get(idx)
                            .expect("kept")
                            .spec
                            .accelerator
                            .clone();
                        self.inventory
                            .set_accelerator(idx, &slot.accelerator, &slot.hash);
                        self.inventory.set_ready(idx, true);
                        if *was != *slot.accelerator {
                            for id in self.bound_to(idx) {
                                if self.function_of(&id).accelerator != slot.accelerator {
                                    displaced.push(id);
                                }
                            }
                        }
                        idx
                    }
                    None => {
                        let idx = self.inventory.insert(slot_spec(record, d, s));
                        self.soft.insert(
                            idx,
                            SlotSoft {
                                unused_since: Some(now),
                                ..SlotSoft::default()
                            },
                        );
                        idx
                    }
                };
                slots.push(idx);
            }
        }
        slots
    }

    /// Marks node `name` suspect until `until` (a client could not reach it).
    pub fn set_suspect(&mut self, name: &str, until: Instant) {
        if let Some(node) = self.nodes.get_mut(name) {
            node.suspect_until = Some(until);
        }
    }

    /// The slots of the nodes suspect at `now`.
    pub fn suspect_slots(&self, now: Instant) -> Vec<SlotIdx> {
        self.nodes
            .values()
            .filter(|n| n.suspect_until.is_some_and(|t| t > now))
            .flat_map(|n| n.slots.iter().copied())
            .collect()
    }

    /// Marks a node lost: its slots leave allocation. Returns the instances bound to
    /// them, which the caller migrates.
    pub fn set_lost(&mut self, name: &str, now: Instant) -> Vec<String> {
        let node = self.nodes.get_mut(name).expect("node exists");
        node.record.state = NodeState::Lost;
        node.lost_since = Some(now);
        self.changes.push(Change::PutNode(node.record.clone()));
        let slots = node.slots.clone();
        let mut bound = Vec::new();
        for idx in slots {
            self.inventory.set_ready(idx, false);
            bound.extend(self.bound_to(idx));
        }
        bound
    }

    /// Forgets a node; its instances are unbound and returned for migration.
    pub fn remove_node(&mut self, name: &str) -> Vec<String> {
        let node = self.nodes.remove(name).expect("node exists");
        let mut displaced = Vec::new();
        for idx in node.slots {
            for id in self.bound_to(idx) {
                self.set_binding(&id, None);
                displaced.push(id);
            }
            self.inventory.remove(idx);
            self.soft.remove(&idx);
        }
        self.changes.push(Change::DeleteNode(name.to_string()));
        displaced
    }

    /// Records that a slot now holds `accelerator` (the registry reconfigured it, or
    /// allowed its node to). Returns the instances it displaces: those bound to it
    /// for another accelerator, except `keep`.
    pub fn set_slot_accelerator(
        &mut self,
        idx: SlotIdx,
        accelerator: &str,
        keep: Option<&str>,
        grace_until: Instant,
    ) -> Vec<String> {
        let slot = self.slot_ref(idx);
        let node = self.nodes.get_mut(&slot.node).expect("slot's node");
        let record = node
            .record
            .devices
            .iter_mut()
            .find(|d| d.id == slot.device)
            .and_then(|d| d.slots.iter_mut().find(|s| s.id == slot.slot))
            .expect("slot in record");
        if record.accelerator != accelerator {
            record.accelerator = accelerator.to_string();
            // The node tells the new image's hash with its next renewal.
            record.hash.clear();
            self.inventory.set_accelerator(idx, accelerator, "");
            let node_record = node.record.clone();
            self.changes.push(Change::PutNode(node_record));
        }
        self.soft_mut(idx).grace_until = Some(grace_until);
        self.bound_to(idx)
            .into_iter()
            .filter(|id| {
                Some(id.as_str()) != keep && self.function_of(id).accelerator != accelerator
            })
            .collect()
    }

    // ---- functions and instances ----

    fn function_of(&self, instance: &str) -> &FunctionRecord {
        let function = &self.instances[instance].function;
        &self.functions[function].record
    }

    pub fn put_function(&mut self, record: FunctionRecord) {
        self.changes.push(Change::PutFunction(record.clone()));
        match self.functions.get_mut(&record.name) {
            Some(f) => f.record = record,
            None => {
                self.functions.insert(
                    record.name.clone(),
                    Function {
                        record,
                        instances: BTreeSet::new(),
                    },
                );
            }
        }
    }

    /// Deletes a function and its instances.
    pub fn delete_function(&mut self, name: &str) {
        let ids: Vec<String> = self.functions[name].instances.iter().cloned().collect();
        for id in ids {
            self.delete_instance(&id);
        }
        self.functions.remove(name);
        self.changes.push(Change::DeleteFunction(name.to_string()));
    }

    /// A fresh instance id for `function`, unused by any instance. Loops only past ids
    /// that clients chose themselves, so at most once per existing instance.
    pub fn new_instance_id(&mut self, function: &str) -> String {
        loop {
            self.meta.next_instance += 1;
            let n = self.meta.next_instance;
            let mut id = format!("{function}-{n}");
            if id.len() > crate::model::NAME_BYTES_MAX {
                id = format!("i-{n}");
            }
            if !self.instances.contains_key(&id) {
                self.changes.push(Change::PutMeta(self.meta.clone()));
                return id;
            }
        }
    }

    /// Adds an unbound instance.
    pub fn create_instance(&mut self, id: &str, function: &str) {
        self.insert_instance(id, function, false);
    }

    /// Adds an instance bound to `idx` that allocation never moves (see
    /// `InstanceRecord::pinned`).
    pub fn create_pinned_instance(&mut self, id: &str, function: &str, idx: SlotIdx) {
        self.insert_instance(id, function, true);
        self.set_binding(id, Some(idx));
    }

    fn insert_instance(&mut self, id: &str, function: &str, pinned: bool) {
        let record = InstanceRecord {
            id: id.to_string(),
            function: function.to_string(),
            binding: None,
            generation: 1,
            pinned,
        };
        self.functions
            .get_mut(function)
            .expect("function exists")
            .instances
            .insert(id.to_string());
        self.changes.push(Change::PutInstance(record.clone()));
        self.instances.insert(id.to_string(), record);
        self.touched.insert(id.to_string());
    }

    pub fn delete_instance(&mut self, id: &str) {
        if let Some(idx) = self.bound_slot(id) {
            self.detach(id, idx);
        }
        let record = self.instances.remove(id).expect("instance exists");
        if let Some(f) = self.functions.get_mut(&record.function) {
            f.instances.remove(id);
        }
        self.changes.push(Change::DeleteInstance(id.to_string()));
        self.touched.insert(id.to_string());
    }

    /// Binds an instance to `slot` (or to nothing) and bumps its generation when that
    /// changes its binding.
    pub fn set_binding(&mut self, id: &str, slot: Option<SlotIdx>) {
        let current = self.bound_slot(id);
        let had_binding = self.instances[id].binding.is_some();
        if current == slot && (slot.is_some() || !had_binding) {
            return;
        }
        if let Some(idx) = current {
            self.detach(id, idx);
        }
        let binding = slot.map(|idx| self.slot_ref(idx));
        if let Some(idx) = slot {
            self.attach(id, idx);
        }
        let record = self.instances.get_mut(id).expect("instance exists");
        record.binding = binding;
        record.generation += 1;
        self.changes.push(Change::PutInstance(record.clone()));
        self.touched.insert(id.to_string());
    }

    /// Tells an instance's watchers that its binding reads differently (its node's
    /// addresses changed) though it names the same slot.
    fn bump_generation(&mut self, id: &str) {
        let record = self.instances.get_mut(id).expect("instance exists");
        record.generation += 1;
        self.changes.push(Change::PutInstance(record.clone()));
        self.touched.insert(id.to_string());
    }

    fn attach(&mut self, id: &str, idx: SlotIdx) {
        self.inventory.bind(idx);
        self.bound.entry(idx).or_default().insert(id.to_string());
        if let Some(soft) = self.soft.get_mut(&idx) {
            soft.unused_since = None;
        }
        if self.instances.get(id).is_some_and(|r| r.pinned) {
            self.inventory.set_pinned(idx, true);
        }
    }

    fn detach(&mut self, id: &str, idx: SlotIdx) {
        self.inventory.unbind(idx);
        let set = self.bound.get_mut(&idx).expect("bound set");
        set.remove(id);
        if set.is_empty() {
            self.bound.remove(&idx);
        }
        let pinned = self.bound.get(&idx).is_some_and(|ids| {
            ids.iter()
                .any(|i| self.instances.get(i).is_some_and(|r| r.pinned))
        });
        self.inventory.set_pinned(idx, pinned);
    }

    /// Pinned instances bound to a slot.
    pub fn pinned_on(&self, idx: SlotIdx) -> Vec<String> {
        self.bound_to(idx)
            .into_iter()
            .filter(|id| self.instances[id].pinned)
            .collect()
    }

    /// Marks the start of a slot's unused period (call when the last instance leaves;
    /// the rebalancer compares it with the release delay).
    pub fn note_unused(&mut self, now: Instant) {
        for (idx, soft) in self.soft.iter_mut() {
            if soft.unused_since.is_none() && !self.bound.contains_key(idx) {
                soft.unused_since = Some(now);
            }
        }
    }

    // ---- documents ----

    /// The records as committed (the cache never holds an uncommitted change between
    /// transactions), for a follower to copy.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            revision: self.revision,
            nodes: self.nodes.values().map(|n| n.record.clone()).collect(),
            functions: self.functions.values().map(|f| f.record.clone()).collect(),
            instances: self.instances.values().cloned().collect(),
            meta: self.meta.clone(),
        }
    }

    /// An instance's binding as clients see it.
    pub fn binding(&self, id: &str) -> api::Binding {
        let record = &self.instances[id];
        let node = record
            .binding
            .as_ref()
            .and_then(|b| self.nodes.get(&b.node))
            .map(|n| &n.record);
        let extra = node.map(|n| n.extra).unwrap_or_default();
        api::Binding {
            id: record.id.clone(),
            function: record.function.clone(),
            node: record.binding.as_ref().map(|b| b.node.clone()),
            device: record.binding.as_ref().map(|b| b.device.clone()),
            slot: record.binding.as_ref().map(|b| b.slot),
            http: node.map(|n| n.http),
            rac: node.map(|n| n.rac),
            opencl: node.and_then(|n| n.opencl),
            https: extra.https,
            rac_tls: extra.rac_tls,
            grpc: extra.grpc,
            grpc_tls: extra.grpc_tls,
            generation: record.generation,
            // Sent only where it says something (a DRA claim's instance), so the
            // documents of every other instance read as they always have.
            pinned: record.pinned,
        }
    }

    pub fn binding_json(&self, id: &str) -> Value {
        to_json(&self.binding(id))
    }

    pub fn function_view(&self, name: &str) -> api::FunctionView {
        let f = &self.functions[name];
        api::FunctionView {
            name: f.record.name.clone(),
            accelerator: f.record.accelerator.clone(),
            hash: f.record.hash.clone(),
            query: f.record.query.clone(),
            instances: f.instances.iter().map(|id| self.binding(id)).collect(),
        }
    }

    pub fn function_json(&self, name: &str) -> Value {
        to_json(&self.function_view(name))
    }

    pub fn node_view(&self, node: &Node) -> api::NodeView {
        let r = &node.record;
        let mut slots = node.slots.iter();
        let devices = r
            .devices
            .iter()
            .map(|d| api::DeviceView {
                id: d.id.clone(),
                backend: d.backend.clone(),
                vendor: d.vendor.clone(),
                platform: d.platform.clone(),
                accelerators: d.accelerators.clone(),
                slots: d
                    .slots
                    .iter()
                    .map(|s| {
                        let idx = *slots.next().expect("one index per slot of the record");
                        self.slot_view(idx, s)
                    })
                    .collect(),
            })
            .collect();
        debug_assert!(slots.next().is_none(), "one slot of the record per index");
        api::NodeView {
            name: r.name.clone(),
            state: r.state,
            http: r.http,
            rac: r.rac,
            opencl: r.opencl,
            https: r.extra.https,
            rac_tls: r.extra.rac_tls,
            grpc: r.extra.grpc,
            grpc_tls: r.extra.grpc_tls,
            devices,
        }
    }

    fn slot_view(&self, idx: SlotIdx, s: &SlotRecord) -> api::SlotView {
        let view = self.inventory.get(idx).expect("live slot");
        let soft = self.soft(idx);
        api::SlotView {
            id: s.id,
            accelerator: s.accelerator.clone(),
            hash: s.hash.clone(),
            busy_ratio: view.utilization,
            queue_depth: soft.queue_depth,
            utilization: view.effective_utilization(),
            reconfiguring: soft.pending.as_ref().map(|p| p.0.clone()),
            released: view.released,
            instances: self.bound_to(idx),
        }
    }

    pub fn node_json(&self, node: &Node) -> Value {
        to_json(&self.node_view(node))
    }

    /// Checks the invariants listed in the module documentation.
    pub fn check_invariants(&self) {
        self.inventory.check_consistency();
        let mut counts: HashMap<SlotIdx, u32> = HashMap::new();
        for (id, record) in &self.instances {
            assert!(
                self.functions[&record.function].instances.contains(id),
                "{id} missing from its function"
            );
            if let Some(b) = &record.binding {
                let idx = self
                    .slot_idx(b)
                    .unwrap_or_else(|| panic!("{id} bound to a missing slot {b:?}"));
                *counts.entry(idx).or_default() += 1;
                assert!(self.bound[&idx].contains(id));
            }
        }
        for (idx, slot) in self.inventory.iter() {
            assert_eq!(
                slot.instances,
                counts.get(&idx).copied().unwrap_or(0),
                "instance count of slot {:?}",
                slot.spec
            );
        }
        let bound: usize = self.bound.values().map(BTreeSet::len).sum();
        assert_eq!(bound, counts.values().sum::<u32>() as usize);
        for node in self.nodes.values() {
            for &idx in &node.slots {
                assert_eq!(
                    self.inventory.get(idx).unwrap().pinned,
                    !self.pinned_on(idx).is_empty(),
                    "pinned flag of {idx}"
                );
                assert_eq!(
                    self.inventory.get(idx).unwrap().ready,
                    node.record.state == NodeState::Ready
                );
            }
        }
    }
}

/// The slots of `old` that stay (keep their inventory entry and bindings) under
/// `record`: those reported again on the same device with the same traits, by id.
fn kept_slots(old: &Node, record: &NodeRecord) -> HashMap<SlotId, SlotIdx> {
    let reported: HashMap<SlotId, usize> = record
        .devices
        .iter()
        .enumerate()
        .flat_map(|(d, device)| device.slots.iter().map(move |s| (s.id, d)))
        .collect();
    debug_assert_eq!(
        old.slots.len(),
        old.record
            .devices
            .iter()
            .map(|d| d.slots.len())
            .sum::<usize>(),
        "one inventory index per slot of the record"
    );
    let mut keep: HashMap<SlotId, SlotIdx> = HashMap::new();
    let old_slots = old
        .record
        .devices
        .iter()
        .flat_map(|d| d.slots.iter().map(move |s| (d, s)));
    for ((d, s), &idx) in old_slots.zip(&old.slots) {
        let same = reported.get(&s.id).is_some_and(|&nd| {
            let nd = &record.devices[nd];
            nd.id == d.id
                && nd.backend == d.backend
                && nd.vendor == d.vendor
                && nd.accelerators == d.accelerators
        });
        if same {
            keep.insert(s.id, idx);
        }
    }
    keep
}

/// A document of the API as JSON (the registry-api types cannot fail to serialise).
fn to_json<T: serde::Serialize>(doc: &T) -> Value {
    serde_json::to_value(doc).expect("API documents serialise")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeRegistration, Query};

    fn state_with_a_bound_instance() -> (State, SlotIdx) {
        let now = Instant::now();
        let mut st = State::from_snapshot(Snapshot::default(), now, now);
        let reg: NodeRegistration = serde_json::from_str(
            r#"{"http":"127.0.0.1:8080","rac":"127.0.0.1:9400","devices":[{"id":"cpu0",
            "backend":"cpu","slots":[{"id":0,"accelerator":"echo"}]}]}"#,
        )
        .unwrap();
        st.upsert_node("n1", &reg, now, now + std::time::Duration::from_secs(3));
        st.put_function(FunctionRecord {
            name: "f".into(),
            accelerator: "echo".into(),
            hash: None,
            query: Query::default(),
        });
        st.create_instance("f-1", "f");
        let idx = st.inventory.find("n1", 0).unwrap();
        st.set_binding("f-1", Some(idx));
        let _ = st.take_changes();
        (st, idx)
    }

    #[test]
    fn a_consistent_state_passes_its_check() {
        let (st, _) = state_with_a_bound_instance();
        st.check_invariants();
    }

    #[test]
    #[should_panic(expected = "instance count of slot")]
    fn check_invariants_fires_on_an_instance_count_out_of_step() {
        let (mut st, idx) = state_with_a_bound_instance();
        // Broken on purpose: the inventory counts one more instance than is bound.
        st.inventory.bind(idx);
        st.check_invariants();
    }

    #[test]
    #[cfg_attr(not(debug_assertions), ignore = "the check runs in debug builds")]
    #[should_panic(expected = "missing from its function")]
    fn a_transaction_that_breaks_an_invariant_panics_in_debug_builds() {
        let (mut st, _) = state_with_a_bound_instance();
        // Broken on purpose: the instance no longer listed by its function.
        st.functions.get_mut("f").unwrap().instances.clear();
        let _ = st.take_changes();
    }
}
