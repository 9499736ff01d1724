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
//!    (an idle slot always qualifies) — is to be reconfigured to `A`; a *pinned* slot
//!    (one holding an instance allocation did not place and cannot move, a DRA
//!    claim's) is never chosen;
//! 6. otherwise `NO_DEVICE`.
//!
//! ```
//! use std::sync::Arc;
//! use netaccel_registry::alloc::{Decision, Inventory, Policy, Request, SlotSpec};
//!
//! let slot = |id, accelerator: &str| SlotSpec {
//!     node: Arc::from("node-a"),
//!     device: Arc::from("cpu0"),
//!     slot: id,
//!     backend: Arc::from("cpu"),
//!     vendor: Arc::from("netaccel"),
//!     catalog: None,
//!     accelerator: Arc::from(accelerator),
//!     hash: Arc::from(""),
//! };
//! let mut inventory = Inventory::new();
//! let sobel = inventory.insert(slot(0, "sobel"));
//! let echo = inventory.insert(slot(1, "echo"));
//! inventory.set_utilization(sobel, 0.5);
//! let policy = Policy::default();
//! // A slot holding the accelerator is shared, even when busier than an idle one...
//! assert_eq!(inventory.allocate(&Request::new("sobel"), &policy), Decision::Bind(sobel));
//! // ...and an idle slot is reconfigured for an accelerator nobody holds.
//! assert_eq!(inventory.allocate(&Request::new("topk"), &policy), Decision::Reconfigure(echo));
//! ```
//!
//! Cost: step 4 looks only at the slots holding `A` (an index kept per accelerator);
//! step 5, the rare path that ends in a reconfiguration, scans every slot once, over
//! packed 16-byte records, with the spare capacity of each accelerator kept up to date
//! as utilisations change (exactly: utilisations are integers in millionths).

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::SlotId;

/// Index of a slot in an [`Inventory`]; stable while the slot exists.
pub type SlotIdx = u32;

/// Slots reconfigured in one migration chain before only empty slots may be: a
/// chain of displacements always ends.
pub const MIGRATION_DEPTH_MAX: usize = 3;

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

    /// The first try for an instance displaced from its slot (the slot was
    /// reconfigured, or its node lost): a slot already holding its accelerator,
    /// outside the migration `chain`, without I/O.
    pub fn displaced(accelerator: &'a str, chain: &'a [SlotIdx]) -> Request<'a> {
        Request {
            exclude: chain,
            reconfigure: Reconfigure::Never,
            ..Request::new(accelerator)
        }
    }

    /// The next try for a displaced instance that found no such slot: the full
    /// algorithm outside the `chain`, or only empty slots once the chain is
    /// [`MIGRATION_DEPTH_MAX`] slots long.
    pub fn followup(accelerator: &'a str, chain: &'a [SlotIdx]) -> Request<'a> {
        Request {
            exclude: chain,
            reconfigure: followup_reconfigure(chain),
            ..Request::new(accelerator)
        }
    }
}

/// How far a displaced instance's follow-up allocation may go, after a migration
/// chain of `chain.len()` reconfigured slots.
pub fn followup_reconfigure(chain: &[SlotIdx]) -> Reconfigure {
    if chain.len() >= MIGRATION_DEPTH_MAX {
        Reconfigure::EmptyOnly
    } else {
        Reconfigure::Any
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
    pub slot: SlotId,
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
    /// Busy share of time, 0..=1, in steps of one millionth ([`UTILIZATION_UNIT`]).
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
    /// An instance someone else placed is bound to it (a DRA claim's): step 5 never
    /// picks it, since that instance cannot be moved, only its Pods evicted.
    pub pinned: bool,
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

    /// Whether the rebalancer should move one of its instances elsewhere: its node is
    /// ready, nobody reconfigures it, it is busier than the ceiling, and moving one
    /// instance leaves another.
    pub fn relievable(&self, policy: &Policy) -> bool {
        self.ready
            && !self.reconfiguring
            && self.utilization > policy.ceiling
            && self.instances >= 2
    }

    fn can_hold(&self, accelerator: &str) -> bool {
        self.spec
            .catalog
            .as_ref()
            .is_none_or(|c| c.iter().any(|a| a == accelerator))
    }

    fn matches_query(&self, req: &Request<'_>) -> bool {
        req.backend.is_none_or(|b| *self.spec.backend == *b)
            && req.vendor.is_none_or(|v| *self.spec.vendor == *v)
            && req.node.is_none_or(|n| *self.spec.node == *n)
    }
}

/// Utilisations are kept as integers in millionths: sums of them are exact, so the
/// redistribution inequality is decided exactly and spare capacity can be kept up to
/// date incrementally without drifting.
pub const UTILIZATION_UNIT: u32 = 1_000_000;

fn to_units(utilization: f64) -> u32 {
    (utilization.clamp(0.0, 1.0) * UTILIZATION_UNIT as f64).round() as u32
}

const LIVE: u8 = 1;
const READY: u8 = 2;
const RECONFIGURING: u8 = 4;
const RELEASED: u8 = 8;
const HAS_CATALOG: u8 = 16;
const PINNED: u8 = 32;

/// What the scans read of a slot, packed (16 bytes) so that a pass over every slot
/// of a large cluster stays in cache; names and catalogs are read only on ties and
/// when a request constrains them.
#[derive(Clone, Copy, Debug, Default)]
struct Hot {
    units: u32,
    instances: u32,
    accel: u32,
    flags: u8,
}

impl Hot {
    fn usable(&self) -> bool {
        self.flags & (LIVE | READY | RECONFIGURING) == LIVE | READY
    }

    fn effective_units(&self) -> u32 {
        if self.flags & RELEASED != 0 {
            0
        } else {
            self.units
        }
    }

    /// What this slot offers other slots holding its accelerator to redistribute onto.
    fn spare(&self) -> i64 {
        if self.usable() {
            (UTILIZATION_UNIT - self.units) as i64
        } else {
            0
        }
    }
}

struct Accel {
    name: Arc<str>,
    holders: Vec<SlotIdx>,
    /// Σ of [`Hot::spare`] over the holders, kept up to date by every setter.
    spare: i64,
}

/// Every slot of the cluster, indexed for allocation.
#[derive(Default)]
pub struct Inventory {
    views: Vec<Option<SlotView>>,
    hot: Vec<Hot>,
    vacant: Vec<SlotIdx>,
    by_id: HashMap<(Arc<str>, SlotId), SlotIdx>,
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
                self.views.push(None);
                self.hot.push(Hot::default());
                (self.views.len() - 1) as SlotIdx
            }
        };
        let accel = self.accel_id(&spec.accelerator);
        self.accels[accel as usize].holders.push(idx);
        self.by_id.insert((spec.node.clone(), spec.slot), idx);
        let catalog = if spec.catalog.is_some() {
            HAS_CATALOG
        } else {
            0
        };
        self.hot[idx as usize] = Hot {
            units: 0,
            instances: 0,
            accel,
            flags: LIVE | READY | catalog,
        };
        self.accels[accel as usize].spare += self.hot[idx as usize].spare();
        self.views[idx as usize] = Some(SlotView {
            spec,
            utilization: 0.0,
            instances: 0,
            ready: true,
            reconfiguring: false,
            released: false,
            pinned: false,
        });
        self.checked();
        idx
    }

    /// Removes a slot; its index may be reused by a later [`Inventory::insert`].
    pub fn remove(&mut self, idx: SlotIdx) {
        let view = self.views[idx as usize].take().expect("live slot");
        let hot = std::mem::take(&mut self.hot[idx as usize]);
        self.accels[hot.accel as usize].spare -= hot.spare();
        self.drop_holder(hot.accel, idx);
        self.by_id.remove(&(view.spec.node.clone(), view.spec.slot));
        self.vacant.push(idx);
        self.checked();
    }

    pub fn get(&self, idx: SlotIdx) -> Option<&SlotView> {
        self.views.get(idx as usize).and_then(Option::as_ref)
    }

    /// Changes the slot's hot record and view through `change`, keeping its
    /// accelerator's spare capacity in step.
    fn update(&mut self, idx: SlotIdx, change: impl FnOnce(&mut Hot, &mut SlotView)) {
        let view = self.views[idx as usize].as_mut().expect("live slot");
        let hot = &mut self.hot[idx as usize];
        let before = hot.spare();
        change(hot, view);
        let after = hot.spare();
        self.accels[hot.accel as usize].spare += after - before;
        self.checked();
    }

    /// After every mutation: [`Inventory::check_consistency`] in debug builds.
    fn checked(&self) {
        #[cfg(debug_assertions)]
        self.check_consistency();
    }

    /// The slot `slot` of node `node`.
    pub fn find(&self, node: &str, slot: SlotId) -> Option<SlotIdx> {
        self.by_id.get(&(Arc::from(node), slot)).copied()
    }

    /// Live slots, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (SlotIdx, &SlotView)> {
        self.views
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as SlotIdx, s)))
    }

    pub fn len(&self) -> usize {
        self.views.len() - self.vacant.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records what the slot now holds.
    pub fn set_accelerator(&mut self, idx: SlotIdx, accelerator: &str, hash: &str) {
        let old = self.hot[idx as usize].accel;
        if *self.accels[old as usize].name != *accelerator {
            let spare = self.hot[idx as usize].spare();
            self.accels[old as usize].spare -= spare;
            self.drop_holder(old, idx);
            let new = self.accel_id(accelerator);
            self.accels[new as usize].holders.push(idx);
            self.accels[new as usize].spare += spare;
            self.hot[idx as usize].accel = new;
            let view = self.views[idx as usize].as_mut().expect("live slot");
            view.spec.accelerator = Arc::from(accelerator);
        }
        let view = self.views[idx as usize].as_mut().expect("live slot");
        if *view.spec.hash != *hash {
            view.spec.hash = Arc::from(hash);
        }
        self.checked();
    }

    pub fn set_utilization(&mut self, idx: SlotIdx, utilization: f64) {
        let units = to_units(utilization);
        self.update(idx, |hot, view| {
            hot.units = units;
            view.utilization = units as f64 / UTILIZATION_UNIT as f64;
        });
    }

    pub fn set_ready(&mut self, idx: SlotIdx, ready: bool) {
        self.update(idx, |hot, view| {
            hot.flags = if ready {
                hot.flags | READY
            } else {
                hot.flags & !READY
            };
            view.ready = ready;
        });
    }

    pub fn set_reconfiguring(&mut self, idx: SlotIdx, reconfiguring: bool) {
        self.update(idx, |hot, view| {
            hot.flags = if reconfiguring {
                hot.flags | RECONFIGURING
            } else {
                hot.flags & !RECONFIGURING
            };
            view.reconfiguring = reconfiguring;
        });
    }

    pub fn set_released(&mut self, idx: SlotIdx, released: bool) {
        self.update(idx, |hot, view| {
            hot.flags = if released {
                hot.flags | RELEASED
            } else {
                hot.flags & !RELEASED
            };
            view.released = released;
        });
    }

    pub fn set_pinned(&mut self, idx: SlotIdx, pinned: bool) {
        self.update(idx, |hot, view| {
            hot.flags = if pinned {
                hot.flags | PINNED
            } else {
                hot.flags & !PINNED
            };
            view.pinned = pinned;
        });
    }

    /// One more instance bound to the slot; binding one un-releases it.
    pub fn bind(&mut self, idx: SlotIdx) {
        self.update(idx, |hot, view| {
            hot.instances += 1;
            hot.flags &= !RELEASED;
            view.instances = hot.instances;
            view.released = false;
        });
    }

    pub fn unbind(&mut self, idx: SlotIdx) {
        self.update(idx, |hot, view| {
            assert!(hot.instances > 0, "unbinding from an empty slot");
            hot.instances -= 1;
            view.instances = hot.instances;
        });
    }

    fn accel_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.accel_ids.get(name) {
            return id;
        }
        let name: Arc<str> = Arc::from(name);
        let entry = Accel {
            name: name.clone(),
            holders: Vec::new(),
            spare: 0,
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
            debug_assert_eq!(entry.spare, 0, "spare of an accelerator nobody holds");
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

    /// Whether `a` comes before `b` in allocation order (after "holds the
    /// accelerator"); ties go to the smaller (node, device, slot).
    fn before(&self, policy: &Policy, a: SlotIdx, b: SlotIdx) -> bool {
        let (ha, hb) = (&self.hot[a as usize], &self.hot[b as usize]);
        let util = ha.effective_units().cmp(&hb.effective_units());
        let occupation = ha.instances.cmp(&hb.instances);
        let first = match policy.order {
            Order::Utilization => util.then(occupation),
            Order::Occupation => occupation.then(util),
        };
        first
            .then_with(|| {
                let (sa, sb) = (&self.get(a).unwrap().spec, &self.get(b).unwrap().spec);
                (&sa.node, &sa.device, sa.slot).cmp(&(&sb.node, &sb.device, sb.slot))
            })
            .is_lt()
    }

    /// The filters of steps 1 and 2 that every candidate passes.
    fn eligible(&self, idx: SlotIdx, req: &Request<'_>, ceiling: u32, query: bool) -> bool {
        let hot = &self.hot[idx as usize];
        hot.usable()
            && hot.effective_units() <= ceiling
            && (req.exclude.is_empty() || !req.exclude.contains(&idx))
            && (!query || self.get(idx).expect("live").matches_query(req))
    }

    /// Where one more instance for `req` goes (steps 1–6). Pure: changes nothing.
    pub fn allocate(&self, req: &Request<'_>, policy: &Policy) -> Decision {
        // Steps 1–4 over the slots holding the accelerator: the best of them, if any
        // passes the filters, is the first slot of the whole order.
        let mut best: Option<SlotIdx> = None;
        for idx in self.bindable(req, policy) {
            if best.is_none_or(|b| self.before(policy, idx, b)) {
                best = Some(idx);
            }
        }
        match best {
            Some(idx) => Decision::Bind(idx),
            None => self.reconfigure_step(req, policy),
        }
    }

    /// [`Inventory::allocate`] with power-of-two choices in step 4: of the slots
    /// holding the accelerator that pass the filters, two drawn by `choice` (the
    /// caller's random bits) are compared instead of all of them, and the better one
    /// in [`Policy::order`] is bound. Under utilisations reported now and then, binding
    /// to the least utilised holder sends every instance placed between two reports
    /// to the same slot; two random choices spread them (Mitzenmacher). Steps 5–6 are
    /// unchanged. Pure: changes nothing.
    pub fn allocate_two_choices(
        &self,
        req: &Request<'_>,
        policy: &Policy,
        choice: u64,
    ) -> Decision {
        let candidates: Vec<SlotIdx> = self.bindable(req, policy).collect();
        let n = candidates.len() as u64;
        let pick = match n {
            0 => return self.reconfigure_step(req, policy),
            1 => candidates[0],
            _ => {
                let a = (choice % n) as usize;
                let mut b = ((choice / n) % (n - 1)) as usize;
                if b >= a {
                    b += 1;
                }
                debug_assert!(a != b && b < candidates.len());
                let (a, b) = (candidates[a], candidates[b]);
                if self.before(policy, a, b) {
                    a
                } else {
                    b
                }
            }
        };
        Decision::Bind(pick)
    }

    /// The slots holding `req`'s accelerator (and hash) that pass the filters of
    /// steps 1 and 2: the candidates of step 4.
    fn bindable<'s>(
        &'s self,
        req: &'s Request<'_>,
        policy: &Policy,
    ) -> impl Iterator<Item = SlotIdx> + 's {
        let ceiling = to_units(policy.ceiling);
        let query = req.backend.is_some() || req.vendor.is_some() || req.node.is_some();
        self.holders(req.accelerator)
            .iter()
            .copied()
            .filter(move |&idx| {
                self.eligible(idx, req, ceiling, query)
                    && req
                        .hash
                        .is_none_or(|h| *self.get(idx).expect("live").spec.hash == *h)
            })
    }

    /// Steps 5 and 6: the first slot in order whose load the other slots holding its
    /// accelerator can take over, or `NoDevice`.
    fn reconfigure_step(&self, req: &Request<'_>, policy: &Policy) -> Decision {
        if req.reconfigure == Reconfigure::Never {
            return Decision::NoDevice;
        }
        let ceiling = to_units(policy.ceiling);
        let query = req.backend.is_some() || req.vendor.is_some() || req.node.is_some();
        let mut best: Option<SlotIdx> = None;
        for (i, hot) in self.hot.iter().enumerate() {
            let idx = i as SlotIdx;
            if !hot.usable()
                || hot.flags & PINNED != 0
                || (req.reconfigure == Reconfigure::EmptyOnly && hot.instances > 0)
                || best.is_some_and(|b| !self.before(policy, idx, b))
                || !self.eligible(idx, req, ceiling, query)
                || (hot.flags & HAS_CATALOG != 0
                    && !self.get(idx).expect("live").can_hold(req.accelerator))
            {
                continue;
            }
            let load = hot.effective_units() as i64;
            let others = self.accels[hot.accel as usize].spare - hot.spare();
            if load == 0 || others >= load {
                best = Some(idx);
            }
        }
        match best {
            Some(idx) => Decision::Reconfigure(idx),
            None => Decision::NoDevice,
        }
    }

    /// Checks the indexes against the slots (tests and debug assertions).
    pub fn check_consistency(&self) {
        let mut spare = vec![0i64; self.accels.len()];
        for (idx, slot) in self.iter() {
            let hot = &self.hot[idx as usize];
            let entry = &self.accels[hot.accel as usize];
            assert_eq!(*entry.name, *slot.spec.accelerator);
            assert!(entry.holders.contains(&idx));
            assert_eq!(self.find(&slot.spec.node, slot.spec.slot), Some(idx));
            assert_eq!(hot.instances, slot.instances);
            assert_eq!(hot.units, to_units(slot.utilization));
            assert_eq!(hot.flags & READY != 0, slot.ready);
            assert_eq!(hot.flags & RECONFIGURING != 0, slot.reconfiguring);
            assert_eq!(hot.flags & RELEASED != 0, slot.released);
            assert_eq!(hot.flags & PINNED != 0, slot.pinned);
            spare[hot.accel as usize] += hot.spare();
        }
        for &a in self.accel_ids.values() {
            assert_eq!(
                self.accels[a as usize].spare, spare[a as usize],
                "spare of {a}"
            );
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
