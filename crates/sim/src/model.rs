//! What the simulator models because it is not code: a device's service time, the
//! random numbers behind it and behind the clients, and the stand-in accelerator the
//! node's slots hold (it computes nothing; the device model says how long it took).
//!
//! Not for: any decision the node makes (queueing, admission, slot choice, pools) —
//! those are the node's own code, called by `engine`.

use std::sync::Arc;

use accel::{Accelerator, CallError, Descriptor, ParamBlock};
use netaccel_node::device::{Loaded, Ran};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::scenario::Service;

/// The seeded generator: one stream per run, drawn in event order, so the same seed
/// gives the same run.
pub struct Random(ChaCha8Rng);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(ChaCha8Rng::seed_from_u64(seed))
    }

    /// Uniform in (0, 1]: never 0, so its logarithm is finite.
    pub fn unit(&mut self) -> f64 {
        let u = ((self.0.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64);
        debug_assert!(u > 0.0 && u <= 1.0);
        u
    }

    /// Exponential with mean `mean`.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }

    /// Standard normal (Box–Muller; one of the pair).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// An index drawn by the cumulative weights `cumulative` (last = total).
    pub fn pick(&mut self, cumulative: &[f64]) -> usize {
        debug_assert!(!cumulative.is_empty());
        if cumulative.len() == 1 {
            return 0;
        }
        let total = cumulative[cumulative.len() - 1];
        let x = self.unit() * total;
        cumulative
            .iter()
            .position(|&c| x <= c)
            .unwrap_or(cumulative.len() - 1)
    }
}

/// A device's time in ns for a call of `bytes`.
pub fn service_ns(service: &Service, bytes: u32, rng: &mut Random) -> u64 {
    let us = match *service {
        Service::Constant { us } => us,
        Service::Exponential { mean_us } => rng.exponential(mean_us),
        Service::Lognormal { median_us, sigma } => median_us * (sigma * rng.normal()).exp(),
        Service::Linear {
            base_us,
            ns_per_byte,
        } => base_us + f64::from(bytes) * ns_per_byte / 1000.0,
    };
    debug_assert!(us >= 0.0, "a service time is not negative");
    (us * 1000.0).round() as u64
}

/// The stand-in for an accelerator: the catalog entry the node's slots and dispatcher
/// see (name, numeric id), with a kernel that computes nothing.
pub struct SimAccelerator {
    descriptor: Descriptor,
    /// May run on a network thread: its work estimate is the call's bytes, which the
    /// node compares with `inline_work_max`.
    inline: bool,
}

impl SimAccelerator {
    pub fn new(id: u16, name: &str, inline: bool) -> SimAccelerator {
        SimAccelerator {
            descriptor: Descriptor {
                id,
                name: name.to_string(),
                hash: format!("sim-{id}"),
                params: Vec::new(),
            },
            inline,
        }
    }
}

/// Where the engine writes a call's number in its parameters (bytes 0..4) and its
/// size (bytes 4..8): the slot hands calls back by their parameters.
pub fn sim_params(call: u32, bytes: u32) -> ParamBlock {
    let mut params = [0u8; accel::PARAMS_LEN];
    params[..4].copy_from_slice(&call.to_le_bytes());
    params[4..8].copy_from_slice(&bytes.to_le_bytes());
    params
}

impl Accelerator for SimAccelerator {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }
    fn check(&self, _: &ParamBlock, _: Option<usize>) -> Result<(), CallError> {
        Ok(())
    }
    /// No estimate (the slot's wait bound then uses its measured mean call time),
    /// but for an inline kernel: its bytes, as the node's CPU kernels estimate.
    fn work_estimate(&self, params: &ParamBlock, _: usize) -> u64 {
        if !self.inline {
            return 0;
        }
        u64::from(u32::from_le_bytes(
            params[4..8].try_into().expect("4 bytes"),
        ))
    }
    fn run(&self, _: &ParamBlock, _: &[u8], out: &mut Vec<u8>) -> Result<(), CallError> {
        out.clear();
        Ok(())
    }
}

/// The loaded image of a [`SimAccelerator`], its time measured by the slot on the
/// virtual clock. It may run on a network thread only when the scenario says the
/// accelerator is `inline` (a CPU kernel); then the engine spends its service time on
/// that thread.
pub struct SimImage {
    pub accel: Arc<dyn Accelerator>,
    pub inline: bool,
}

impl Loaded for SimImage {
    fn run(&self, params: &ParamBlock, input: &[u8], out: &mut Vec<u8>) -> Result<Ran, CallError> {
        self.accel.run(params, input, out)?;
        Ok(Ran { exec_ns: None })
    }
    fn inline_ok(&self) -> bool {
        self.inline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_numbers_and_means_come_out() {
        let (mut a, mut b) = (Random::new(7), Random::new(7));
        let xs: Vec<f64> = (0..1000).map(|_| a.exponential(3.0)).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.exponential(3.0)).collect();
        assert_eq!(xs, ys);
        let mut r = Random::new(1);
        let n = 200_000;
        let mean = (0..n).map(|_| r.exponential(2.0)).sum::<f64>() / n as f64;
        assert!((mean - 2.0).abs() < 0.02, "{mean}");
        let z = (0..n).map(|_| r.normal()).sum::<f64>() / n as f64;
        assert!(z.abs() < 0.01, "{z}");
        let picks = (0..n).filter(|_| r.pick(&[1.0, 4.0]) == 0).count();
        assert!((picks as f64 / n as f64 - 0.25).abs() < 0.005);
    }

    #[test]
    fn service_times_follow_their_kind() {
        let mut r = Random::new(3);
        assert_eq!(service_ns(&Service::Constant { us: 2.5 }, 0, &mut r), 2500);
        let linear = Service::Linear {
            base_us: 1.0,
            ns_per_byte: 0.5,
        };
        assert_eq!(service_ns(&linear, 4000, &mut r), 3000);
        let ln = Service::Lognormal {
            median_us: 10.0,
            sigma: 0.0,
        };
        assert_eq!(service_ns(&ln, 0, &mut r), 10_000);
    }
}
