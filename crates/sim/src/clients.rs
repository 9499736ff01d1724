//! The clients of a scenario: when each sends a call, what it calls, and to which node.
//!
//! Open-loop Poisson clients send at exponential intervals whatever the answers;
//! closed-loop clients keep `outstanding` calls out and send the next one `think_us`
//! after an answer comes back; trace clients replay a file. Every client sends to the
//! nodes that are up in turn. All stop at the scenario's `duration_s` or `calls`.
//!
//! Not for: the network's times (`engine`), or anything the node decides.

use std::path::Path;

use netaccel_node::core::tenant::TenantId;

use crate::model::Random;
use crate::scenario::{ClientKind, Scenario};

/// One call as a client sends it.
pub struct Issue {
    /// The node it goes to; `None` when no node is up.
    pub node: Option<u32>,
    pub accel: u32,
    pub bytes: u32,
    pub fragments: u32,
    pub fragment_gap_us: f64,
    pub tenant: TenantId,
    pub deadline_us: u32,
    /// When this client sends its next call, for open-loop and trace clients.
    pub next_at: Option<u64>,
}

enum Kind {
    /// Poisson (`phases` 1) or Erlang arrivals.
    Open {
        mean_gap_ns: f64,
        phases: u32,
    },
    Closed {
        outstanding: usize,
        think_ns: u64,
    },
    Trace {
        lines: std::sync::Arc<Vec<TraceLine>>,
        at: usize,
    },
}

#[derive(Clone, Copy)]
struct TraceLine {
    at_ns: u64,
    accel: u32,
    bytes: u32,
}

struct Client {
    kind: Kind,
    /// Cumulative weights of the mix, and the entries they pick.
    cumulative: Vec<f64>,
    mix: Vec<(u32, u32, u32, f64)>,
    tenant: TenantId,
    deadline_us: u32,
    sent: u64,
}

pub struct Clients {
    list: Vec<Client>,
    stop_ns: u64,
    calls_max: u64,
    issued: u64,
    up: Vec<bool>,
}

/// Tenants named in the scenario get ids above every client's own.
const NAMED_TENANT_BASE: TenantId = 1 << 40;

impl Clients {
    pub fn new(sc: &Scenario, base: &Path) -> Result<Clients, String> {
        let index = |name: &str| {
            sc.accelerators
                .iter()
                .position(|a| a.name == name)
                .map(|i| i as u32)
        };
        let mut names: Vec<&str> = Vec::new();
        let mut list = Vec::new();
        for spec in &sc.clients {
            let mut cumulative = Vec::new();
            let mut mix = Vec::new();
            let mut total = 0.0;
            for m in &spec.mix {
                total += m.weight;
                cumulative.push(total);
                let a = index(&m.accelerator).expect("validated");
                mix.push((a, m.bytes, m.fragments, m.fragment_gap_us));
            }
            let shared = match &spec.kind {
                ClientKind::Trace { file } => {
                    Some(std::sync::Arc::new(read_trace(&base.join(file), &index)?))
                }
                _ => None,
            };
            for _ in 0..spec.count {
                let kind = match &spec.kind {
                    ClientKind::Poisson { rate_per_s } => Kind::Open {
                        mean_gap_ns: 1e9 / rate_per_s,
                        phases: 1,
                    },
                    ClientKind::Erlang { rate_per_s, k } => Kind::Open {
                        mean_gap_ns: 1e9 / rate_per_s,
                        phases: *k,
                    },
                    ClientKind::Closed {
                        outstanding,
                        think_us,
                    } => Kind::Closed {
                        outstanding: *outstanding,
                        think_ns: (think_us * 1000.0).round() as u64,
                    },
                    ClientKind::Trace { .. } => Kind::Trace {
                        lines: std::sync::Arc::clone(shared.as_ref().expect("read above")),
                        at: 0,
                    },
                };
                let tenant = match &spec.tenant {
                    Some(name) => {
                        let i = names.iter().position(|n| n == name).unwrap_or_else(|| {
                            names.push(name);
                            names.len() - 1
                        });
                        NAMED_TENANT_BASE + i as TenantId
                    }
                    None => list.len() as TenantId + 1,
                };
                list.push(Client {
                    kind,
                    cumulative: cumulative.clone(),
                    mix: mix.clone(),
                    tenant,
                    deadline_us: spec.deadline_us,
                    sent: 0,
                });
            }
        }
        Ok(Clients {
            list,
            stop_ns: sc.duration_s.map_or(u64::MAX, crate::engine::secs_ns),
            calls_max: sc.calls.unwrap_or(u64::MAX),
            issued: 0,
            up: vec![true; sc.node.count],
        })
    }

    /// Each client's first sends: (client, time), closed-loop clients once per call
    /// they keep out.
    pub fn first_issues(&self, rng: &mut Random) -> Vec<(u32, u64)> {
        let mut first = Vec::new();
        for (i, c) in self.list.iter().enumerate() {
            let i = i as u32;
            match &c.kind {
                Kind::Open {
                    mean_gap_ns,
                    phases,
                } => first.push((i, gap(rng, *mean_gap_ns, *phases))),
                Kind::Closed { outstanding, .. } => {
                    first.extend(std::iter::repeat_n((i, 0), *outstanding))
                }
                Kind::Trace { lines, .. } => {
                    if let Some(l) = lines.first() {
                        first.push((i, l.at_ns));
                    }
                }
            }
        }
        first
    }

    pub fn node_down(&mut self, node: usize) {
        self.up[node] = false;
    }

    /// Client `i` sends a call at `now`, unless the run's clients have stopped.
    pub fn issue(&mut self, i: u32, now: u64, rng: &mut Random) -> Option<Issue> {
        if now >= self.stop_ns || self.issued >= self.calls_max {
            return None;
        }
        self.issued += 1;
        let nodes = self.up.len();
        let c = &mut self.list[i as usize];
        let start = (i as usize + c.sent as usize) % nodes;
        let node = (0..nodes)
            .map(|k| (start + k) % nodes)
            .find(|&n| self.up[n])
            .map(|n| n as u32);
        c.sent += 1;
        let (accel, bytes, fragments, fragment_gap_us, next_at) = match &mut c.kind {
            Kind::Trace { lines, at } => {
                let l = lines[*at];
                *at += 1;
                let next = lines.get(*at).map(|n| n.at_ns.max(now));
                (l.accel, l.bytes, 1, 0.0, next)
            }
            kind => {
                let (a, b, f, g) = c.mix[rng.pick(&c.cumulative)];
                let next = match kind {
                    Kind::Open {
                        mean_gap_ns,
                        phases,
                    } => Some(now + gap(rng, *mean_gap_ns, *phases)),
                    _ => None,
                };
                (a, b, f, g, next)
            }
        };
        Some(Issue {
            node,
            accel,
            bytes,
            fragments,
            fragment_gap_us,
            tenant: c.tenant,
            deadline_us: c.deadline_us,
            next_at,
        })
    }

    /// A call of client `i` was answered, the answer back at `back_ns`: when a
    /// closed-loop client sends its next call.
    pub fn answered(&mut self, i: u32, back_ns: u64) -> Option<u64> {
        match self.list[i as usize].kind {
            Kind::Closed { think_ns, .. } => Some(back_ns + think_ns),
            _ => None,
        }
    }
}

/// An open-loop client's time to its next call: `phases` exponential phases of mean
/// `mean_gap_ns / phases` each.
fn gap(rng: &mut Random, mean_gap_ns: f64, phases: u32) -> u64 {
    let phase = mean_gap_ns / f64::from(phases);
    let total: f64 = (0..phases).map(|_| rng.exponential(phase)).sum();
    total.round() as u64
}

/// Reads `time_us,accelerator,bytes` lines (`#` comments and blank lines skipped),
/// in time order.
fn read_trace(path: &Path, index: &dyn Fn(&str) -> Option<u32>) -> Result<Vec<TraceLine>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            format!(
                "{}:{}: expected time_us,accelerator,bytes",
                path.display(),
                n + 1
            )
        };
        let mut f = line.split(',').map(str::trim);
        let (Some(t), Some(a), Some(b), None) = (f.next(), f.next(), f.next(), f.next()) else {
            return Err(bad());
        };
        let t: f64 = t.parse().map_err(|_| bad())?;
        let accel = index(a)
            .ok_or_else(|| format!("{}:{}: unknown accelerator `{a}`", path.display(), n + 1))?;
        let bytes: u32 = b.parse().map_err(|_| bad())?;
        if t.is_nan() || t < 0.0 {
            return Err(bad());
        }
        lines.push(TraceLine {
            at_ns: (t * 1000.0).round() as u64,
            accel,
            bytes,
        });
    }
    lines.sort_by_key(|l| l.at_ns);
    Ok(lines)
}
