//! The limit on failed logins, and the client address it counts them against.
//!
//! Failures are counted twice: per (client address, user name) pair (or per (device, user
//! name) pair for a browser whose device cookie says it logged in as that user before; see
//! `device`), and per client address. A wrong password sent for `alice` from one address
//! slows down that address's further tries at `alice` only, never `alice` logging in from
//! elsewhere nor other users from that address. After [`FREE_FAILURES`] failures a pair
//! waits before its next try, twice as long after each further failure (1 s, 2 s, 4 s, ...
//! up to [`MAX_BACKOFF`]). A success forgets the pair.
//!
//! An address that failed [`ADDRESS_FREE_FAILURES`] times (whatever the names) waits the
//! same way before it may try a name that is not a user's: a flood of made-up names from
//! one address stops there, without a password check and without an entry per name. A
//! name that is a user's is still checked (its own pair's limit applies), so that the real
//! operator's correct password works from a flooded address unless that very pair is
//! being guessed; the caller answers a wrong one as it answers a refused made-up name
//! (see `login::check_login`).
//!
//! Both maps are least-recently-used caches of a fixed capacity ([`MAX_PAIRS`],
//! [`MAX_ADDRESSES`]), keyed by a SHA-256 (whatever the lengths of the name and address):
//! every try costs O(1) under the lock, nothing is ever scanned, and the memory stays
//! bounded (about 100 bytes an entry, under 10 MiB in all) whatever is sent. Entries are
//! forgotten [`FORGET_AFTER`] after their last failure, or when the cache is full and
//! they are the least recently failed.

use std::collections::hash_map::RandomState;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use hashlink::LruCache;
use sha2::{Digest, Sha256};

/// Failed (or unfinished) tries of a pair before it has to wait.
pub(crate) const FREE_FAILURES: u32 = 5;

/// Failed (or unfinished) tries from an address, whatever the names, before its tries of
/// names that are not users' wait.
pub(crate) const ADDRESS_FREE_FAILURES: u32 = 20;

/// The longest wait between tries of a pair or an address.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// How long a pair or an address is kept after its last failure.
const FORGET_AFTER: Duration = Duration::from_secs(30 * 60);

/// The most pairs kept: at about 100 bytes a pair, under 7 MiB.
pub(crate) const MAX_PAIRS: usize = 65_536;

/// The most addresses kept.
pub(crate) const MAX_ADDRESSES: usize = 16_384;

/// The SHA-256 of a pair or an address: entries of one size, whatever was sent.
type Key = [u8; 32];

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
}

impl Failures {
    /// How long this entry must wait before its next try at `now`, if at all, once it
    /// failed `free` times.
    fn wait(&self, free: u32, now: Instant) -> Option<Duration> {
        if self.count < free || now.duration_since(self.last) >= FORGET_AFTER {
            return None;
        }
        let doublings = (self.count - free).min(20);
        let next = self.last + Duration::from_secs(1u64 << doublings).min(MAX_BACKOFF);
        (next > now).then(|| next - now)
    }
}

/// Why a try must wait, and how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// This (address or device, user) pair failed too often.
    Pair(Duration),
    /// This address failed too often, and the name is not a user's.
    Address(Duration),
}

/// A try that may go on to the password check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Started {
    /// The address's own wait, when it failed too often (the name is a user's): a wrong
    /// password is then answered as a refused made-up name is.
    pub(crate) address_wait: Option<Duration>,
}

/// Who a try is counted against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Try<'a> {
    /// The client's address.
    pub(crate) address: &'a str,
    /// The address, or the device (`device:<nonce>`) a device cookie names.
    pub(crate) counted_as: &'a str,
    /// The user name tried.
    pub(crate) user: &'a str,
    /// Whether `user` is one of the configured users.
    pub(crate) known: bool,
}

impl Try<'_> {
    fn pair(&self) -> Key {
        let mut digest = Sha256::new();
        // Lengths first: no two (counted_as, user) share a key.
        for part in [self.counted_as.as_bytes(), self.user.as_bytes()] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
        digest.finalize().into()
    }

    fn address(&self) -> Key {
        Sha256::digest(self.address.as_bytes()).into()
    }
}

#[derive(Debug)]
struct Maps {
    pairs: LruCache<Key, Failures, RandomState>,
    addresses: LruCache<Key, Failures, RandomState>,
}

/// Failed logins per (address, user) pair and per address.
#[derive(Debug)]
pub(crate) struct Limiter {
    /// Held for O(1) work only: a lookup, an insert, an eviction.
    maps: Mutex<Maps>,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::with_capacity(MAX_PAIRS, MAX_ADDRESSES)
    }
}

/// Counts one more failure at `now` into the entry of `key` (a fresh one if forgotten).
fn count(map: &mut LruCache<Key, Failures, RandomState>, key: Key, now: Instant) {
    match map.get_mut(&key) {
        Some(failures) => {
            if now.duration_since(failures.last) >= FORGET_AFTER {
                failures.count = 0;
            }
            failures.count = failures.count.saturating_add(1);
            failures.last = now;
        }
        None => {
            // Evicts the least recently failed entry when full: O(1).
            map.insert(
                key,
                Failures {
                    count: 1,
                    last: now,
                },
            );
        }
    }
}

/// Takes one failure back from the entry of `key`, if it is still kept.
fn uncount(map: &mut LruCache<Key, Failures, RandomState>, key: &Key) {
    if let Some(failures) = map.peek_mut(key) {
        failures.count = failures.count.saturating_sub(1);
    }
}

impl Limiter {
    pub(crate) fn with_capacity(max_pairs: usize, max_addresses: usize) -> Limiter {
        Limiter {
            maps: Mutex::new(Maps {
                pairs: LruCache::with_hasher(max_pairs.max(1), RandomState::new()),
                addresses: LruCache::with_hasher(max_addresses.max(1), RandomState::new()),
            }),
        }
    }

    fn maps(&self) -> std::sync::MutexGuard<'_, Maps> {
        // The maps stay consistent whatever panicked while they were held.
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a try: `Err(wait)` when it must wait that long first (nothing is counted);
    /// otherwise the try is counted as a failure of its pair and its address at once (and
    /// taken back by [`succeeded`](Self::succeeded) if the password was right), so that
    /// tries sent together cannot all pass before the first of them fails.
    pub(crate) fn try_start(&self, attempt: Try<'_>) -> Result<Started, Wait> {
        let (pair, address) = (attempt.pair(), attempt.address());
        let now = Instant::now();
        let mut maps = self.maps();
        if let Some(wait) = maps
            .pairs
            .peek(&pair)
            .and_then(|f| f.wait(FREE_FAILURES, now))
        {
            return Err(Wait::Pair(wait));
        }
        let address_wait = maps
            .addresses
            .peek(&address)
            .and_then(|f| f.wait(ADDRESS_FREE_FAILURES, now));
        if let (Some(wait), false) = (address_wait, attempt.known) {
            return Err(Wait::Address(wait));
        }
        count(&mut maps.pairs, pair, now);
        count(&mut maps.addresses, address, now);
        Ok(Started { address_wait })
    }

    /// Takes back a try that was not checked (too many checks under way).
    pub(crate) fn not_tried(&self, attempt: Try<'_>) {
        let mut maps = self.maps();
        uncount(&mut maps.pairs, &attempt.pair());
        uncount(&mut maps.addresses, &attempt.address());
    }

    /// Forgets the failures of the pair, and takes this try back from its address.
    pub(crate) fn succeeded(&self, attempt: Try<'_>) {
        let mut maps = self.maps();
        maps.pairs.remove(&attempt.pair());
        uncount(&mut maps.addresses, &attempt.address());
    }

    /// How many pairs and addresses are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        let maps = self.maps();
        (maps.pairs.len(), maps.addresses.len())
    }
}

/// Refused logins logged and audited each second, at most.
pub(crate) const REFUSALS_TOLD_PER_SECOND: u32 = 20;

/// How many refused logins are logged and audited each second: at most
/// [`REFUSALS_TOLD_PER_SECOND`]; the others are counted, and the next one told says how
/// many were left out since. A flood of made-up names from many addresses would
/// otherwise write a log line and an audit row for each.
#[derive(Debug)]
pub(crate) struct Told {
    /// The second (since `start`), the refusals told in it, those left out since the last
    /// one told.
    state: Mutex<(u64, u32, u64)>,
    start: Instant,
}

impl Default for Told {
    fn default() -> Self {
        Told {
            state: Mutex::new((0, 0, 0)),
            start: Instant::now(),
        }
    }
}

impl Told {
    /// `Some(left out before it)` when this refusal is to be told; `None` when it is
    /// only counted.
    pub(crate) fn take(&self) -> Option<u64> {
        self.take_at(self.start.elapsed().as_secs())
    }

    fn take_at(&self, second: u64) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (at, told, left_out) = &mut *state;
        if *at != second {
            (*at, *told) = (second, 0);
        }
        if *told >= REFUSALS_TOLD_PER_SECOND {
            *left_out += 1;
            return None;
        }
        *told += 1;
        Some(std::mem::take(left_out))
    }
}

/// The client's address: the peer's (the server must be started with connect info), or,
/// when the peer is one of `trusted` proxies, the rightmost address of `X-Forwarded-For`
/// that is not a trusted proxy. `unknown` without connect info.
pub(crate) fn client_address(parts: &Parts, trusted: &[IpAddr]) -> String {
    let Some(peer) = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
    else {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            crate::log::warn!(
                "console: no client address (serve with \
                 `into_make_service_with_connect_info::<SocketAddr>()`): failed logins of a \
                 user count against one address for every browser that has not logged in as \
                 that user before (those carry a device cookie and count apart)"
            )
        });
        return "unknown".to_string();
    };
    if !trusted.contains(&peer) {
        return peer.to_string();
    }
    let forwarded: Vec<IpAddr> = parts
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    forwarded
        .iter()
        .rev()
        .find(|a| !trusted.contains(a))
        .copied()
        .unwrap_or(peer)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt<'a>(address: &'a str, user: &'a str, known: bool) -> Try<'a> {
        Try {
            address,
            counted_as: address,
            user,
            known,
        }
    }

    #[test]
    fn failures_slow_down_their_pair_only() {
        let limiter = Limiter::default();
        let alice = attempt("10.0.0.1", "alice", true);
        for _ in 0..FREE_FAILURES {
            assert!(limiter.try_start(alice).is_ok());
        }
        let Err(Wait::Pair(wait)) = limiter.try_start(alice) else {
            panic!("waits")
        };
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        let elsewhere = attempt("10.0.0.2", "alice", true);
        assert!(limiter.try_start(elsewhere).is_ok(), "other address");
        let bob = attempt("10.0.0.1", "bob", false);
        assert!(limiter.try_start(bob).is_ok(), "other user");
        limiter.not_tried(alice);
        assert!(limiter.try_start(alice).is_ok(), "taken back");
        limiter.succeeded(alice);
        assert!(limiter.try_start(alice).is_ok(), "forgotten");
    }

    #[test]
    fn an_address_that_failed_often_waits_for_made_up_names_only() {
        let limiter = Limiter::default();
        for i in 0..ADDRESS_FREE_FAILURES {
            let name = format!("junk{i}");
            let started = limiter.try_start(attempt("10.0.0.1", &name, false));
            assert_eq!(started, Ok(Started { address_wait: None }), "{i}");
        }
        let Err(Wait::Address(wait)) = limiter.try_start(attempt("10.0.0.1", "more", false)) else {
            panic!("the address waits")
        };
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        // Nothing was kept of the refused try.
        assert_eq!(limiter.len(), (ADDRESS_FREE_FAILURES as usize, 1));
        // A user's name is still checked, and told that the address waits...
        let alice = attempt("10.0.0.1", "alice", true);
        let started = limiter.try_start(alice).expect("checked");
        assert!(started.address_wait.is_some());
        limiter.succeeded(alice);
        // ...until that very pair is guessed too often.
        for _ in 0..FREE_FAILURES {
            assert!(limiter.try_start(alice).is_ok());
        }
        assert!(matches!(limiter.try_start(alice), Err(Wait::Pair(_))));
        // Other addresses are not held back.
        assert!(limiter
            .try_start(attempt("10.0.0.2", "more", false))
            .is_ok());
    }

    #[test]
    fn refusals_beyond_the_budget_are_counted_then_told() {
        let told = Told::default();
        for _ in 0..REFUSALS_TOLD_PER_SECOND {
            assert_eq!(told.take_at(7), Some(0));
        }
        for _ in 0..5 {
            assert_eq!(told.take_at(7), None, "counted only");
        }
        assert_eq!(
            told.take_at(8),
            Some(5),
            "the next second says how many were left out"
        );
        assert_eq!(told.take_at(8), Some(0));
    }

    /// Issue 30: 65,536 made-up pairs filled the map, then every new name scanned it twice
    /// under the lock. A flood of 100,000 made-up pairs now keeps the maps at their
    /// capacity, costs O(1) a try, and the real operator's tries still go through.
    #[test]
    fn a_flood_of_made_up_pairs_stays_bounded_and_fast() {
        let limiter = Limiter::default();
        let started = Instant::now();
        for i in 0..100_000u32 {
            // A fresh address and name each time: no limit applies, each one is kept.
            let address = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
            let name = format!("junk-{i}");
            assert!(limiter.try_start(attempt(&address, &name, false)).is_ok());
        }
        let flood = started.elapsed();
        let (pairs, addresses) = limiter.len();
        assert_eq!((pairs, addresses), (MAX_PAIRS, MAX_ADDRESSES));
        // Then 100,000 more from one address: it waits after 20, and what it is refused
        // is not kept.
        let one = Instant::now();
        let mut refused = 0;
        for i in 0..100_000u32 {
            let name = format!("more-{i}");
            if limiter
                .try_start(attempt("192.0.2.1", &name, false))
                .is_err()
            {
                refused += 1;
            }
        }
        let one = one.elapsed();
        // 20 free, then one a wait (1 s, 2 s, 4 s, ...) while the loop runs.
        let passed = 100_000 - refused;
        assert!(
            (ADDRESS_FREE_FAILURES..ADDRESS_FREE_FAILURES + 5).contains(&passed),
            "{passed} passed"
        );
        assert_eq!(limiter.len(), (MAX_PAIRS, MAX_ADDRESSES));
        // The real operator, from any address, flooded or not.
        for address in ["192.0.2.1", "198.51.100.7", "10.0.0.1"] {
            let alice = attempt(address, "alice", true);
            assert!(limiter.try_start(alice).is_ok(), "{address}");
            limiter.succeeded(alice);
        }
        eprintln!("100,000 made-up pairs in {flood:?}; 100,000 from one address in {one:?}");
        // Two scans of the full map per new name (the code before) take minutes for this
        // in a debug build; 200 µs a try is far above O(1) work, even unoptimised.
        assert!(flood < Duration::from_secs(20), "{flood:?}");
        assert!(one < Duration::from_secs(20), "{one:?}");
    }
}
