//! The shell around a model: one call driven through the stream ports exactly as
//! `spec/rtl-accelerators.md` says, cycle by cycle.
//!
//! The input stream carries the 64-byte header beat, then the payload in 64-byte beats
//! (`tkeep` all ones except on the last, `tlast` on the last; an empty payload is the
//! header beat alone with `tlast`). The output stream is collected beat by beat, the
//! bytes `tkeep` marks, up to `tlast`, whose `tuser` is the status.
//!
//! Back-pressure follows AXI4-Stream: once the shell raises `tvalid` it holds the beat
//! until the design takes it, and `tready` on the output may drop at any cycle. With
//! [`Backpressure::none`] the shell is always ready and never pauses; tests use random
//! pauses from a seed to show that a design is correct whatever the timing.
//!
//! Every call is bounded: past `cycles_max` cycles, or past `output_bytes_max` output
//! bytes, or when the design breaks a rule of the interface, the call ends with a
//! [`Violation`] naming the cause and the design is held in reset, so the next call
//! starts from a clean state. Nothing here can wait forever.

use std::fmt;

use crate::model::{Inputs, Model};
use crate::{BEAT_BYTES, HEADER_BYTES};

/// Cycles `rst_n` is held low after a load and after a failed call (the spec's minimum).
pub const RESET_CYCLES: u64 = 16;

/// Random pauses on the two streams: in each cycle where the shell could send a beat it
/// waits instead with probability `input_pause`, and it drops `m_axis_tready` with
/// probability `output_pause`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backpressure {
    pub input_pause: f64,
    pub output_pause: f64,
    pub seed: u64,
}

impl Backpressure {
    /// No pauses: the stream runs as fast as the design takes and gives it.
    pub fn none() -> Backpressure {
        Backpressure {
            input_pause: 0.0,
            output_pause: 0.0,
            seed: 0,
        }
    }

    /// Random pauses with the same probability on both streams.
    pub fn random(pause: f64, seed: u64) -> Backpressure {
        Backpressure {
            input_pause: pause,
            output_pause: pause,
            seed,
        }
    }
}

impl Default for Backpressure {
    fn default() -> Backpressure {
        Backpressure::none()
    }
}

/// Bounds of one call.
#[derive(Clone, Copy, Debug)]
pub struct CallLimits {
    /// Cycles from the header beat to the last output beat.
    pub cycles_max: u64,
    /// Output bytes the call may produce.
    pub output_bytes_max: usize,
}

/// A call the design answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallOutcome {
    /// `m_axis_tuser` of the last output beat.
    pub status: u16,
    pub output: Vec<u8>,
    /// Cycles from the header beat (first presented) to the last output beat, inclusive.
    pub cycles: u64,
}

/// How a design failed a call. The design has been reset afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The call was not finished within `cycles_max` cycles (`tlast` never came, or the
    /// design stopped taking input).
    CyclesExceeded {
        cycles_max: u64,
        input_beats_taken: u64,
        input_beats: u64,
    },
    /// The output grew past the bound.
    OutputTooLong { output_bytes_max: usize },
    /// `m_axis_tkeep` was not contiguous from byte 0.
    KeepNotContiguous { keep: u64 },
    /// The last output beat came before the design had taken the whole call.
    AnsweredEarly {
        input_beats_taken: u64,
        input_beats: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::CyclesExceeded {
                cycles_max,
                input_beats_taken,
                input_beats,
            } => {
                if input_beats_taken < input_beats {
                    write!(
                        f,
                        "the design did not finish the call within {cycles_max} cycles \
                         (cycles_max): it took {input_beats_taken} of {input_beats} input \
                         beats and stopped accepting input"
                    )
                } else {
                    write!(
                        f,
                        "the design did not finish the call within {cycles_max} cycles \
                         (cycles_max): it never asserted m_axis_tlast"
                    )
                }
            }
            Violation::OutputTooLong { output_bytes_max } => write!(
                f,
                "the design's output is longer than {output_bytes_max} bytes, the bound \
                 the manifest's [output] bytes gives for this call"
            ),
            Violation::KeepNotContiguous { keep } => write!(
                f,
                "the design sent an output beat whose m_axis_tkeep {keep:#018x} is not \
                 contiguous from byte 0"
            ),
            Violation::AnsweredEarly {
                input_beats_taken,
                input_beats,
            } => write!(
                f,
                "the design sent its last output beat after taking only {input_beats_taken} \
                 of the call's {input_beats} input beats"
            ),
        }
    }
}

/// A small, fast generator for the back-pressure pattern (SplitMix64): the pattern
/// only has to be reproducible from its seed, not of cryptographic quality.
struct Pattern(u64);

impl Pattern {
    fn next_unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pause(&mut self, probability: f64) -> bool {
        probability > 0.0 && self.next_unit() < probability
    }
}

/// A model driven call by call.
pub struct Shell {
    model: Model,
    backpressure: Backpressure,
    pattern: Pattern,
    /// Cycles simulated since creation, calls and resets included.
    cycles_total: u64,
}

impl Shell {
    /// Takes a fresh model and holds it in reset for [`RESET_CYCLES`].
    pub fn new(model: Model, backpressure: Backpressure) -> Shell {
        let mut shell = Shell {
            model,
            backpressure,
            pattern: Pattern(backpressure.seed),
            cycles_total: 0,
        };
        shell.reset();
        shell
    }

    /// Holds `rst_n` low for [`RESET_CYCLES`] cycles, then releases it for one.
    pub fn reset(&mut self) {
        let mut inputs = Inputs::default();
        self.model.step(&inputs, RESET_CYCLES);
        inputs.rst_n = 1;
        self.model.step(&inputs, 1);
        self.cycles_total += RESET_CYCLES + 1;
    }

    /// Every cycle this shell has simulated.
    pub fn cycles_total(&self) -> u64 {
        self.cycles_total
    }

    pub fn set_backpressure(&mut self, backpressure: Backpressure) {
        self.backpressure = backpressure;
        self.pattern = Pattern(backpressure.seed);
    }

    /// Runs one call: `header` is the 64-byte RAC call header as on the wire.
    pub fn call(
        &mut self,
        header: &[u8; HEADER_BYTES],
        payload: &[u8],
        limits: CallLimits,
    ) -> Result<CallOutcome, Violation> {
        let result = self.drive(header, payload, limits);
        if result.is_err() {
            self.reset();
        }
        result
    }

    fn drive(
        &mut self,
        header: &[u8; HEADER_BYTES],
        payload: &[u8],
        limits: CallLimits,
    ) -> Result<CallOutcome, Violation> {
        let payload_beats = payload.len().div_ceil(BEAT_BYTES) as u64;
        let input_beats = 1 + payload_beats;
        let mut taken = 0u64; // input beats the design has taken
        let mut presenting = false; // a beat is on the input with tvalid
        let mut inputs = Inputs {
            rst_n: 1,
            ..Inputs::default()
        };
        let mut output = Vec::new();
        let mut cycles = 0u64;
        let bp = self.backpressure;

        loop {
            if cycles >= limits.cycles_max {
                self.cycles_total += cycles;
                return Err(Violation::CyclesExceeded {
                    cycles_max: limits.cycles_max,
                    input_beats_taken: taken,
                    input_beats,
                });
            }
            // The first beat counts from the cycle it could first be presented: the
            // call's cycles start with the header, whatever the back-pressure.
            if !presenting && taken < input_beats && !self.pattern.pause(bp.input_pause) {
                presenting = true;
                load_beat(&mut inputs, header, payload, taken, input_beats);
            }
            inputs.s_tvalid = presenting as u8;
            inputs.m_tready = !self.pattern.pause(bp.output_pause) as u8;
            let out = self.model.step(&inputs, 1);
            cycles += 1;

            if presenting && out.s_tready != 0 {
                taken += 1;
                presenting = false;
            }
            if out.m_tvalid != 0 && inputs.m_tready != 0 {
                let keep = out.m_tkeep;
                let width = keep.trailing_ones() as usize;
                if width < 64 && keep >> width != 0 {
                    self.cycles_total += cycles;
                    return Err(Violation::KeepNotContiguous { keep });
                }
                if output.len() + width > limits.output_bytes_max {
                    self.cycles_total += cycles;
                    return Err(Violation::OutputTooLong {
                        output_bytes_max: limits.output_bytes_max,
                    });
                }
                output.extend_from_slice(&out.m_tdata[..width]);
                if out.m_tlast != 0 {
                    self.cycles_total += cycles;
                    if taken < input_beats {
                        return Err(Violation::AnsweredEarly {
                            input_beats_taken: taken,
                            input_beats,
                        });
                    }
                    return Ok(CallOutcome {
                        status: out.m_tuser,
                        output,
                        cycles,
                    });
                }
            }
        }
    }
}

/// Puts input beat `index` (0: the header) on the input stream.
fn load_beat(
    inputs: &mut Inputs,
    header: &[u8; HEADER_BYTES],
    payload: &[u8],
    index: u64,
    beats: u64,
) {
    let last = index + 1 == beats;
    inputs.s_tlast = last as u8;
    if index == 0 {
        inputs.s_tdata = *header;
        inputs.s_tkeep = u64::MAX;
        return;
    }
    let start = (index as usize - 1) * BEAT_BYTES;
    let chunk = &payload[start..payload.len().min(start + BEAT_BYTES)];
    inputs.s_tdata[..chunk.len()].copy_from_slice(chunk);
    inputs.s_tdata[chunk.len()..].fill(0);
    inputs.s_tkeep = if chunk.len() == BEAT_BYTES {
        u64::MAX
    } else {
        (1u64 << chunk.len()) - 1
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beats_follow_the_spec() {
        let header = [7u8; 64];
        let payload: Vec<u8> = (0..130u8).collect();
        let mut inputs = Inputs::default();
        load_beat(&mut inputs, &header, &payload, 0, 4);
        assert_eq!(
            (inputs.s_tdata, inputs.s_tkeep, inputs.s_tlast),
            (header, !0, 0)
        );
        load_beat(&mut inputs, &header, &payload, 2, 4);
        assert_eq!(inputs.s_tdata[0], 64);
        assert_eq!((inputs.s_tkeep, inputs.s_tlast), (!0, 0));
        load_beat(&mut inputs, &header, &payload, 3, 4);
        assert_eq!(&inputs.s_tdata[..2], &[128, 129]);
        assert!(inputs.s_tdata[2..].iter().all(|&b| b == 0));
        assert_eq!((inputs.s_tkeep, inputs.s_tlast), (0b11, 1));
        // An empty payload: the header beat alone, with tlast.
        load_beat(&mut inputs, &header, &[], 0, 1);
        assert_eq!((inputs.s_tkeep, inputs.s_tlast), (!0, 1));
    }

    #[test]
    fn pause_patterns_follow_their_probability_and_seed() {
        let count = |p: f64, seed: u64| {
            let mut pattern = Pattern(seed);
            (0..10_000).filter(|_| pattern.pause(p)).count()
        };
        assert_eq!(count(0.0, 1), 0);
        assert_eq!(count(1.0, 1), 10_000);
        let half = count(0.5, 42);
        assert!((4_500..5_500).contains(&half), "{half}");
        assert_eq!(half, count(0.5, 42));
        assert_ne!(half, count(0.5, 43));
    }
}
