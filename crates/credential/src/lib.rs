//! Secrets that prove who a caller is, for every server of the project: the node's
//! tenants (`netaccel_node::core::tenant::auth`) and the registry's principals
//! (`netaccel_registry::auth`) keep their tokens here and check them the same way.
//!
//! A token is configured plain (`token`, compared in constant time) or, the production
//! way, as an argon2id PHC string (`token_hash`, what `hash-token` prints). An argon2
//! verification costs tens of milliseconds by design, so a server never pays it per
//! request: [`VerdictCache`] remembers what a token proved, keyed by a keyed hash of the
//! token (never the token), bounded, and forgotten at every reload of the credentials.
//!
//! Not here: what a verdict means (a tenant, a role: the servers' own policy modules),
//! where a token travels on the wire (the front ends), and the audit log.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Compares a secret (token) with what a client sent without stopping at the first
/// differing byte, so response timing does not reveal how much of it was right.
pub use registry_api::secret_eq;

/// A configured credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Secret {
    /// None configured: nothing proves it.
    None,
    /// A plain token (compatibility; compared in constant time).
    Plain(String),
    /// An argon2 PHC string, checked when read.
    Hashed(String),
}

impl Secret {
    /// The secret of `who` from its configuration's `token` (empty: none) and
    /// `token_hash`; both set, or a hash that is not an argon2 PHC string, is an error
    /// naming `who` and the command that makes a hash.
    pub fn from_config(
        who: &str,
        token: &str,
        token_hash: Option<&str>,
        hash_command: &str,
    ) -> Result<Secret, String> {
        match (token.is_empty(), token_hash) {
            (false, Some(_)) => Err(format!(
                "{who} has both token and token_hash: keep token_hash"
            )),
            (false, None) => Ok(Secret::Plain(token.to_string())),
            (true, Some(phc)) => {
                argon2::PasswordHash::new(phc).map_err(|e| {
                    format!(
                        "{who}: token_hash is not an argon2 PHC string ({e}); make one with `{hash_command}`"
                    )
                })?;
                Ok(Secret::Hashed(phc.to_string()))
            }
            (true, None) => Ok(Secret::None),
        }
    }

    /// Whether `token` is this secret (argon2 for a hash: slow, see the module docs).
    pub fn proves(&self, token: &str) -> bool {
        match self {
            Secret::None => false,
            Secret::Plain(t) => secret_eq(token, t),
            Secret::Hashed(phc) => verify_hash(phc, token),
        }
    }

    /// The plain token, if that is how it is configured (to refuse two holders of one).
    pub fn plain(&self) -> Option<&str> {
        match self {
            Secret::Plain(t) => Some(t),
            _ => None,
        }
    }
}

/// Whether `token` matches the argon2 PHC string `phc`.
fn verify_hash(phc: &str, token: &str) -> bool {
    use argon2::PasswordVerifier;
    match argon2::PasswordHash::new(phc) {
        Ok(hash) => argon2::Argon2::default()
            .verify_password(token.as_bytes(), &hash)
            .is_ok(),
        Err(_) => false,
    }
}

/// The argon2id PHC string of `token`, with a fresh random salt: what the servers'
/// `hash-token` commands print for `token_hash`.
pub fn hash_token(token: &str) -> Result<String, String> {
    use argon2::PasswordHasher;
    let mut salt = [0u8; 16];
    // SAFETY: getrandom fills at most `salt.len()` bytes of the buffer it is given.
    let n = unsafe { libc::getrandom(salt.as_mut_ptr().cast(), salt.len(), 0) };
    if n != salt.len() as isize {
        return Err("cannot read random bytes for the salt".to_string());
    }
    let salt = argon2::password_hash::SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    argon2::Argon2::default()
        .hash_password(token.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// Whether `name` matches one of `patterns`: a name exactly, or a prefix before a
/// final `*` (the policies' patterns of both servers: what a tenant may call, load or
/// register; which nodes and functions a registry principal speaks for).
pub fn matches_any(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// Checks a pattern of `who`'s policy: a name, or a prefix and one final `*`.
pub fn check_pattern(who: &str, pattern: &str) -> Result<(), String> {
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    if body.contains('*') || pattern.is_empty() {
        return Err(format!(
            "{who}: pattern `{pattern}` is not valid: a name, or a prefix and a final `*`"
        ));
    }
    Ok(())
}

/// `PROGRAM hash-token`: reads a token on stdin (its first line) and prints the
/// argon2id PHC string to put in a `token_hash`; exit status 2 for a missing or
/// malformed token.
pub fn hash_token_command(program: &str) -> std::process::ExitCode {
    use std::process::ExitCode;
    let mut line = String::new();
    if let Err(e) = std::io::stdin().read_line(&mut line) {
        eprintln!("{program} hash-token: cannot read the token: {e}");
        return ExitCode::from(2);
    }
    let token = line.trim_end_matches(['\n', '\r']);
    if token.is_empty() || token.contains(|c: char| c.is_whitespace() || c.is_control()) {
        eprintln!("{program} hash-token: give the token on stdin, one line without spaces");
        return ExitCode::from(2);
    }
    match hash_token(token) {
        Ok(phc) => {
            println!("{phc}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{program} hash-token: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How much time a second the checks of tokens not seen before may take: argon2 is
/// slow by design, so without a bound a flood of made-up tokens would keep a server's
/// threads verifying them. Spent time is counted in whole seconds of the monotonic
/// clock; one check may overrun the budget it started within.
pub struct CheckBudget(Mutex<Window>);

/// The budget a second, and the second now: when it began and what was spent in it.
struct Window {
    per_second: Duration,
    began: Instant,
    spent: Duration,
}

impl CheckBudget {
    /// A budget of `per_second` of checking each second.
    pub fn new(per_second: Duration) -> CheckBudget {
        CheckBudget(Mutex::new(Window {
            per_second,
            began: Instant::now(),
            spent: Duration::ZERO,
        }))
    }

    /// The window, a new second begun if the last one is over.
    fn now(&self) -> parking_lot::MutexGuard<'_, Window> {
        let mut w = self.0.lock();
        if w.began.elapsed() >= Duration::from_secs(1) {
            w.began = Instant::now();
            w.spent = Duration::ZERO;
        }
        w
    }

    /// Whether a check may start now.
    pub fn has_time(&self) -> bool {
        let w = self.now();
        w.spent < w.per_second
    }

    /// Changes the time a second (a reload of the configuration).
    pub fn set(&self, per_second: Duration) {
        self.0.lock().per_second = per_second;
    }

    /// Counts a check that took `took`.
    pub fn spend(&self, took: Duration) {
        self.now().spent += took;
    }
}

/// What a token proved: the admin token, the secret of a holder (its index in the
/// list checked), or nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Admin,
    Holder(usize),
    Unknown,
}

/// What `token` proves: the admin token (`admin`, when set) first, then the first of
/// `secrets` it proves (argon2 for hashed ones: slow, see the module docs). Both
/// servers check tokens this way, through [`VerdictCache`].
pub fn prove<'a>(
    token: &str,
    admin: Option<&str>,
    secrets: impl IntoIterator<Item = &'a Secret>,
) -> Verdict {
    if admin.is_some_and(|a| secret_eq(token, a)) {
        return Verdict::Admin;
    }
    match secrets.into_iter().position(|s| s.proves(token)) {
        Some(i) => Verdict::Holder(i),
        None => Verdict::Unknown,
    }
}

/// Tokens checked lately: what each proved (`V`), by a keyed hash of the token, for
/// one generation of the credentials. Bounded: when full it starts over, which costs
/// the next callers one verification each.
pub struct VerdictCache<V> {
    inner: Mutex<Generation<V>>,
    keys: [std::collections::hash_map::RandomState; 2],
    max: usize,
}

struct Generation<V> {
    generation: u64,
    map: HashMap<u128, V>,
}

impl<V: Copy> VerdictCache<V> {
    /// A cache of at most `max` tokens (at least one).
    pub fn new(max: usize) -> VerdictCache<V> {
        assert!(max > 0, "a verdict cache holds at least one token");
        VerdictCache {
            inner: Mutex::new(Generation {
                generation: 0,
                map: HashMap::new(),
            }),
            keys: Default::default(),
            max,
        }
    }

    /// What `token` proves under credentials of `generation` (generations only grow):
    /// the cached verdict, or `check()`'s (called without the cache's lock held, so a
    /// slow argon2 check does not stall other callers), remembered if the generation is
    /// still the newest. A caller holding an older generation is answered by its own
    /// check and changes nothing. A token not remembered is checked only while `budget`
    /// has time left this second: `None` when it has none (the caller answers "busy,
    /// try again"), and nothing is remembered; remembered tokens are answered whatever
    /// the budget, so a flood of new tokens cannot lock out callers already known.
    pub fn get_or_check_within(
        &self,
        generation: u64,
        token: &str,
        budget: &CheckBudget,
        check: impl FnOnce() -> V,
    ) -> Option<V> {
        let key = self.key(token);
        {
            let mut cache = self.inner.lock();
            if cache.generation < generation {
                cache.map.clear();
                cache.generation = generation;
            }
            if cache.generation == generation {
                if let Some(v) = cache.map.get(&key) {
                    return Some(*v);
                }
            }
        }
        if !budget.has_time() {
            return None;
        }
        let started = Instant::now();
        let verdict = check();
        budget.spend(started.elapsed());
        let mut cache = self.inner.lock();
        if cache.generation == generation {
            if cache.map.len() >= self.max {
                cache.map.clear();
            }
            cache.map.insert(key, verdict);
        }
        Some(verdict)
    }

    /// Moves the remembered verdicts to credentials of `generation` (a reload): `map`
    /// says what each verdict is under the new credentials — the same principal when
    /// its secret did not change — or `None` to forget it. Without this a reload would
    /// make every caller's token be checked again at once, more than the check budget
    /// allows in a second.
    pub fn carry_over(&self, generation: u64, mut map: impl FnMut(V) -> Option<V>) {
        let mut cache = self.inner.lock();
        assert!(
            generation > cache.generation,
            "credentials' generations only grow"
        );
        cache.generation = generation;
        cache.map.retain(|_, v| match map(*v) {
            Some(new) => {
                *v = new;
                true
            }
            None => false,
        });
    }

    /// Tokens remembered now.
    pub fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    /// Whether no token is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keyed hash a token is cached under (never the token): also what a
    /// connection may remember a token by, to tell whether the next request's is the
    /// same.
    pub fn key(&self, token: &str) -> u128 {
        let hash = |k: &std::collections::hash_map::RandomState| {
            let mut h = k.build_hasher();
            h.write(token.as_bytes());
            h.finish()
        };
        (u128::from(hash(&self.keys[0])) << 64) | u128::from(hash(&self.keys[1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verdict with time to spare for checking.
    fn get<V: Copy>(
        cache: &VerdictCache<V>,
        generation: u64,
        token: &str,
        f: impl FnOnce() -> V,
    ) -> V {
        let budget = CheckBudget::new(Duration::from_secs(3600));
        cache
            .get_or_check_within(generation, token, &budget, f)
            .unwrap()
    }

    #[test]
    fn the_admin_token_is_proved_first_then_the_first_holder() {
        let a = Secret::Plain("ta".into());
        let b = Secret::Plain("tb".into());
        let none = Secret::None;
        assert_eq!(prove("adm", Some("adm"), [&a, &b]), Verdict::Admin);
        assert_eq!(
            prove("tb", Some("adm"), [&none, &a, &b]),
            Verdict::Holder(2)
        );
        assert_eq!(prove("tc", None, [&a, &b]), Verdict::Unknown);
        assert_eq!(prove("", None, [&none]), Verdict::Unknown);
    }
    use std::cell::Cell;

    #[test]
    fn a_hashed_token_proves_itself_and_nothing_else() {
        let phc = hash_token("s3cret").unwrap();
        assert!(phc.starts_with("$argon2id$"), "{phc}");
        let secret = Secret::from_config("tenant `a`", "", Some(&phc), "x hash-token").unwrap();
        assert!(secret.proves("s3cret"));
        assert!(!secret.proves("s3cre"));
        assert!(!secret.proves(""));
        // A fresh salt every time.
        assert_ne!(hash_token("s3cret").unwrap(), phc);
    }

    #[test]
    fn configurations_are_checked() {
        let e = Secret::from_config("tenant `a`", "t", Some("$argon2id$x"), "x hash-token")
            .unwrap_err();
        assert!(e.contains("both token and token_hash"), "{e}");
        let e = Secret::from_config("tenant `a`", "", Some("plain"), "x hash-token").unwrap_err();
        assert!(
            e.contains("tenant `a`") && e.contains("`x hash-token`"),
            "{e}"
        );
        assert_eq!(
            Secret::from_config("a", "", None, "x").unwrap(),
            Secret::None
        );
        let plain = Secret::from_config("a", "tok", None, "x").unwrap();
        assert!(plain.proves("tok") && !plain.proves("tok2") && !Secret::None.proves(""));
        assert_eq!(plain.plain(), Some("tok"));
    }

    #[test]
    fn new_tokens_are_checked_within_the_budget_and_known_ones_always() {
        let cache = VerdictCache::<u8>::new(16);
        let budget = CheckBudget::new(Duration::from_millis(20));
        let slow = |v| {
            std::thread::sleep(Duration::from_millis(25));
            v
        };
        // The first check starts within the budget (and overruns it).
        assert_eq!(
            cache.get_or_check_within(1, "known", &budget, || slow(1)),
            Some(1)
        );
        // The budget is spent: a new token is not checked, and not remembered.
        assert_eq!(cache.get_or_check_within(1, "new", &budget, || 2), None);
        assert_eq!(cache.len(), 1);
        // A known one is answered from memory.
        assert_eq!(
            cache.get_or_check_within(1, "known", &budget, || 9),
            Some(1)
        );
        // The next second brings a fresh budget.
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(cache.get_or_check_within(1, "new", &budget, || 2), Some(2));
    }

    #[test]
    fn a_reload_carries_over_what_still_holds() {
        let cache = VerdictCache::<u8>::new(16);
        get(&cache, 1, "kept", || 1);
        get(&cache, 1, "moved", || 2);
        get(&cache, 1, "gone", || 3);
        cache.carry_over(2, |v| match v {
            1 => Some(1),
            2 => Some(7),
            _ => None,
        });
        assert_eq!(cache.len(), 2);
        assert_eq!(get(&cache, 2, "kept", || 0), 1);
        assert_eq!(get(&cache, 2, "moved", || 0), 7);
        assert_eq!(get(&cache, 2, "gone", || 0), 0);
    }

    #[test]
    fn the_cache_checks_once_per_generation_and_stays_bounded() {
        let cache = VerdictCache::<u8>::new(2);
        let calls = Cell::new(0);
        let check = |v| {
            calls.set(calls.get() + 1);
            v
        };
        assert_eq!(get(&cache, 1, "a", || check(7)), 7);
        assert_eq!(get(&cache, 1, "a", || check(8)), 7);
        assert_eq!(calls.get(), 1);
        // A new generation forgets every verdict.
        assert_eq!(get(&cache, 2, "a", || check(9)), 9);
        assert_eq!(calls.get(), 2);
        get(&cache, 2, "b", || check(1));
        assert_eq!(cache.len(), 2);
        // Full: starts over rather than growing.
        get(&cache, 2, "c", || check(1));
        assert_eq!(cache.len(), 1);
        // A caller of an older generation gets its own check and changes nothing.
        assert_eq!(get(&cache, 1, "c", || check(3)), 3);
        assert_eq!(get(&cache, 2, "c", || check(5)), 1);
        assert_eq!(cache.len(), 1);
    }
}
