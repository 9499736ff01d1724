//! Dynamic batching, the parts that know tensors and nothing of queues: the policy a
//! model declares ([`Policy`], Triton's `dynamic_batching`), and how the payloads of
//! several calls join along the batch axis into one call ([`join`]) and how that
//! call's output splits back, call by call ([`split`]).
//!
//! A model's payload is its inputs tensor after tensor, each `[batch, dims…]`
//! row-major (see [`crate::tensors`]). Every dim but the batch axis is fixed, so two
//! calls of one model always agree on the rest of the shape: joining is, for each
//! input, the calls' rows one call after the other; splitting is the same walk over
//! the outputs. Which calls join, and when, is the node's (its slot's batcher).

use std::time::Duration;

use crate::tensors::Tensors;
use crate::{bad, CallError};

/// What a timed-out call gets (Triton's `timeout_action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Answered without running (Triton's `REJECT`, the default).
    #[default]
    Reject,
    /// Kept, and run when its turn comes (Triton's `DELAY`).
    Delay,
}

/// The queue policy of a model's calls (Triton's `default_queue_policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueuePolicy {
    pub timeout_action: TimeoutAction,
    /// How long a call may wait before [`QueuePolicy::timeout_action`] applies;
    /// zero: no timeout.
    pub default_timeout: Duration,
    /// Whether a call may ask for a timeout of its own.
    pub allow_timeout_override: bool,
    /// Most calls of the model queued at a slot; zero: only the slot's own bounds.
    pub max_queue_size: usize,
}

/// A model's dynamic batching, checked: every field within its bound (the model's
/// config refuses the rest, naming the key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Most items one device call carries: the model's `max_batch_size`.
    pub max_batch_size: usize,
    /// Batch sizes dispatched at once when reached; ascending, each within
    /// `1..=max_batch_size`. Empty: the largest is `max_batch_size`.
    pub preferred_batch_sizes: Vec<usize>,
    /// How long the oldest call of a batch being formed waits for more.
    pub max_queue_delay: Duration,
    /// Number of priority levels (Triton's `priority_levels`); 0 or 1: one level.
    pub priority_levels: u32,
    /// The level of a call that names none.
    pub default_priority_level: u32,
    pub queue_policy: QueuePolicy,
}

impl Policy {
    /// The batch size dispatched without waiting for the delay: the largest preferred
    /// size, or `max_batch_size` when none is preferred.
    pub fn dispatch_size(&self) -> usize {
        let size = self
            .preferred_batch_sizes
            .last()
            .copied()
            .unwrap_or(self.max_batch_size);
        debug_assert!(size >= 1 && size <= self.max_batch_size);
        size
    }
}

/// Joins the payloads `calls` of one model (`tensors`, with a batch axis) into the
/// payload of one call carrying all their items, in order, into `joined` (cleared
/// first). Returns each call's batch size. Refused when a payload is not a whole
/// number of items or the sum is over `max_batch_size`.
pub fn join(
    tensors: &Tensors,
    calls: &[&[u8]],
    joined: &mut Vec<u8>,
) -> Result<Vec<usize>, CallError> {
    assert!(
        tensors.max_batch_size > 0,
        "only a model with a batch axis joins calls"
    );
    let mut sizes = Vec::with_capacity(calls.len());
    for payload in calls {
        sizes.push(tensors.batch_of(payload.len())?);
    }
    let total: usize = sizes.iter().sum();
    if total > tensors.max_batch_size as usize {
        return bad(format!(
            "{total} items joined, more than max_batch_size {}",
            tensors.max_batch_size
        ));
    }
    joined.clear();
    joined.reserve(total * tensors.input_item_bytes());
    let mut offsets = vec![0usize; calls.len()];
    for spec in &tensors.inputs {
        for ((payload, &size), at) in calls.iter().zip(&sizes).zip(offsets.iter_mut()) {
            let bytes = spec.item_bytes() * size;
            joined.extend_from_slice(&payload[*at..*at + bytes]);
            *at += bytes;
        }
    }
    debug_assert_eq!(joined.len(), total * tensors.input_item_bytes());
    debug_assert!(offsets.iter().zip(calls).all(|(at, p)| *at == p.len()));
    Ok(sizes)
}

/// Splits `output`, the result of a joined call of `sizes` items per call, back into
/// each call's own output (`outs[i]` cleared, then its rows of every output tensor).
pub fn split(
    tensors: &Tensors,
    output: &[u8],
    sizes: &[usize],
    outs: &mut [Vec<u8>],
) -> Result<(), CallError> {
    assert_eq!(sizes.len(), outs.len(), "one output per call");
    let total: usize = sizes.iter().sum();
    let want = total * tensors.output_item_bytes();
    if output.len() != want {
        return Err(CallError::Internal(format!(
            "a batch of {total} items gave {} bytes of output, {want} expected",
            output.len()
        )));
    }
    for out in outs.iter_mut() {
        out.clear();
    }
    let mut at = 0;
    for spec in &tensors.outputs {
        for (&size, out) in sizes.iter().zip(outs.iter_mut()) {
            let bytes = spec.item_bytes() * size;
            out.extend_from_slice(&output[at..at + bytes]);
            at += bytes;
        }
    }
    debug_assert_eq!(at, output.len(), "every byte of the output went to a call");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensors::{DataType, TensorSpec};

    fn two_by_two() -> Tensors {
        let spec = |name: &str, dims: Vec<u64>| TensorSpec {
            name: name.into(),
            datatype: DataType::Uint8,
            dims,
        };
        Tensors {
            inputs: vec![spec("a", vec![2]), spec("b", vec![1])],
            outputs: vec![spec("x", vec![1]), spec("y", vec![3])],
            max_batch_size: 4,
        }
    }

    #[test]
    fn calls_join_tensor_by_tensor_and_split_back() {
        let t = two_by_two();
        // Call 1: one item (a = [1,2], b = [3]); call 2: two items.
        let one: &[u8] = &[1, 2, 3];
        let two: &[u8] = &[4, 5, 6, 7, 8, 9];
        let mut joined = Vec::new();
        let sizes = join(&t, &[one, two], &mut joined).unwrap();
        assert_eq!(sizes, [1, 2]);
        assert_eq!(joined, [1, 2, 4, 5, 6, 7, 3, 8, 9]);
        // Output: x of 3 items, then y of 3 items.
        let output = [10, 11, 12, 20, 21, 22, 30, 31, 32, 40, 41, 42];
        let mut outs = vec![Vec::new(), vec![99]];
        split(&t, &output, &sizes, &mut outs).unwrap();
        assert_eq!(outs[0], [10, 20, 21, 22]);
        assert_eq!(outs[1], [11, 12, 30, 31, 32, 40, 41, 42]);
    }

    #[test]
    fn joins_over_the_bound_and_partial_items_are_refused() {
        let t = two_by_two();
        let mut joined = Vec::new();
        let three: &[u8] = &[0; 9];
        let two: &[u8] = &[0; 6];
        assert!(join(&t, &[three, two], &mut joined).is_err());
        assert!(join(&t, &[&[0u8; 4][..]], &mut joined).is_err());
        let mut outs = vec![Vec::new()];
        assert!(split(&t, &[0; 3], &[1], &mut outs).is_err());
    }

    #[test]
    fn the_dispatch_size_is_the_largest_preferred_or_the_max() {
        let mut p = Policy {
            max_batch_size: 64,
            preferred_batch_sizes: vec![],
            max_queue_delay: Duration::ZERO,
            priority_levels: 0,
            default_priority_level: 0,
            queue_policy: QueuePolicy::default(),
        };
        assert_eq!(p.dispatch_size(), 64);
        p.preferred_batch_sizes = vec![4, 16];
        assert_eq!(p.dispatch_size(), 16);
    }
}
