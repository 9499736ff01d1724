//! Commands the ICD holds back because they wait for a user event that is not set.
//!
//! User events never reach the node: a device runs one task at a time to its end, so a
//! task that waited there for a client's user event would hold the device from every
//! other client for as long as the client pleases. Instead the ICD keeps back exactly
//! the commands that depend on such an event and sends everything else as usual, so a
//! blocking call on an unrelated queue returns at once, as natively. A command is held
//! when
//!
//! - its wait list names a user event that is not set, or an event of a held command
//!   (so dependence through markers, barriers and other queues is followed);
//! - its queue is in order and has held commands (it runs after them);
//! - its queue is out of order and a barrier on it is held (it runs after the barrier);
//! - it is a marker or barrier without a wait list (it waits for every earlier command
//!   of its queue) and its queue has held commands.
//!
//! When a user event is set, the held commands whose reasons are gone are released in
//! the order they were enqueued and travel in the next task. Whatever they wait for that
//! is not among them ran in an earlier task, which the node completes before it starts a
//! later one, so the node's rule "events of earlier tasks have completed" stays true. A
//! user event set to an error is named in each task that carries a command waiting for
//! it (`Command::UserEvent`), and so are the events of released commands that fail for
//! it, when something that waits for them travels in a later task: the node then fails
//! those commands unrun with `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`.
//!
//! Releases of node objects are held too while anything is held (a held command may use
//! the object), and sent once nothing is held any more.
//!
//! Held commands are kept encoded, write data included, in the application's process:
//! their bytes are bounded ([`Holding::room_for`], [`HELD_BYTES_ENV`]). A write that
//! would be held past the bound fails with `CL_OUT_OF_HOST_MEMORY`; blocking until the
//! event is set instead could wait forever, the calling thread being the one to set it.

use std::collections::{HashMap, HashSet};

use ocl_remote::cl::{self, ClInt};
use ocl_remote::proto::Command;

use crate::node::HostDst;
use crate::object::EventRef;

/// Sets the most bytes of commands (write data included) the ICD holds back for user
/// events not set (default [`HELD_BYTES_DEFAULT`]).
pub const HELD_BYTES_ENV: &str = "NETACCEL_OPENCL_HELD_BYTES_MAX";
/// 1 GiB: a program can hold back writes of this many bytes by default, a bound of
/// the client's own memory (the node's `buffer_bytes_max` bounds what it holds there).
pub const HELD_BYTES_DEFAULT: usize = 1 << 30;

/// The bound of [`HELD_BYTES_ENV`], or its default if the variable is unset or not a
/// number.
pub fn held_bytes_max_from_env() -> usize {
    std::env::var(HELD_BYTES_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(HELD_BYTES_DEFAULT)
}

/// What the holding rules look at in a command.
pub struct Shape<'a> {
    queue: u64,
    event: u64,
    waits: &'a [u64],
    /// A marker or barrier without a wait list: it waits for its whole queue.
    whole_queue: bool,
    /// A barrier: every later command of its queue waits for it.
    barrier: bool,
}

impl<'a> Shape<'a> {
    /// A command that is neither a marker nor a barrier (a write, say) on `queue`,
    /// waiting for `waits`; its own event does not matter to the rules.
    pub fn plain(queue: u64, waits: &'a [u64]) -> Shape<'a> {
        Shape {
            queue,
            event: 0,
            waits,
            whole_queue: false,
            barrier: false,
        }
    }

    pub fn of(command: &Command<'_>, waits: &'a [u64]) -> Shape<'a> {
        let marker = matches!(command, Command::Marker { .. });
        let barrier = matches!(command, Command::Barrier { .. });
        Shape {
            queue: command.queue(),
            event: command.event(),
            waits,
            whole_queue: (marker || barrier) && waits.is_empty(),
            barrier,
        }
    }
}

/// A command held back, already encoded as an item of an `Enqueue` frame.
pub struct HeldCommand {
    queue: u64,
    event: u64,
    waits: Vec<u64>,
    whole_queue: bool,
    barrier: bool,
    /// The item's bytes, write data included.
    pub encoded: Vec<u8>,
    /// Bytes of write data in it.
    pub data_len: usize,
    pub event_ref: Option<EventRef>,
    pub read: Option<(u64, HostDst)>,
}

impl HeldCommand {
    pub fn queue(&self) -> u64 {
        self.queue
    }
}

/// A released command and the failed events (id, status) its task must name for it.
pub type Released = (HeldCommand, Vec<(u64, ClInt)>);

pub struct Holding {
    /// In the order they were enqueued.
    commands: Vec<HeldCommand>,
    /// Their encoded bytes, at most `bytes_max` but for commands that carry no data
    /// (see [`Holding::room_for`]).
    bytes: usize,
    bytes_max: usize,
    /// Events of held commands.
    events: HashSet<u64>,
    /// Queues with held commands.
    queues: HashSet<u64>,
    /// Queues whose every later command is held (see the module doc).
    blocked: HashSet<u64>,
    /// The application's out-of-order queues.
    out_of_order: HashSet<u64>,
    /// User events that were not set when a command waiting for them was enqueued.
    users: HashMap<u64, EventRef>,
    /// Events of released commands that fail because something they wait for failed.
    failing: HashMap<u64, ClInt>,
    /// Ids whose `Release` waits until nothing is held.
    releases: Vec<u64>,
}

impl Holding {
    /// Holds commands of at most `bytes_max` bytes.
    pub fn new(bytes_max: usize) -> Holding {
        Holding {
            commands: Vec::new(),
            bytes: 0,
            bytes_max,
            events: HashSet::new(),
            queues: HashSet::new(),
            blocked: HashSet::new(),
            out_of_order: HashSet::new(),
            users: HashMap::new(),
            failing: HashMap::new(),
            releases: Vec::new(),
        }
    }

    /// Whether a command carrying `data_len` bytes of data may be held besides what is
    /// held: the bytes held stay within the bound. Checked by the calls that carry data
    /// (writes) before they accept the command; commands without data (kernels,
    /// copies, markers, an unmap's write of the ICD's own mapping) are always taken,
    /// their bytes counted.
    pub fn room_for(&self, data_len: usize) -> bool {
        self.bytes
            .checked_add(data_len)
            .is_some_and(|total| total <= self.bytes_max)
    }

    pub fn add_queue(&mut self, queue: u64, out_of_order: bool) {
        if out_of_order {
            self.out_of_order.insert(queue);
        }
    }

    pub fn forget_queue(&mut self, queue: u64) {
        self.out_of_order.remove(&queue);
    }

    /// A command about to be enqueued waits for the user event `event`, not set.
    pub fn watch_user_event(&mut self, event: EventRef) {
        self.users.insert(event.id(), event);
    }

    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Whether commands of `queue` are held.
    pub fn holds_queue(&self, queue: u64) -> bool {
        self.queues.contains(&queue)
    }

    pub fn must_hold(&self, s: &Shape<'_>) -> bool {
        self.blocked.contains(&s.queue)
            || (s.whole_queue && self.queues.contains(&s.queue))
            || s.waits.iter().any(|w| {
                self.events.contains(w)
                    || self
                        .users
                        .get(w)
                        .is_some_and(|u| u.status() > cl::CL_COMPLETE)
            })
    }

    pub fn hold(
        &mut self,
        s: &Shape<'_>,
        encoded: Vec<u8>,
        data_len: usize,
        event_ref: Option<EventRef>,
        read: Option<(u64, HostDst)>,
    ) {
        let command = HeldCommand {
            queue: s.queue,
            event: s.event,
            waits: s.waits.to_vec(),
            whole_queue: s.whole_queue,
            barrier: s.barrier,
            encoded,
            data_len,
            event_ref,
            read,
        };
        self.note(&command);
        self.bytes += command.encoded.len();
        self.commands.push(command);
    }

    fn note(&mut self, c: &HeldCommand) {
        if c.event != 0 {
            self.events.insert(c.event);
        }
        self.queues.insert(c.queue);
        if c.barrier || !self.out_of_order.contains(&c.queue) {
            self.blocked.insert(c.queue);
        }
    }

    /// Holds the `Release` of `id` back if anything is held; returns whether it did.
    pub fn defer_release(&mut self, id: u64) -> bool {
        if self.commands.is_empty() {
            return false;
        }
        self.releases.push(id);
        true
    }

    /// Takes the commands that no longer have a reason to be held, in order, and, once
    /// nothing is held, the deferred releases.
    pub fn release(&mut self) -> (Vec<Released>, Vec<u64>) {
        let commands = std::mem::take(&mut self.commands);
        self.bytes = 0;
        self.events.clear();
        self.queues.clear();
        self.blocked.clear();
        let mut released = Vec::new();
        for c in commands {
            let shape = Shape {
                queue: c.queue,
                event: c.event,
                waits: &c.waits,
                whole_queue: c.whole_queue,
                barrier: c.barrier,
            };
            if self.must_hold(&shape) {
                self.note(&c);
                self.bytes += c.encoded.len();
                self.commands.push(c);
                continue;
            }
            let failures: Vec<(u64, ClInt)> = c
                .waits
                .iter()
                .filter_map(|w| {
                    let status = match self.users.get(w) {
                        Some(u) => u.status(),
                        None => *self.failing.get(w)?,
                    };
                    (status < cl::CL_COMPLETE).then_some((*w, status))
                })
                .collect();
            if !failures.is_empty() && c.event != 0 {
                self.failing
                    .insert(c.event, cl::CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
            }
            released.push((c, failures));
        }
        let mut releases = Vec::new();
        if self.commands.is_empty() {
            releases = std::mem::take(&mut self.releases);
            self.failing.clear();
            self.users.retain(|_, u| u.status() > cl::CL_COMPLETE);
        }
        (released, releases)
    }

    /// The connection is lost: the held commands, whose events are to be failed.
    /// Commands enqueued later may still be held, and sent (and failed) when their
    /// user events are set, as if the loss had come after.
    pub fn drop_all(&mut self) -> Vec<HeldCommand> {
        self.events.clear();
        self.queues.clear();
        self.blocked.clear();
        self.releases.clear();
        self.bytes = 0;
        std::mem::take(&mut self.commands)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(queue: u64, event: u64) -> Command<'static> {
        Command::Marker { queue, event }
    }

    fn barrier(queue: u64, event: u64) -> Command<'static> {
        Command::Barrier { queue, event }
    }

    fn copy(queue: u64, event: u64) -> Command<'static> {
        Command::Copy {
            queue,
            event,
            src: 1,
            dst: 2,
            src_offset: 0,
            dst_offset: 0,
            size: 4,
        }
    }

    fn hold(h: &mut Holding, c: &Command<'_>, waits: &[u64]) {
        h.hold(&Shape::of(c, waits), vec![c.event() as u8], 0, None, None);
    }

    #[test]
    fn an_in_order_queue_holds_what_follows_a_held_command_and_only_its_own() {
        let mut h = Holding::new(HELD_BYTES_DEFAULT);
        hold(&mut h, &copy(1, 10), &[]);
        assert!(h.must_hold(&Shape::of(&copy(1, 11), &[])));
        assert!(!h.must_hold(&Shape::of(&copy(2, 12), &[])));
        assert!(h.holds_queue(1) && !h.holds_queue(2));
    }

    #[test]
    fn waiting_for_a_held_event_is_held_on_any_queue() {
        let mut h = Holding::new(HELD_BYTES_DEFAULT);
        hold(&mut h, &copy(1, 10), &[]);
        assert!(h.must_hold(&Shape::of(&copy(2, 12), &[10])));
        assert!(h.must_hold(&Shape::of(&marker(3, 13), &[9, 10])));
        assert!(!h.must_hold(&Shape::of(&marker(3, 14), &[9])));
    }

    #[test]
    fn an_out_of_order_queue_holds_only_dependents_markers_without_a_list_and_what_follows_a_barrier(
    ) {
        let mut h = Holding::new(HELD_BYTES_DEFAULT);
        h.add_queue(1, true);
        hold(&mut h, &copy(1, 10), &[]);
        assert!(!h.must_hold(&Shape::of(&copy(1, 11), &[])));
        assert!(!h.must_hold(&Shape::of(&marker(1, 12), &[11])));
        assert!(h.must_hold(&Shape::of(&marker(1, 13), &[])));
        assert!(h.must_hold(&Shape::of(&barrier(1, 14), &[])));
        hold(&mut h, &barrier(1, 14), &[]);
        assert!(h.must_hold(&Shape::of(&copy(1, 15), &[])));
    }

    #[test]
    fn the_bytes_held_stay_within_the_bound_and_leave_with_their_commands() {
        let mut h = Holding::new(10);
        assert!(h.room_for(10) && !h.room_for(11) && !h.room_for(usize::MAX));
        let c = copy(1, 10);
        h.hold(&Shape::of(&c, &[]), vec![0; 6], 4, None, None);
        assert!(h.room_for(4) && !h.room_for(5));
        // Nothing holds it any more (it waits for no user event): released, its bytes
        // go with it.
        let (released, _) = h.release();
        assert_eq!(released.len(), 1);
        assert!(h.room_for(10));
        h.hold(&Shape::of(&c, &[]), vec![0; 10], 8, None, None);
        assert!(!h.room_for(1));
        assert_eq!(h.drop_all().len(), 1);
        assert!(h.room_for(10));
    }

    #[test]
    fn releases_wait_for_the_held_commands_which_leave_in_order() {
        let mut h = Holding::new(HELD_BYTES_DEFAULT);
        assert!(!h.defer_release(7));
        hold(&mut h, &copy(1, 10), &[]);
        hold(&mut h, &copy(2, 11), &[10]);
        assert!(h.defer_release(8));
        let (released, releases) = h.release();
        let order: Vec<u8> = released.iter().map(|(c, _)| c.encoded[0]).collect();
        assert_eq!(order, [10, 11]);
        assert!(released.iter().all(|(_, failures)| failures.is_empty()));
        assert_eq!(releases, [8]);
        assert!(h.is_empty() && !h.holds_queue(1));
    }
}
