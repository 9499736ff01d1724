//! Two targets measured interleaved, call by call: the latency gap between a server
//! and its floor on a machine whose speed drifts.
//!
//! On a shared machine the same server's median moves by tens of percent from one
//! second to the next (another tenant's work, the host's frequency), so two servers
//! measured one after the other differ by the drift as much as by themselves. Here
//! one connection to each target is open at once and calls alternate between them,
//! `A B B A A B B A …` (the pattern cancels whatever the second of two back-to-back
//! calls gains or loses): each call of one target has a call of the other a few tens
//! of microseconds away, and a drift moves both alike. Calls go one at a time over
//! their connection (one in flight), as `run … -c 1 -P 1` sends them.
//!
//! The calls are cut into blocks of consecutive pairs; per block, each target's
//! median and their gap. The figure a comparison reads is the median of the block
//! gaps, the same estimator as the median of per-round gaps of two servers run in
//! turn, with rounds a few hundred milliseconds long instead of minutes apart.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::hist::Latency;
use crate::target::Target;
use crate::wire::{self, Method, Reply, ReplyReader, Request};

/// Most blocks a run is cut into (each block keeps two histograms).
pub const BLOCKS_MAX: usize = 1000;

/// What to measure.
#[derive(Clone, Debug)]
pub struct PairSpec {
    pub a: Target,
    pub b: Target,
    /// Payload bytes per call, the same for both targets.
    pub size: usize,
    /// Calls per target after the warm-up.
    pub calls: u64,
    /// Calls per target before measuring.
    pub warmup_calls: u64,
    /// Blocks the measured calls are cut into.
    pub blocks: usize,
    /// Longest wait for one answer.
    pub timeout: Duration,
}

/// One target's side of a [`PairSpec`].
pub struct Side {
    pub all: Latency,
    pub blocks: Vec<Latency>,
}

/// What a run measured.
pub struct Measured {
    pub a: Side,
    pub b: Side,
}

impl Measured {
    /// Per block, the gap of the medians, `A − B`, in ns.
    pub fn block_gaps_ns(&self) -> Vec<i64> {
        self.a
            .blocks
            .iter()
            .zip(&self.b.blocks)
            .map(|(a, b)| a.quantile_ns(0.5) as i64 - b.quantile_ns(0.5) as i64)
            .collect()
    }

    /// The median of the block gaps, in ns.
    pub fn gap_ns(&self) -> f64 {
        median(self.block_gaps_ns())
    }

    /// `key=value` lines, one figure per line, for scripts.
    pub fn lines(&self) -> String {
        let mut s = String::new();
        for (name, side) in [("a", &self.a), ("b", &self.b)] {
            let h = &side.all;
            s += &format!(
                "{name}_calls={}\n{name}_p50_ns={}\n{name}_p99_ns={}\n{name}_mean_ns={:.0}\n",
                h.count(),
                h.quantile_ns(0.5),
                h.quantile_ns(0.99),
                h.summary().mean_ns
            );
        }
        let gaps = self.block_gaps_ns();
        let list: Vec<String> = gaps.iter().map(i64::to_string).collect();
        s += &format!("blocks={}\n", gaps.len());
        s += &format!("block_gaps_ns={}\n", list.join(","));
        s += &format!("gap_ns={:.0}\n", self.gap_ns());
        s
    }
}

/// The median of `v` (the mean of the middle two for an even count); 0 when empty.
pub fn median(mut v: Vec<i64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0
    }
}

/// One open connection and the call it sends again and again.
struct Conn {
    stream: TcpStream,
    request: Request,
    replies: ReplyReader,
    next_id: u32,
}

impl Conn {
    async fn open(target: &Target, payload: &[u8]) -> Result<Conn> {
        let addr = match target {
            Target::Http { addr, .. } | Target::Rac { addr, .. } | Target::TcpEcho { addr } => addr,
            Target::InProcess { .. } => bail!("inproc targets have no connection to pair"),
        };
        let method = match target {
            Target::Http { function: None, .. } => Method::Get,
            _ => Method::Post,
        };
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let request = Request::new(target, method, payload, false);
        let replies = ReplyReader::new(target, request.payload_len(), false);
        Ok(Conn {
            stream,
            request,
            replies,
            next_id: 0,
        })
    }

    /// One call: its round trip in ns.
    async fn call(&mut self, timeout: Duration) -> Result<u64> {
        self.next_id = self.next_id.wrapping_add(1);
        let start = Instant::now();
        let sent = self.stream.write_all(self.request.bytes_for(self.next_id));
        tokio::time::timeout(timeout, sent)
            .await
            .context("write timed out")?
            .context("write")?;
        let reply: Reply = tokio::time::timeout(timeout, self.replies.next(&mut self.stream))
            .await
            .context("no answer within the timeout")?
            .context("read")?;
        let took = start.elapsed().as_nanos() as u64;
        if let Some(e) = reply.error {
            bail!("the call failed: {e}");
        }
        if reply.closes {
            bail!("the server closed the connection");
        }
        Ok(took)
    }
}

/// Runs `spec` on a single-threaded runtime of its own.
pub fn run(spec: &PairSpec) -> Result<Measured> {
    if spec.blocks == 0 || spec.blocks > BLOCKS_MAX {
        bail!("blocks must be 1..={BLOCKS_MAX}");
    }
    if spec.calls < spec.blocks as u64 {
        bail!("fewer calls ({}) than blocks ({})", spec.calls, spec.blocks);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(spec))
}

async fn run_async(spec: &PairSpec) -> Result<Measured> {
    let payload = wire::payload(spec.size);
    let mut a = Conn::open(&spec.a, &payload).await?;
    let mut b = Conn::open(&spec.b, &payload).await?;
    let new_side = || Side {
        all: Latency::new(),
        blocks: (0..spec.blocks).map(|_| Latency::new()).collect(),
    };
    let mut m = Measured {
        a: new_side(),
        b: new_side(),
    };
    for i in 0..spec.warmup_calls + spec.calls {
        let (ta, tb) = if i % 2 == 0 {
            let ta = a.call(spec.timeout).await.context("target A")?;
            (ta, b.call(spec.timeout).await.context("target B")?)
        } else {
            let tb = b.call(spec.timeout).await.context("target B")?;
            (a.call(spec.timeout).await.context("target A")?, tb)
        };
        let Some(k) = i.checked_sub(spec.warmup_calls) else {
            continue;
        };
        // Spread evenly: every block gets calls / blocks calls, give or take one
        // (a rounded-up block size left the last blocks empty, their gap 0).
        let block = (u128::from(k) * spec.blocks as u128 / u128::from(spec.calls)) as usize;
        debug_assert!(block < spec.blocks);
        for (side, t) in [(&mut m.a, ta), (&mut m.b, tb)] {
            side.all.record(t);
            side.blocks[block].record(t);
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![5, -3, 9]), 5.0);
        assert_eq!(median(vec![4, 1, 3, 2]), 2.5);
    }

    #[test]
    fn block_gaps_are_a_minus_b_per_block() {
        let side = |vals: &[u64]| {
            let mut s = Side {
                all: Latency::new(),
                blocks: Vec::new(),
            };
            for &v in vals {
                let mut h = Latency::new();
                h.record(v);
                s.all.record(v);
                s.blocks.push(h);
            }
            s
        };
        let m = Measured {
            // Below 2,048 ns the histogram keeps every value exactly.
            a: side(&[1_000, 1_500, 1_200]),
            b: side(&[800, 1_600, 1_100]),
        };
        assert_eq!(m.block_gaps_ns(), vec![200, -100, 100]);
        assert_eq!(m.gap_ns(), 100.0);
        assert!(m.lines().contains("gap_ns=100\n"));
    }

    /// Two echo servers on loopback, one of them answering 2 ms late: the gap the
    /// pairing measures is the delay, within the timer's slack.
    #[test]
    fn measures_a_known_delay_between_two_echo_servers() {
        use std::io::{Read, Write};
        let echo = |delay: Duration| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            std::thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 64];
                while s.read_exact(&mut buf).is_ok() {
                    std::thread::sleep(delay);
                    if s.write_all(&buf).is_err() {
                        break;
                    }
                }
            });
            Target::parse(&format!("tcp-echo://{addr}")).unwrap()
        };
        let spec = PairSpec {
            a: echo(Duration::from_millis(2)),
            b: echo(Duration::ZERO),
            size: 64,
            calls: 40,
            warmup_calls: 2,
            blocks: 4,
            timeout: Duration::from_secs(5),
        };
        let m = run(&spec).unwrap();
        assert_eq!(m.a.all.count(), 40);
        assert_eq!(m.b.all.count(), 40);
        assert!(m.b.blocks.iter().all(|h| h.count() == 10));
        let gap_ms = m.gap_ns() / 1e6;
        assert!((1.9..10.0).contains(&gap_ms), "gap {gap_ms} ms");

        // A count that blocks do not divide: no block is left empty.
        let spec = PairSpec {
            a: echo(Duration::ZERO),
            b: echo(Duration::ZERO),
            calls: 41,
            blocks: 20,
            ..spec
        };
        let m = run(&spec).unwrap();
        assert!(m.a.blocks.iter().all(|h| (2..=3).contains(&h.count())));
        assert_eq!(m.a.all.count(), 41);
    }
}
