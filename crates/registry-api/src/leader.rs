//! The one loop that follows the registry's leader across replicas.
//!
//! A registry may run as several replicas sharing their state in etcd: one leads and
//! takes writes; a follower answers reads and refuses writes with `503 NOT_LEADER`,
//! naming the leader in `Location` when it knows a live one. A caller lists every
//! replica it knows. [`Replicas::follow`] asks them in rounds: the replica that answered
//! last first, then each other listed replica, and a leader a follower names right
//! after that follower; each at most once per round. A replica that cannot be reached
//! or answers 503 passes the request on to the next. When a whole round ends without
//! an answer but some replica did answer 503 (the leader was just killed and no
//! election has settled yet: the survivors refuse writes and the dead one refuses
//! connections) the loop pauses and starts another round, until the [`Patience`] runs
//! out; only then does the caller see the last refusal. So a client outlives any
//! replica, including the leader. A round in which no replica answered at all ends
//! the loop at once: with nobody alive there is no election to wait for.
//!
//! Transport-agnostic and blocking: the caller's closure makes one request to one
//! replica with its own HTTP client (every caller uses blocking `ureq` or `urllib`)
//! and says what came of it ([`Try`]). Not here: retries of a call to a node, timeouts
//! of one request (the closure's), and anything async.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Registry replicas a caller may list.
pub const REPLICAS_MAX: usize = 8;

/// How long a client keeps trying while no replica takes its request: the registry's
/// default election lease (5 s, `--election-ttl-s`), in which a dead leader's lease
/// runs out and another replica is elected, twice over.
pub const ELECTION_WAIT: Duration = Duration::from_secs(10);

/// Pause between two rounds that found no replica to answer.
pub const ROUND_PAUSE: Duration = Duration::from_millis(100);

/// What one request to one replica came to.
#[derive(Debug)]
pub enum Try<T, E> {
    /// An answer the caller returns (a success, or an error another replica would
    /// answer the same way: 400, 404, 409, …).
    Answer(T),
    /// The replica could not be reached; why, in a sentence naming it.
    Unreachable(String),
    /// `503`: a follower (`leader`: the origin its `Location` names, if any) or a
    /// replica that cannot serve now.
    Unavailable { leader: Option<String>, error: E },
}

/// How long [`Replicas::follow`] keeps trying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patience {
    /// New rounds start until this long after the first try (zero: one round).
    pub settle: Duration,
    /// Pause between rounds.
    pub pause: Duration,
    /// No try starts after this instant.
    pub deadline: Option<Instant>,
}

impl Patience {
    /// One round, no deadline: each replica is asked once.
    pub const ONCE: Patience = Patience {
        settle: Duration::ZERO,
        pause: Duration::ZERO,
        deadline: None,
    };

    /// Rounds until an election can have settled ([`ELECTION_WAIT`]).
    pub const ELECTION: Patience = Patience {
        settle: ELECTION_WAIT,
        pause: ROUND_PAUSE,
        deadline: None,
    };
}

/// Why no replica answered: the last 503 any gave (the most telling), and every
/// transport failure.
#[derive(Debug)]
pub struct Exhausted<E> {
    pub refusal: Option<E>,
    pub unreachable: Vec<String>,
    /// How many 503s the replicas answered, over every round.
    pub refusals: usize,
}

/// The replicas of one registry, and which answered last (shared by every request).
#[derive(Debug)]
pub struct Replicas {
    bases: Vec<String>,
    preferred: AtomicUsize,
}

impl Replicas {
    /// `bases`: `scheme://authority[/prefix]` without a trailing `/`, at most
    /// [`REPLICAS_MAX`] (more are dropped); at least one.
    pub fn new(mut bases: Vec<String>) -> Replicas {
        assert!(!bases.is_empty(), "a registry needs at least one replica");
        bases.truncate(REPLICAS_MAX);
        Replicas {
            bases,
            preferred: AtomicUsize::new(0),
        }
    }

    /// Splits a comma-separated list of URLs, trimmed, without trailing `/`.
    pub fn split(text: &str) -> Vec<String> {
        text.split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect()
    }

    pub fn bases(&self) -> &[String] {
        &self.bases
    }

    /// The replica asked first: the one that answered last.
    pub fn base(&self) -> &str {
        &self.bases[self.preferred.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// Sends one request to the replicas in turn (see the module documentation):
    /// `attempt` is called with a replica's base URL.
    pub fn follow<T, E>(
        &self,
        patience: Patience,
        mut attempt: impl FnMut(&str) -> Try<T, E>,
    ) -> Result<T, Exhausted<E>> {
        let settled = Instant::now() + patience.settle;
        let mut failed = Exhausted {
            refusal: None,
            unreachable: Vec::new(),
            refusals: 0,
        };
        loop {
            let refusals = failed.refusals;
            if let Some(answer) = self.round(patience.deadline, &mut attempt, &mut failed) {
                return Ok(answer);
            }
            let nobody_alive = failed.refusals == refusals;
            let next = Instant::now() + patience.pause;
            if nobody_alive || next >= settled || patience.deadline.is_some_and(|d| next >= d) {
                return Err(failed);
            }
            std::thread::sleep(patience.pause);
        }
    }

    /// One round: each listed replica and each leader named, at most once.
    fn round<T, E>(
        &self,
        deadline: Option<Instant>,
        attempt: &mut impl FnMut(&str) -> Try<T, E>,
        failed: &mut Exhausted<E>,
    ) -> Option<T> {
        let first = self.preferred.load(Ordering::Relaxed) % self.bases.len();
        // A stack: the next replica to ask is at the end.
        let mut order: Vec<String> = (0..self.bases.len())
            .map(|i| self.bases[(first + i) % self.bases.len()].clone())
            .rev()
            .collect();
        let mut asked: Vec<String> = Vec::with_capacity(2 * self.bases.len());
        while let Some(base) = order.pop() {
            if asked.contains(&base) {
                continue;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                failed.unreachable.push("out of time".to_string());
                return None;
            }
            asked.push(base.clone());
            match attempt(&base) {
                Try::Answer(answer) => {
                    if let Some(i) = self.bases.iter().position(|b| *b == base) {
                        self.preferred.store(i, Ordering::Relaxed);
                    }
                    return Some(answer);
                }
                Try::Unreachable(why) => failed.unreachable.push(why),
                Try::Unavailable { leader, error } => {
                    // Bounded: a leader is pushed only by a replica asked this round.
                    order.extend(leader);
                    failed.refusal = Some(error);
                    failed.refusals += 1;
                }
            }
        }
        None
    }
}

/// `scheme://authority` of an absolute URL (a follower's `Location`, which is the
/// leader's URL and the path asked).
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split('/').next()?;
    (!scheme.is_empty() && !authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn replicas(names: &[&str]) -> Replicas {
        Replicas::new(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn a_followers_leader_is_asked_next_and_then_preferred() {
        let r = replicas(&["a", "b", "c"]);
        let asked = RefCell::new(Vec::new());
        let answer = r.follow(Patience::ONCE, |base| {
            asked.borrow_mut().push(base.to_string());
            match base {
                "a" => Try::Unavailable {
                    leader: Some("c".to_string()),
                    error: "a follows",
                },
                "c" => Try::Answer(7),
                _ => Try::Unreachable(format!("{base} down")),
            }
        });
        assert_eq!(answer.unwrap(), 7);
        assert_eq!(*asked.borrow(), ["a", "c"]);
        assert_eq!(r.base(), "c");
    }

    #[test]
    fn one_round_asks_each_replica_once() {
        let r = replicas(&["a", "b"]);
        let mut tries = 0;
        let failed = r
            .follow(Patience::ONCE, |base| -> Try<(), &str> {
                tries += 1;
                Try::Unavailable {
                    // Both name each other, and a dead leader.
                    leader: Some(if base == "a" { "b" } else { "dead" }.to_string()),
                    error: "not leader",
                }
            })
            .unwrap_err();
        assert_eq!(tries, 3, "a, b, the dead leader: once each");
        assert_eq!(failed.refusal, Some("not leader"));
    }

    #[test]
    fn rounds_go_on_until_an_election_settles() {
        // The leader is dead and the survivors refuse writes for the first 3 rounds.
        let r = replicas(&["dead", "b", "c"]);
        let rounds = RefCell::new(0);
        let patience = Patience {
            settle: Duration::from_secs(5),
            pause: Duration::from_millis(1),
            deadline: None,
        };
        let answer = r.follow(patience, |base| match base {
            "dead" => {
                *rounds.borrow_mut() += 1;
                Try::Unreachable("connection refused".to_string())
            }
            "c" if *rounds.borrow() > 3 => Try::Answer("written"),
            _ => Try::Unavailable {
                leader: Some("dead".to_string()),
                error: "NOT_LEADER",
            },
        });
        assert_eq!(answer.unwrap(), "written");
        assert_eq!(*rounds.borrow(), 4);
        assert_eq!(r.base(), "c");
    }

    #[test]
    fn patience_bounds_the_rounds() {
        let r = replicas(&["a"]);
        let patience = Patience {
            settle: Duration::from_millis(50),
            pause: Duration::from_millis(10),
            deadline: None,
        };
        let start = Instant::now();
        let failed = r
            .follow(patience, |_| -> Try<(), ()> {
                Try::Unavailable {
                    leader: None,
                    error: (),
                }
            })
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(failed.refusals >= 2, "{failed:?}");
        // Nobody alive: no election to wait for, one round.
        let failed = r
            .follow(patience, |_| -> Try<(), ()> {
                Try::Unreachable("down".into())
            })
            .unwrap_err();
        assert_eq!(failed.unreachable, ["down"]);
        let past = Patience {
            deadline: Some(Instant::now()),
            ..Patience::ELECTION
        };
        let failed = r.follow(past, |_| -> Try<(), ()> { unreachable!() });
        assert_eq!(failed.unwrap_err().unreachable, ["out of time"]);
    }

    #[test]
    fn origins_are_read_from_locations() {
        assert_eq!(
            origin_of("http://10.0.0.2:7400/v1/functions/f/instances").as_deref(),
            Some("http://10.0.0.2:7400")
        );
        assert_eq!(origin_of("/v1/x"), None);
        assert_eq!(origin_of("http:///x"), None);
        assert_eq!(
            Replicas::split(" http://a:1/, ,http://b:2"),
            ["http://a:1", "http://b:2"]
        );
    }
}
