//! The load of the data-path fault runs (`tests/faults.rs`): client threads that call
//! through their bindings, every call tagged so that its answer proves it is this
//! call's, every outcome recorded with when it was sent and answered; and the row of
//! the results table that one fault's records make.
//!
//! A call's payload starts with `CLIENT:SEQUENCE:` and goes on with random printable
//! bytes; the accelerator is `to_uppercase`, so the only right answer is the
//! upper-cased payload, tag included. An answer to another call (a stale reply on a
//! reused connection, a reply routed to the wrong waiter) differs in its tag, and an
//! answer computed wrong differs in its text: both count as *wrong*, which must never
//! happen.
//!
//! Not for: deciding what a fault should do to the cluster (the scenarios do), or
//! timing single calls (the benchmarks do).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use netaccel_client::registry::{Bound, BoundError};
use netaccel_client::ClientError;

/// Longest payload after the tag; calls are small, so a fault meets many of them.
const TEXT_BYTES_MAX: u64 = 256;
/// Each client's pause between two calls: at most 200 calls a second per client, a
/// load the 2-core machines this runs on carry beside the nodes, the registry and
/// the fault injection itself (back to back, six clients starved `nft` and `ip` for
/// seconds, which blurred when a fault began and ended).
const PACE: Duration = Duration::from_millis(5);
/// How long clients still in a call when the load stops may take to finish it before
/// the call counts as never answered (the client's own bounds are 10 s to rebind
/// and a few seconds to connect, so a call alive past this is stuck).
pub const ANSWER_BOUND: Duration = Duration::from_secs(30);
/// A call that took longer than this while a fault was on counts its client as hurt
/// by the fault (for the time to recover), as a failed call does.
const HURT_CALL: Duration = Duration::from_millis(500);

/// What became of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The right answer, once (a synchronous call has one answer).
    Answered,
    /// An error the client can act on; the kind (a node's status code, or what
    /// failed) for the table.
    Failed(String),
    /// An answer that is not this call's right answer.
    Wrong(String),
}

/// One call: when it was sent and answered, and how.
#[derive(Clone, Debug)]
pub struct Record {
    pub client: usize,
    pub sent: Instant,
    pub done: Instant,
    pub outcome: Outcome,
}

/// The kind of a failed bound call, for the table: the node's status code when it
/// answered one, else what could not be done.
pub fn failure_kind(e: &BoundError) -> String {
    match e {
        BoundError::Call { error, .. } => client_failure_kind(error),
        BoundError::NoBinding { .. } => "no binding yet".into(),
        BoundError::Registry(_) => "registry unreachable".into(),
    }
}

/// The kind of a failed call straight to a node.
pub fn client_failure_kind(e: &ClientError) -> String {
    match e {
        ClientError::Node { code, .. } => code.clone(),
        ClientError::Transport(_) => "node unreachable".into(),
    }
}

/// A small deterministic generator (xorshift), so a failing payload can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The payload of call `seq` of `client`: its tag, then random printable bytes.
pub fn payload(client: usize, seq: u64, rng: &mut Rng) -> Vec<u8> {
    let mut p = format!("{client}:{seq}:").into_bytes();
    let len = 1 + rng.next() % TEXT_BYTES_MAX;
    p.extend((0..len).map(|_| b' ' + (rng.next() % 95) as u8));
    p
}

/// One call of `to_uppercase` through `bound`, checked.
pub fn tagged_call(bound: &mut Bound, client: usize, seq: u64, rng: &mut Rng) -> Outcome {
    let input = payload(client, seq, rng);
    match bound.call(&[], &input, None) {
        Ok(out) if out.output == accel::reference::to_uppercase(&input) => Outcome::Answered,
        Ok(out) => Outcome::Wrong(format!(
            "call {client}:{seq} through {:?} answered {:?}",
            bound.binding(),
            String::from_utf8_lossy(&out.output[..out.output.len().min(64)])
        )),
        Err(e) => Outcome::Failed(failure_kind(&e)),
    }
}

/// A client's state others can see: since when its current call is under way
/// (microseconds after the load's start, 0 when none).
struct Client {
    in_call_since_us: AtomicU64,
}

/// Client threads calling until stopped.
pub struct Load {
    start: Instant,
    stop: Arc<AtomicBool>,
    clients: Arc<Vec<Client>>,
    threads: Vec<JoinHandle<Vec<Record>>>,
    /// Calls recorded by others (a scenario's own calls), merged into the results.
    extra: Arc<Mutex<Vec<Record>>>,
}

/// What the load saw, once stopped.
pub struct Results {
    pub records: Vec<Record>,
    /// Clients `0..clients` are the load's; later numbers are a scenario's own calls,
    /// counted in the row but not in its gap and recovery figures.
    pub clients: usize,
    /// Calls still under way [`ANSWER_BOUND`] after the stop.
    pub never_answered: usize,
    pub start: Instant,
    pub stopped: Instant,
}

impl Load {
    /// One thread per bound client, calling with a pause of [`PACE`] between calls.
    pub fn start(bounds: Vec<Bound>, seed: u64) -> Load {
        assert!(!bounds.is_empty(), "a load needs clients");
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Arc<Vec<Client>> = Arc::new(
            (0..bounds.len())
                .map(|_| Client {
                    in_call_since_us: AtomicU64::new(0),
                })
                .collect(),
        );
        let threads = bounds
            .into_iter()
            .enumerate()
            .map(|(i, mut bound)| {
                let (stop, clients) = (Arc::clone(&stop), Arc::clone(&clients));
                let mut rng = Rng(seed ^ (0x9e37_79b9 * (i as u64 + 1)));
                std::thread::spawn(move || {
                    let mut records = Vec::new();
                    let mut seq = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let sent = Instant::now();
                        let since = sent.duration_since(start).as_micros().max(1) as u64;
                        clients[i].in_call_since_us.store(since, Ordering::Relaxed);
                        let outcome = tagged_call(&mut bound, i, seq, &mut rng);
                        clients[i].in_call_since_us.store(0, Ordering::Relaxed);
                        records.push(Record {
                            client: i,
                            sent,
                            done: Instant::now(),
                            outcome,
                        });
                        seq += 1;
                        std::thread::sleep(PACE);
                    }
                    records
                })
            })
            .collect();
        Load {
            start,
            stop,
            clients,
            threads,
            extra: Arc::default(),
        }
    }

    /// Where a scenario records calls of its own (client numbers past the load's).
    pub fn extra(&self) -> Arc<Mutex<Vec<Record>>> {
        Arc::clone(&self.extra)
    }

    /// Stops the clients and collects their records; a client still in a call
    /// [`ANSWER_BOUND`] later is left behind (its thread ends when the cluster goes)
    /// and its call counted as never answered.
    pub fn stop(self) -> Results {
        let stopped = Instant::now();
        self.stop.store(true, Ordering::Relaxed);
        let deadline = stopped + ANSWER_BOUND;
        while !self.threads.iter().all(|t| t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut records = Vec::new();
        let mut never_answered = 0;
        for (i, t) in self.threads.into_iter().enumerate() {
            if t.is_finished() {
                records.extend(t.join().expect("a client thread panicked"));
            } else {
                let since = self.clients[i].in_call_since_us.load(Ordering::Relaxed);
                assert!(since > 0, "a client not in a call has finished");
                never_answered += 1;
            }
        }
        records.extend(self.extra.lock().unwrap().drain(..));
        Results {
            records,
            clients: self.clients.len(),
            never_answered,
            start: self.start,
            stopped,
        }
    }
}

/// One line of the results table.
#[derive(Debug)]
pub struct Row {
    pub fault: String,
    pub sent: usize,
    pub answered_once: usize,
    pub failed: usize,
    pub wrong: usize,
    pub never_answered: usize,
    /// The longest time one client went without a right answer.
    pub longest_gap: Duration,
    /// From the fault's end to the first right answer after it, the longest over the
    /// load's clients the fault hurt; `None` when it hurt none.
    pub recovered: Option<Duration>,
    /// Failure kinds and their counts, then what the scenario measured.
    pub notes: String,
    /// The first wrong answers, for the log.
    pub wrong_examples: Vec<String>,
    /// The first failed or slow calls, for the log.
    pub slow_calls: Vec<String>,
}

impl Results {
    /// The row of a fault that was on from `fault_start` to `fault_end`.
    pub fn row(&self, fault: &str, fault_start: Instant, fault_end: Instant, notes: &str) -> Row {
        assert!(fault_start <= fault_end, "a fault ends after it starts");
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        let (mut answered_once, mut failed, mut wrong_examples) = (0, 0, Vec::new());
        for r in &self.records {
            match &r.outcome {
                Outcome::Answered => answered_once += 1,
                Outcome::Failed(kind) => {
                    failed += 1;
                    *kinds.entry(kind).or_default() += 1;
                }
                Outcome::Wrong(what) => wrong_examples.push(what.clone()),
            }
        }
        let mut notes_all = kinds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ");
        if !notes.is_empty() {
            if !notes_all.is_empty() {
                notes_all.push_str("; ");
            }
            notes_all.push_str(notes);
        }
        Row {
            fault: fault.to_string(),
            sent: self.records.len() + self.never_answered,
            answered_once,
            failed,
            wrong: wrong_examples.len(),
            never_answered: self.never_answered,
            longest_gap: self.longest_gap(),
            recovered: self.recovered(fault_start, fault_end),
            notes: notes_all,
            wrong_examples: wrong_examples.into_iter().take(5).collect(),
            slow_calls: self.slow_calls(),
        }
    }

    /// The longest a right answer took among calls sent between `from` and `to`.
    pub fn slowest_answer(&self, from: Instant, to: Instant) -> Duration {
        self.records
            .iter()
            .filter(|r| r.outcome == Outcome::Answered && r.sent >= from && r.sent <= to)
            .map(|r| r.done - r.sent)
            .max()
            .unwrap_or_default()
    }

    /// The calls that took longer than `HURT_CALL` or failed, for the log: client,
    /// sent and answered (ms after the load's start), outcome.
    pub fn slow_calls(&self) -> Vec<String> {
        let ms = |t: Instant| t.duration_since(self.start).as_millis();
        self.records
            .iter()
            .filter(|r| r.outcome != Outcome::Answered || r.done - r.sent > HURT_CALL)
            .take(20)
            .map(|r| {
                format!(
                    "client {} sent at {} ms, done at {} ms: {:?}",
                    r.client,
                    ms(r.sent),
                    ms(r.done),
                    r.outcome
                )
            })
            .collect()
    }

    /// Per client, the longest stretch between right answers (from the load's start
    /// to its stop at the ends).
    fn longest_gap(&self) -> Duration {
        let mut by_client: BTreeMap<usize, Vec<Instant>> = BTreeMap::new();
        for r in self.records.iter().filter(|r| r.client < self.clients) {
            if r.outcome == Outcome::Answered {
                by_client.entry(r.client).or_default().push(r.done);
            }
        }
        let mut longest = Duration::ZERO;
        for mut times in by_client.into_values() {
            times.sort();
            let mut last = self.start;
            for t in times.into_iter().chain([self.stopped]) {
                longest = longest.max(t.saturating_duration_since(last));
                last = t;
            }
        }
        longest
    }

    fn recovered(&self, fault_start: Instant, fault_end: Instant) -> Option<Duration> {
        let hurt = |r: &Record| {
            r.client < self.clients
                && r.done >= fault_start
                && r.sent <= fault_end
                && (r.outcome != Outcome::Answered || r.done - r.sent > HURT_CALL)
        };
        let mut hurt_clients: Vec<usize> = self
            .records
            .iter()
            .filter(|r| hurt(r))
            .map(|r| r.client)
            .collect();
        hurt_clients.sort();
        hurt_clients.dedup();
        hurt_clients
            .into_iter()
            .map(|c| {
                self.records
                    .iter()
                    .filter(|r| r.client == c && r.done >= fault_end)
                    .filter(|r| r.outcome == Outcome::Answered)
                    .map(|r| r.done - fault_end)
                    .min()
                    // Hurt and never right again before the stop: as long as the
                    // rest of the run, a lower bound.
                    .unwrap_or_else(|| self.stopped.saturating_duration_since(fault_end))
            })
            .max()
    }
}

const COLUMNS: [&str; 9] = [
    "fault",
    "calls sent",
    "answered once",
    "failed with status",
    "wrong",
    "never answered",
    "longest gap (ms)",
    "time to recover (ms)",
    "notes",
];

fn cells(row: &Row) -> [String; 9] {
    [
        row.fault.clone(),
        row.sent.to_string(),
        row.answered_once.to_string(),
        row.failed.to_string(),
        row.wrong.to_string(),
        row.never_answered.to_string(),
        row.longest_gap.as_millis().to_string(),
        row.recovered
            .map_or("-".into(), |d| d.as_millis().to_string()),
        row.notes.clone(),
    ]
}

/// The rows as tab-separated values, a header first.
pub fn tsv(rows: &[Row]) -> String {
    let mut out = COLUMNS.join("\t");
    out.push('\n');
    for row in rows {
        out.push_str(&cells(row).map(|c| c.replace(['\t', '\n'], " ")).join("\t"));
        out.push('\n');
    }
    out
}

/// The rows as a markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = format!("| {} |\n", COLUMNS.join(" | "));
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for row in rows {
        let c = cells(row).map(|c| c.replace('|', "\\|"));
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_make_every_payload_distinct() {
        let mut rng = Rng(1);
        let a = payload(1, 12, &mut rng);
        let b = payload(11, 2, &mut rng);
        assert!(a.starts_with(b"1:12:") && b.starts_with(b"11:2:"));
        assert_ne!(a[..5], b[..5]);
    }
}
