//! The limit on failed logins, and the client address it counts them against.
//!
//! Failures are counted per (client address, user name) pair (or per (device, user name)
//! pair for a browser whose device cookie says it logged in as that user before; see
//! `device`): a wrong password sent for
//! `alice` from one address slows down that address's further tries at `alice` only,
//! never `alice` logging in from elsewhere nor other users from that address. After
//! [`FREE_FAILURES`] failures a pair waits before its next try, twice as long after each
//! further failure (1 s, 2 s, 4 s, ... up to [`MAX_BACKOFF`]). A success forgets the
//! pair. The map is bounded: at most [`MAX_PAIRS`] pairs, each keyed by the SHA-256 of its
//! user name (whatever its length), the pair with the oldest failure evicted first, and
//! pairs forgotten [`FORGET_AFTER`] after their last failure.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

/// Failed (or unfinished) tries of a pair before it has to wait.
pub(crate) const FREE_FAILURES: u32 = 5;

/// The longest wait between tries of a pair.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// How long a pair is kept after its last failure.
const FORGET_AFTER: Duration = Duration::from_secs(30 * 60);

/// The most pairs kept: at about 100 bytes a pair, under 10 MiB.
pub(crate) const MAX_PAIRS: usize = 65_536;

/// A client address and the SHA-256 of a user name.
type Pair = (String, [u8; 32]);

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
}

impl Failures {
    /// When the pair may try again.
    fn next_try(&self) -> Instant {
        if self.count < FREE_FAILURES {
            return self.last;
        }
        let doublings = (self.count - FREE_FAILURES).min(20);
        self.last + Duration::from_secs(1u64 << doublings).min(MAX_BACKOFF)
    }
}

/// Failed logins per (address, user) pair.
#[derive(Debug)]
pub(crate) struct Limiter {
    pairs: Mutex<HashMap<Pair, Failures>>,
    max_pairs: usize,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::with_capacity(MAX_PAIRS)
    }
}

fn pair(address: &str, user: &str) -> Pair {
    (address.to_string(), Sha256::digest(user.as_bytes()).into())
}

impl Limiter {
    pub(crate) fn with_capacity(max_pairs: usize) -> Limiter {
        Limiter {
            pairs: Mutex::new(HashMap::new()),
            max_pairs: max_pairs.max(1),
        }
    }

    /// Starts a try of `user` from `address`: `Err(wait)` when the pair must wait that long
    /// first; otherwise the try is counted as a failure at once (and forgotten by
    /// [`succeeded`](Self::succeeded) if the password was right), so that tries sent
    /// together cannot all pass before the first of them fails.
    pub(crate) fn try_start(&self, address: &str, user: &str) -> Result<(), Duration> {
        let key = pair(address, user);
        let now = Instant::now();
        let mut pairs = self.pairs.lock().expect("limiter lock");
        if let Some(failures) = pairs.get(&key) {
            let next = failures.next_try();
            if next > now && now.duration_since(failures.last) < FORGET_AFTER {
                return Err(next - now);
            }
        }
        if !pairs.contains_key(&key) && pairs.len() >= self.max_pairs {
            pairs.retain(|_, f| now.duration_since(f.last) < FORGET_AFTER);
            if pairs.len() >= self.max_pairs {
                let oldest = pairs
                    .iter()
                    .min_by_key(|(_, f)| f.last)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    pairs.remove(&oldest);
                }
            }
        }
        let entry = pairs.entry(key).or_insert(Failures {
            count: 0,
            last: now,
        });
        if now.duration_since(entry.last) >= FORGET_AFTER {
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
        Ok(())
    }

    /// Takes back a try that was not checked (too many checks under way).
    pub(crate) fn not_tried(&self, address: &str, user: &str) {
        let mut pairs = self.pairs.lock().expect("limiter lock");
        if let Some(failures) = pairs.get_mut(&pair(address, user)) {
            failures.count = failures.count.saturating_sub(1);
        }
    }

    /// Forgets the failures of `user` from `address`.
    pub(crate) fn succeeded(&self, address: &str, user: &str) {
        self.pairs
            .lock()
            .expect("limiter lock")
            .remove(&pair(address, user));
    }

    /// How many pairs are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pairs.lock().expect("limiter lock").len()
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

    #[test]
    fn failures_slow_down_their_pair_only() {
        let limiter = Limiter::default();
        for _ in 0..FREE_FAILURES {
            assert_eq!(limiter.try_start("10.0.0.1", "alice"), Ok(()));
        }
        let wait = limiter.try_start("10.0.0.1", "alice").expect_err("waits");
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert_eq!(
            limiter.try_start("10.0.0.2", "alice"),
            Ok(()),
            "other address"
        );
        assert_eq!(limiter.try_start("10.0.0.1", "bob"), Ok(()), "other user");
        limiter.not_tried("10.0.0.1", "alice");
        assert_eq!(limiter.try_start("10.0.0.1", "alice"), Ok(()), "taken back");
        limiter.succeeded("10.0.0.1", "alice");
        assert_eq!(limiter.try_start("10.0.0.1", "alice"), Ok(()), "forgotten");
    }

    #[test]
    fn the_map_keeps_at_most_its_capacity_and_evicts_the_oldest() {
        let limiter = Limiter::with_capacity(100);
        let long_name = "x".repeat(64 << 10);
        for i in 0..1_000 {
            let _ = limiter.try_start("10.0.0.1", &format!("{long_name}{i}"));
        }
        assert_eq!(limiter.len(), 100);
        for _ in 0..FREE_FAILURES {
            let _ = limiter.try_start("10.0.0.9", "alice");
        }
        // The newest pair stays; the oldest went.
        assert!(limiter.try_start("10.0.0.9", "alice").is_err());
        assert_eq!(limiter.len(), 100);
    }
}
