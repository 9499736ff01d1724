//! Allocation: BlastFunction's Algorithm 1 as a pure function over an inventory of
//! slots.
//!
//! The [`Inventory`] is what allocation needs to know about every slot of the cluster
//! and nothing else: who it is (node, device, slot id), what it is (backend, vendor,
//! the accelerators its device can load), what it holds, how busy it is and how many
//! instances are bound to it. [`Inventory::allocate`] answers one question — where
//! should one more instance of a function go — without I/O and without changing
//! anything: the caller binds, reconfigures (through the node) and migrates. That split
//! keeps the algorithm unit- and property-testable and lets the registry run it under
//! its state lock in microseconds, while the slow part (a node loading an accelerator)
//! happens outside it.
//!
//! The steps, for a request for accelerator `A` (hash `H` when given):
//! 1. keep the slots of ready nodes compatible with the query (backend, vendor, node)
//!    that can hold `A` at all (their device lists `A`, or lists nothing), and that are
//!    not being reconfigured;
//! 2. drop those whose utilisation is above the ceiling;
//! 3. order: slots holding `A` (and `H`) first, then by utilisation, then by the number
//!    of instances bound (or occupation first, then utilisation: [`Order`]); ties go to
//!    the smallest (node, device, slot) so the answer is deterministic;
//! 4. if the first slot holds `A`, bind to it;
//! 5. otherwise the first slot `D` in that order whose load can be redistributed —
//!    Σ over the other ready slots `d` holding `D`'s accelerator of `(1 − d.u)` ≥ `D.u`
//!    (an idle slot always qualifies) — is to be reconfigured to `A`;
//! 6. otherwise `NO_DEVICE`.
//!
//! Cost: step 4 looks only at the slots holding `A` (an index kept per accelerator);
//! step 5, the rare path that ends in a reconfiguration, scans every slot twice (once
//! to sum the spare capacity per accelerator exactly, once to pick `D`).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

/// Index of a slot in an [`Inventory`]; stable while the slot exists.
pub type SlotIdx = u32;

/// Rounding slack of the redistribution inequality: utilisations are measurements, and
/// sums of them carry float rounding that must not flip an exact tie.
pub const REDISTRIBUTION_EPSILON: f64 = 1e-9;

/// Which criterion orders candidate slots first after "holds the accelerator".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// Least utilised first, then fewest instances bound (BlastFunction's order).
    #[default]
    Utilization,
    /// Fewest instances bound first, then least utilised.
    Occupation,
}

/// The allocation knobs.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// Slots with a utilisation above this take no new instance (0..=1).
    pub ceiling: f64,
    pub order: Order,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            ceiling: 0.9,
            order: Order::Utilization,
        }
    }
}

/// Whether a request may end in a reconfiguration (step 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconfigure {
    /// The full algorithm.
    Any,
    /// Only slots with no instance bound may be reconfigured, so nobody is displaced
    /// (used to retry unbound instances, where displacing others would only move the
    /// shortage around).
    EmptyOnly,
    /// Bind or fail.
    Never,
}

/// One instance's needs.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub accelerator: &'a str,
    /// Required image hash; `None` accepts any build of the accelerator.
    pub hash: Option<&'a str>,
    pub backend: Option<&'a str>,
    pub vendor: Option<&'a str>,
    /// Only this node's slots.
    pub node: Option<&'a str>,
    /// Slots this request must not take (the slot an instance is leaving, slots
    /// reconfigured earlier in the same migration chain). Short: checked linearly.
    pub exclude: &'a [SlotIdx],
    pub reconfigure: Reconfigure,
}

impl<'a> Request<'a> {
    /// A request for `accelerator` with no constraint.
    pub fn new(accelerator: &'a str) -> Request<'a> {
        Request {
            accelerator,
            hash: None,
            backend: None,
            vendor: None,
            node: None,
            exclude: &[],
            reconfigure: Reconfigure::Any,
        }
    }
}

/// Where one more instance goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Step 4: the slot holds the accelerator; bind to it.
    Bind(SlotIdx),
    /// Step 5: load the accelerator into this slot, migrate what is bound to it, bind.
    Reconfigure(SlotIdx),
    /// Step 6: no slot is compatible and none can be reconfigured.
    NoDevice,
}

/// A slot as it enters the inventory.
#[derive(Clone, Debug)]
pub struct SlotSpec {
    pub node: Arc<str>,
    pub device: Arc<str>,
    pub slot: u32,
    pub backend: Arc<str>,
    pub vendor: Arc<str>,
    /// Accelerators the slot's device can load; `None`: any.
    pub catalog: Option<Arc<[String]>>,
    pub accelerator: Arc<str>,
    /// Hash of the loaded image; empty when unknown.
    pub hash: Arc<str>,
}

/// A slot as allocation sees it.
#[derive(Clone, Debug)]
pub struct SlotView {
    pub spec: SlotSpec,
    /// Busy share of time, 0..=1.
    pub utilization: f64,
    /// Instances bound to the slot.
    pub instances: u32,
    /// Its node holds a lease.
    pub ready: bool,
    /// The registry is loading another accelerator into it.
    pub reconfiguring: bool,
    /// Unused for long enough that allocation counts it as idle (see the registry's
    /// `release_unused_ms`).
    pub released: bool,
    accel: u32,
}

impl SlotView {
    /// Utilisation as allocation counts it: a released slot counts as idle.
    pub fn effective_utilization(&self) -> f64 {
        if self.released {
            0.0
        } else {
            self.utilization
        }
    }

    fn can_hold(&self, accelerator: &str) -> bool {
        self.spec
            .catalog
            .as_ref()
            .map_or(true, |c| c.iter().any(|a| a == accelerator))
    }

    fn matches(&self, req: &Request<'_>, policy: &Policy, idx: SlotIdx) -> bool {
        self.ready
            && !self.reconfiguring
            && self.effective_utilization() <= policy.ceiling
            && req.backend.map_or(true, |b| *self.spec.backend == *b)
            && req.vendor.map_or(true, |v| *self.spec.vendor == *v)
            && req.node.map_or(true, |n| *self.spec.node == *n)
            && !req.exclude.contains(&idx)
    }

    /// What this slot offers other slots holding its accelerator to redistribute onto.
    fn spare(&self) -> f64 {
        if self.ready && !self.reconfiguring {
            1.0 - self.utilization
        } else {
            0.0
        }
    }
}

struct Accel {
    name: Arc<str>,
    holders: Vec<SlotIdx>,
}

/// Every slot of the cluster, indexed for allocation.
#[derive(Default)]
pub struct Inventory {
    slots: Vec<Option<SlotView>>,
    vacant: Vec<SlotIdx>,
    by_id: HashMap<(Arc<str>, u32), SlotIdx>,
    accels: Vec<Accel>,
    accel_ids: HashMap<Arc<str>, u32>,
    free_accels: Vec<u32>,
}

impl Inventory {
    pub fn new() -> Inventory {
        Inventory::default()
    }

    /// Adds a slot (ready, idle, nothing bound). Slot ids are unique within a node.
    pub fn insert(&mut self, spec: SlotSpec) -> SlotIdx {
        assert!(
            !self.by_id.contains_key(&(spec.node.clone(), spec.slot)),
            "slot {} of node {} added twice",
            spec.slot,
            spec.node
        );
        let idx = match self.vacant.pop() {
            Some(idx) => idx,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as SlotIdx
            }
        };
        let accel = self.accel_id(&spec.accelerator);
        self.accels[accel as usize].holders.push(idx);
        self.by_id.insert((spec.node.clone(), spec.slot), idx);
        self.slots[idx as usize] = Some(SlotView {
            spec,
            utilization: 0.0,
            instances: 0,
            ready: true,
            reconfiguring: false,
            released: false,
            accel,
        });
        idx
    }

    /// Removes a slot; its index may be reused by a later [`Inventory::insert`].
    pub fn remove(&mut self, idx: SlotIdx) {
        let view = self.slots[idx as usize].take().expect("live slot");
        self.drop_holder(view.accel, idx);
        self.by_id.remove(&(view.spec.node.clone(), view.spec.slot));
        self.vacant.push(idx);
    }

    pub fn get(&self, idx: SlotIdx) -> Option<&SlotView> {
        self.slots.get(idx as usize).and_then(Option::as_ref)
    }

    fn slot_mut(&mut self, idx: SlotIdx) -> &mut SlotView {
        self.slots[idx as usize].as_mut().expect("live slot")
    }

    /// The slot `slot` of node `node`.
    pub fn find(&self, node: &str, slot: u32) -> Option<SlotIdx> {
        self.by_id.get(&(Arc::from(node), slot)).copied()
    }

    /// Live slots, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (SlotIdx, &SlotView)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as SlotIdx, s)))
    }

    pub fn len(&self) -> usize {
        self.slots.len() - self.vacant.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records what the slot now holds.
    pub fn set_accelerator(&mut self, idx: SlotIdx, accelerator: &str, hash: &str) {
        let old = self.slot_mut(idx).accel;
        if *self.accels[old as usize].name != *accelerator {
            self.drop_holder(old, idx);
            let new = self.accel_id(accelerator);
            self.accels[new as usize].holders.push(idx);
            let slot = self.slot_mut(idx);
            slot.accel = new;
            slot.spec.accelerator = Arc::from(accelerator);
        }
        let slot = self.slot_mut(idx);
        if *slot.spec.hash != *hash {
            slot.spec.hash = Arc::from(hash);
        }
    }

    pub fn set_utilization(&mut self, idx: SlotIdx, utilization: f64) {
        self.slot_mut(idx).utilization = utilization.clamp(0.0, 1.0);
    }

    pub fn set_ready(&mut self, idx: SlotIdx, ready: bool) {
        self.slot_mut(idx).ready = ready;
    }

    pub fn set_reconfiguring(&mut self, idx: SlotIdx, reconfiguring: bool) {
        self.slot_mut(idx).reconfiguring = reconfiguring;
    }

    pub fn set_released(&mut self, idx: SlotIdx, released: bool) {
        self.slot_mut(idx).released = released;
    }

    /// One more instance bound to the slot; binding one un-releases it.
    pub fn bind(&mut self, idx: SlotIdx) {
        let slot = self.slot_mut(idx);
        slot.instances += 1;
        slot.released = false;
    }

    pub fn unbind(&mut self, idx: SlotIdx) {
        let slot = self.slot_mut(idx);
        assert!(slot.instances > 0, "unbinding from an empty slot");
        slot.instances -= 1;
    }

    fn accel_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.accel_ids.get(name) {
            return id;
        }
        let name: Arc<str> = Arc::from(name);
        let entry = Accel {
            name: name.clone(),
            holders: Vec::new(),
        };
        let id = match self.free_accels.pop() {
            Some(id) => {
                self.accels[id as usize] = entry;
                id
            }
            None => {
                self.accels.push(entry);
                (self.accels.len() - 1) as u32
            }
        };
        self.accel_ids.insert(name, id);
        id
    }

    /// Forgets `idx` as a holder; an accelerator no slot holds any more leaves the
    /// index so the table stays as small as the set of loaded accelerators.
    fn drop_holder(&mut self, accel: u32, idx: SlotIdx) {
        let entry = &mut self.accels[accel as usize];
        let pos = entry
            .holders
            .iter()
            .position(|&h| h == idx)
            .expect("slot is a holder of its accelerator");
        entry.holders.swap_remove(pos);
        if entry.holders.is_empty() {
            let name = entry.name.clone();
            self.accel_ids.remove(&name);
            self.free_accels.push(accel);
        }
    }

    /// Slots holding `accelerator`, in no particular order.
    pub fn holders(&self, accelerator: &str) -> &[SlotIdx] {
        match self.accel_ids.get(accelerator) {
            Some(&id) => &self.accels[id as usize].holders,
            None => &[],
        }
    }

    /// Compares two candidate slots in allocation order (after "holds the accelerator").
    fn cmp(&self, policy: &Policy, a: SlotIdx, b: SlotIdx) -> Ordering {
        let (sa, sb) = (self.get(a).unwrap(), self.get(b).unwrap());
        let util = sa
            .effective_utilization()
            .total_cmp(&sb.effective_utilization());
        let occupation = sa.instances.cmp(&sb.instances);
        let first = match policy.order {
            Order::Utilization => util.then(occupation),
            Order::Occupation => occupation.then(util),
        };
        first.then_with(|| {
            (&sa.spec.node, &sa.spec.device, sa.spec.slot).cmp(&(
                &sb.spec.node,
                &sb.spec.device,
                sb.spec.slot,
            ))
        })
    }

    /// Where one more instance for `req` goes (steps 1–6). Pure: changes nothing.
    pub fn allocate(&self, req: &Request<'_>, policy: &Policy) -> Decision {
        // Steps 1–4 over the slots holding the accelerator: the best of them, if any
        // passes the filters, is the first slot of the whole order.
        let mut best: Option<SlotIdx> = None;
        for &idx in self.holders(req.accelerator) {
            let slot = self.get(idx).expect("holders are live");
            if !slot.matches(req, policy, idx) || req.hash.is_some_and(|h| *slot.spec.hash != *h) {
                continue;
            }
            if best.map_or(true, |b| self.cmp(policy, idx, b) == Ordering::Less) {
                best = Some(idx);
            }
        }
        if let Some(idx) = best {
            return Decision::Bind(idx);
        }
        if req.reconfigure == Reconfigure::Never {
            return Decision::NoDevice;
        }
        // Step 5. Spare capacity per accelerator, summed afresh so the inequality is
        // exact for exactly representable utilisations.
        let mut spare = vec![0.0f64; self.accels.len()];
        for (_, slot) in self.iter() {
            spare[slot.accel as usize] += slot.spare();
        }
        let mut best: Option<SlotIdx> = None;
        for (idx, slot) in self.iter() {
            if !slot.matches(req, policy, idx)
                || !slot.can_hold(req.accelerator)
                || (req.reconfigure == Reconfigure::EmptyOnly && slot.instances > 0)
            {
                continue;
            }
            if best.is_some_and(|b| self.cmp(policy, idx, b) != Ordering::Less) {
                continue;
            }
            let load = slot.effective_utilization();
            let others = spare[slot.accel as usize] - slot.spare();
            if load == 0.0 || others + REDISTRIBUTION_EPSILON >= load {
                best = Some(idx);
            }
        }
        match best {
            Some(idx) => Decision::Reconfigure(idx),
            None => Decision::NoDevice,
        }
    }

    /// Checks the index against the slots (tests and debug assertions).
    pub fn check_consistency(&self) {
        for (idx, slot) in self.iter() {
            let entry = &self.accels[slot.accel as usize];
            assert_eq!(*entry.name, *slot.spec.accelerator);
            assert!(entry.holders.contains(&idx));
            assert_eq!(self.find(&slot.spec.node, slot.spec.slot), Some(idx));
        }
        let holders: usize = self
            .accel_ids
            .values()
            .map(|&a| self.accels[a as usize].holders.len())
            .sum();
        assert_eq!(holders, self.len());
        assert_eq!(self.by_id.len(), self.len());
    }
}

#[cfg(test)]
mod tests;
