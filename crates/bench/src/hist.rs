//! Latency histograms: an HDR histogram in nanoseconds and the summary the reports print.
//!
//! Every latency the tool records goes through [`Latency`]: values from 1 ns to one
//! hour at 3 significant digits (an error of at most 0.1% per value), so a 20 µs
//! median and a 100 ms stall sit in the same histogram without either being rounded
//! away. Percentiles are read with `value_at_quantile`, which returns the highest value
//! equivalent (at that precision) to the value at that rank, the same convention as
//! wrk2 and HdrHistogram's own reports.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency recorded without clamping: one hour in nanoseconds.
const LATENCY_NS_MAX: u64 = 3_600_000_000_000;

/// Significant decimal digits kept per value.
const SIGNIFICANT_DIGITS: u8 = 3;

/// A latency histogram in nanoseconds.
#[derive(Clone, Debug)]
pub struct Latency {
    histogram: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl Latency {
    pub fn new() -> Latency {
        let histogram = Histogram::new_with_bounds(1, LATENCY_NS_MAX, SIGNIFICANT_DIGITS)
            .expect("bounds are valid constants");
        Latency { histogram }
    }

    /// Records one latency. Zero is recorded as 1 ns and values above one hour as one
    /// hour: both are outside what a network call can take, and clamping keeps every
    /// call counted.
    pub fn record(&mut self, latency_ns: u64) {
        self.histogram
            .saturating_record(latency_ns.clamp(1, LATENCY_NS_MAX));
    }

    pub fn add(&mut self, other: &Latency) {
        self.histogram
            .add(&other.histogram)
            .expect("histograms of the same bounds always add");
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The latency at quantile `q` (0..=1) in nanoseconds, 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.histogram.is_empty() {
            return 0;
        }
        self.histogram.value_at_quantile(q)
    }

    pub fn summary(&self) -> Summary {
        let h = &self.histogram;
        if h.is_empty() {
            return Summary::default();
        }
        Summary {
            count: h.len(),
            min_ns: h.min(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }

    /// Points of the cumulative distribution, `(latency_ns, fraction of calls at or
    /// below it)`, one per occupied histogram bucket, thinned to at most `points_max`
    /// points (the last point, the maximum, is always kept). What a CDF plot needs,
    /// in a size that fits a JSON report.
    pub fn cdf(&self, points_max: usize) -> Vec<(u64, f64)> {
        assert!(points_max >= 2, "a CDF needs at least two points");
        let h = &self.histogram;
        if h.is_empty() {
            return Vec::new();
        }
        let all: Vec<(u64, f64)> = h
            .iter_recorded()
            .map(|v| (h.highest_equivalent(v.value_iterated_to()), v.quantile()))
            .collect();
        if all.len() <= points_max {
            return all;
        }
        let step = all.len().div_ceil(points_max - 1);
        let mut thinned: Vec<(u64, f64)> = all.iter().step_by(step).copied().collect();
        if thinned.last() != all.last() {
            thinned.push(*all.last().expect("non-empty"));
        }
        thinned
    }
}

/// Percentiles of one histogram, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub count: u64,
    pub min_ns: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Relative error allowed by 3 significant digits.
    fn close(got: u64, want: u64) -> bool {
        (got as f64 - want as f64).abs() <= want as f64 * 1e-3
    }

    #[test]
    fn percentiles_of_a_uniform_distribution() {
        let mut h = Latency::new();
        for us in 1..=10_000u64 {
            h.record(us * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 10_000);
        assert!(close(s.p50_ns, 5_000_000), "{s:?}");
        assert!(close(s.p90_ns, 9_000_000), "{s:?}");
        assert!(close(s.p99_ns, 9_900_000), "{s:?}");
        assert!(close(s.p999_ns, 9_990_000), "{s:?}");
        assert!(close(s.max_ns, 10_000_000), "{s:?}");
        assert!(close(s.min_ns, 1000), "{s:?}");
        assert!((s.mean_ns - 5_000_500.0).abs() < 5_000.0, "{s:?}");
    }

    #[test]
    fn a_rare_stall_reaches_p999_and_max_but_not_p99() {
        let mut h = Latency::new();
        for _ in 0..9_995 {
            h.record(20_000);
        }
        for _ in 0..5 {
            h.record(100_000_000);
        }
        let s = h.summary();
        assert!(close(s.p99_ns, 20_000), "{s:?}");
        assert!(close(s.p999_ns, 20_000), "{s:?}");
        assert!(close(s.max_ns, 100_000_000), "{s:?}");
        assert!(close(h.quantile_ns(0.9996), 100_000_000));
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let mut h = Latency::new();
        h.record(0);
        h.record(u64::MAX);
        let s = h.summary();
        assert_eq!(s.count, 2);
        assert_eq!(s.min_ns, 1);
        assert!(close(s.max_ns, LATENCY_NS_MAX));
    }

    #[test]
    fn empty_histogram_summarises_to_zeros() {
        let h = Latency::new();
        assert_eq!(h.summary(), Summary::default());
        assert_eq!(h.quantile_ns(0.5), 0);
        assert!(h.cdf(10).is_empty());
    }

    #[test]
    fn merged_histograms_count_every_value() {
        let (mut a, mut b) = (Latency::new(), Latency::new());
        for v in 1..=500u64 {
            a.record(v * 1000);
            b.record((v + 500) * 1000);
        }
        a.add(&b);
        assert_eq!(a.count(), 1000);
        assert!(close(a.summary().p50_ns, 500_000));
    }

    #[test]
    fn cdf_is_monotonic_ends_at_one_and_respects_its_bound() {
        let mut h = Latency::new();
        for v in 1..=100_000u64 {
            h.record(v * 37);
        }
        let cdf = h.cdf(200);
        assert!(cdf.len() <= 201 && cdf.len() >= 100, "{}", cdf.len());
        assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        let last = cdf.last().unwrap();
        assert_eq!(last.1, 1.0);
        assert!(close(last.0, 3_700_000));
    }
}
