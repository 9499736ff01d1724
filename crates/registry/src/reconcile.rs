//! The registry's reconcile loops: level-triggered passes that compare what is with
//! what should be and act, correct when run twice or after a restart.
//!
//! - [`Registry::expire_leases`] (every tenth of a lease): a ready node whose lease
//!   ended is lost, and its instances are migrated; a node lost for `forget_lost` is
//!   forgotten. A node renews every third of a lease, so it is marked lost at most one
//!   lease plus a tenth after its last renewal.
//! - [`Registry::rebalance`] (every `rebalance_interval`): retries unbound instances
//!   (reconfiguring only empty slots, so it never displaces one instance to place
//!   another); moves one instance off each slot above the ceiling that has two or
//!   more, through the full algorithm — to a slot holding the accelerator below the
//!   ceiling or, by reconfiguring a slot whose load can be redistributed, scaling the
//!   accelerator out; releases slots unused for `release_unused` when configured.
//!   Each pass handles at most `rebalance_moves_max` instances, and a slot an instance
//!   left is left alone for `rebalance_cooldown` so its utilisation can show the move.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::info;

use crate::alloc::{Reconfigure, SlotIdx};
use crate::model::NodeState;
use crate::registry::{Alloc, Registry};

impl Registry {
    /// Marks nodes whose lease ended as lost and migrates their instances.
    pub async fn expire_leases(self: &Arc<Self>, now: Instant) {
        let followups = {
            let mut st = self.lock().await;
            let expired: Vec<String> = st
                .nodes()
                .filter(|n| n.record.state == NodeState::Ready && n.lease_deadline <= now)
                .map(|n| n.record.name.clone())
                .collect();
            let forgotten: Vec<String> = match self.config.forget_lost {
                Some(after) => st
                    .nodes()
                    .filter(|n| n.lost_since.is_some_and(|t| now.duration_since(t) >= after))
                    .map(|n| n.record.name.clone())
                    .collect(),
                None => Vec::new(),
            };
            let mut followups = Vec::new();
            for name in &expired {
                let displaced = st.set_lost(name, now);
                info!(node = %name, instances = ?displaced,
                    "node lost: no lease renewal for {} ms; migrating its instances",
                    self.config.lease.as_millis());
                followups.extend(self.plan_migration(&mut st, &displaced, &[]));
            }
            for name in &forgotten {
                info!(node = %name, "forgetting a node lost for too long");
                let displaced = st.remove_node(name);
                followups.extend(self.plan_migration(&mut st, &displaced, &[]));
            }
            if self.commit(&mut st).await.is_err() {
                return;
            }
            followups
        };
        self.run_followups(followups, Vec::new()).await;
    }

    /// One pass of the rebalancer (see the module documentation).
    pub async fn rebalance(self: &Arc<Self>, now: Instant) {
        let budget = self.config.rebalance_moves_max;
        let (unbound, hot) = {
            let mut st = self.lock().await;
            st.note_unused(now);
            if let Some(after) = self.config.release_unused {
                let release: Vec<SlotIdx> = st
                    .inventory
                    .iter()
                    .filter(|(idx, slot)| {
                        !slot.released
                            && st
                                .soft(*idx)
                                .unused_since
                                .is_some_and(|t| now.duration_since(t) >= after)
                    })
                    .map(|(idx, _)| idx)
                    .collect();
                for idx in release {
                    info!(slot = ?st.slot_ref(idx), "releasing a slot no instance used for {} ms", after.as_millis());
                    st.inventory.set_released(idx, true);
                }
            }
            let unbound = self.unbound(&st, budget);
            let mut hot: Vec<(SlotIdx, String)> = Vec::new();
            for (idx, slot) in st.inventory.iter() {
                if hot.len() + unbound.len() >= budget {
                    break;
                }
                let cooling = st.soft(idx).cooldown_until.is_some_and(|t| now < t);
                if slot.relievable(&self.config.policy) && !cooling {
                    let movable = st.bound_to(idx).into_iter().rev().find(|id| {
                        !self.is_allocating(id) && st.instance(id).is_some_and(|i| !i.pinned)
                    });
                    if let Some(id) = movable {
                        hot.push((idx, id));
                    }
                }
            }
            for (idx, _) in &hot {
                st.soft_mut(*idx).cooldown_until = Some(now + self.config.rebalance_cooldown);
            }
            (unbound, hot)
        };
        self.place(unbound).await;
        for (idx, id) in hot {
            let how = Alloc {
                exclude: vec![idx],
                unbind_on_failure: false,
                ..Alloc::default()
            };
            if self.allocate(&id, how).await.is_ok() {
                info!(instance = %id, "moved off a slot above the utilisation ceiling");
                self.metrics.migrations(1);
            }
        }
    }

    /// Up to `limit` unbound instances nobody is allocating now (pinned ones are
    /// placed by whoever pinned them, not here).
    fn unbound(&self, st: &crate::state::State, limit: usize) -> Vec<String> {
        st.instances()
            .filter(|i| i.binding.is_none() && !i.pinned && !self.is_allocating(&i.id))
            .map(|i| i.id.clone())
            .take(limit)
            .collect()
    }

    /// Allocates unbound instances, reconfiguring only slots nobody is bound to.
    async fn place(self: &Arc<Self>, ids: Vec<String>) {
        for id in ids {
            let how = Alloc {
                reconfigure: Reconfigure::EmptyOnly,
                ..Alloc::default()
            };
            if self.allocate(&id, how).await.is_ok() {
                info!(instance = %id, "unbound instance placed");
            }
        }
    }

    /// Places unbound instances now (a node came or came back) rather than at the
    /// next rebalancing pass.
    pub async fn place_unbound(self: &Arc<Self>) {
        let ids = {
            let st = self.lock().await;
            self.unbound(&st, self.config.rebalance_moves_max)
        };
        self.place(ids).await;
    }

    /// Runs both loops until the runtime stops.
    pub fn spawn_reconcilers(self: &Arc<Self>) {
        let registry = self.clone();
        let tick = (self.config.lease / 10).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                // Only the leader acts; a follower's cache follows the store.
                if registry.is_leader() {
                    registry.expire_leases(Instant::now()).await;
                }
            }
        });
        let registry = self.clone();
        let period = self.config.rebalance_interval;
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                interval.tick().await;
                if registry.is_leader() {
                    registry.rebalance(Instant::now()).await;
                }
            }
        });
    }
}
