//! `topk`: the `k` largest of `n` little-endian `i32`, descending, duplicates kept.
//!
//! For `k` well below `n` (the common case: "the ten best scores of a million") the
//! values are scanned once against a threshold, the smallest value that is still
//! among the best `k` seen so far. Only values above it are kept; when `2k` have been
//! kept, a linear-time selection cuts them back to `k` and raises the threshold. Each
//! cut costs `O(k)` and follows `k` kept values, so the scan is `O(n)` even for an
//! ascending input where every value is kept, and for random input it is a
//! compare-and-skip over vectors of eight values at memory speed. Memory is `2k`
//! values whatever `n` is.

/// Values examined per step of the scan: one 256-bit vector of `i32`.
const LANES: usize = 8;

fn i32_at(bytes: &[u8], index: usize) -> i32 {
    i32::from_le_bytes(bytes[index * 4..index * 4 + 4].try_into().expect("4 bytes"))
}

fn descending(a: &i32, b: &i32) -> std::cmp::Ordering {
    b.cmp(a)
}

/// Writes the `min(k, n)` largest values of `input` (a multiple of 4 bytes), descending,
/// as little-endian `i32` into `out`, which is cleared first. `k >= 1`.
pub(super) fn topk(input: &[u8], k: usize, out: &mut Vec<u8>) {
    assert!(k >= 1 && input.len() % 4 == 0);
    let n = input.len() / 4;
    let mut best = if k.saturating_mul(2) >= n {
        // Most of the input is wanted anyway: take it all and select once.
        let mut all: Vec<i32> = (0..n).map(|i| i32_at(input, i)).collect();
        if k < n {
            all.select_nth_unstable_by(k - 1, descending);
            all.truncate(k);
        }
        all
    } else {
        scan(input, k)
    };
    best.sort_unstable_by(descending);
    out.clear();
    out.reserve(best.len() * 4);
    for v in best {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// The `k` largest values of `input` in no particular order, for `2k < n`.
fn scan(input: &[u8], k: usize) -> Vec<i32> {
    let cap = 2 * k;
    let mut kept: Vec<i32> = Vec::with_capacity(cap);
    kept.extend((0..k).map(|i| i32_at(input, i)));
    // Invariant: `kept` holds at least k values, and the k largest of the values seen
    // so far are among the values of `kept` that are >= `threshold`. A value equal to
    // the threshold can be dropped: `kept` already has k values at least that large.
    let mut threshold = *kept.iter().min().expect("k >= 1");
    let keep = |v: i32, kept: &mut Vec<i32>, threshold: &mut i32| {
        kept.push(v);
        if kept.len() == cap {
            kept.select_nth_unstable_by(k - 1, descending);
            kept.truncate(k);
            *threshold = kept[k - 1];
        }
    };
    let rest = &input[k * 4..];
    let mut chunks = rest.chunks_exact(LANES * 4);
    for chunk in &mut chunks {
        let mut values = [0i32; LANES];
        let mut any_above = false;
        for (lane, v) in values.iter_mut().enumerate() {
            *v = i32_at(chunk, lane);
            any_above |= *v > threshold;
        }
        if any_above {
            for v in values {
                if v > threshold {
                    keep(v, &mut kept, &mut threshold);
                }
            }
        }
    }
    for tail in chunks.remainder().chunks_exact(4) {
        let v = i32::from_le_bytes(tail.try_into().expect("4 bytes"));
        if v > threshold {
            keep(v, &mut kept, &mut threshold);
        }
    }
    if kept.len() > k {
        kept.select_nth_unstable_by(k - 1, descending);
        kept.truncate(k);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference;
    use proptest::prelude::*;

    fn run(values: &[i32], k: usize) -> Vec<i32> {
        let input: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = vec![0xAA; 3];
        topk(&input, k, &mut out);
        (0..out.len() / 4).map(|i| i32_at(&out, i)).collect()
    }

    #[test]
    fn small_cases() {
        assert_eq!(run(&[], 1), Vec::<i32>::new());
        assert_eq!(run(&[5], 1), [5]);
        assert_eq!(run(&[5], 7), [5]);
        assert_eq!(run(&[5, -3, 9, 9, 0, 2], 3), [9, 9, 5]);
        assert_eq!(run(&[5, -3, 9, 9, 0, 2], 6), [9, 9, 5, 2, 0, -3]);
        assert_eq!(run(&[i32::MIN; 20], 3), [i32::MIN; 3]);
        assert_eq!(run(&[i32::MAX, i32::MIN, 0], 2), [i32::MAX, 0]);
    }

    #[test]
    fn adversarial_orders_and_duplicates() {
        for n in [17, 100, 1000] {
            let ascending: Vec<i32> = (0..n).collect();
            let descending: Vec<i32> = (0..n).rev().collect();
            let plateaus: Vec<i32> = (0..n).map(|i| i / 7).collect();
            let alternating: Vec<i32> = (0..n).map(|i| if i % 2 == 0 { i } else { -i }).collect();
            for values in [ascending, descending, plateaus, alternating] {
                for k in [
                    1,
                    2,
                    3,
                    8,
                    9,
                    n as usize / 2 - 1,
                    n as usize / 2,
                    n as usize,
                ] {
                    assert_eq!(run(&values, k), reference::topk(&values, k), "n {n} k {k}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn matches_reference(
            values in prop::collection::vec(prop_oneof![any::<i32>(), -5i32..5], 0..400),
            k in 1usize..50,
        ) {
            prop_assert_eq!(run(&values, k), reference::topk(&values, k));
        }
    }
}
