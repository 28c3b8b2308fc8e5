//! Device cookies: a browser that logged in as a user before is counted apart from
//! everyone else when it tries that user again.
//!
//! Failed logins are limited per (client address, user) pair (see `limiter`). When
//! the console is served without connect info every client's address is `unknown`, and
//! behind a NAT or a proxy that is not trusted many clients share one: five wrong
//! passwords for `alice` from anywhere would then lock `alice` out of every browser.
//! After a successful login the console sets a device cookie, an HMAC over the user's
//! name, a random nonce and the time it was issued, keyed by a secret of this process.
//! A login that carries a valid device cookie for the user it tries is counted under
//! that device instead of the address (OWASP's "device cookies" against lockouts), so
//! others' failures do not hold it back, and its own failures still slow it down.
//!
//! The key lives in this process: after a restart, or on another instance behind a load
//! balancer, a device cookie is not recognised and the login counts against its address
//! as before, until the next successful login sets a new one.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::request::Parts;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use zeroize::Zeroizing;

/// The device cookie's name.
pub(crate) const DEVICE_COOKIE: &str = "async_exec_device";

/// How long a device cookie is honoured after its login.
pub(crate) const DEVICE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The longest device cookie read (a longer one is not one of ours).
const MAX_COOKIE: usize = 256;

/// Issues and checks device cookies with a key of this process.
pub(crate) struct Devices {
    key: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices").finish_non_exhaustive()
    }
}

impl Default for Devices {
    fn default() -> Self {
        let mut key = Zeroizing::new([0u8; 32]);
        rand::rngs::OsRng.fill_bytes(&mut *key);
        Devices { key }
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Devices {
    fn mac(&self, user: &str, nonce: &str, issued: u64) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&*self.key).expect("HMAC takes any key length");
        // Lengths first: no two (user, nonce, issued) share a message.
        for part in [user.as_bytes(), nonce.as_bytes(), &issued.to_be_bytes()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// A fresh device cookie's value for `user`: `<nonce>.<issued>.<mac>`.
    pub(crate) fn issue(&self, user: &str) -> String {
        self.issue_at(user, unix_seconds())
    }

    fn issue_at(&self, user: &str, issued: u64) -> String {
        let mut nonce = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let nonce = hex(&nonce);
        let tag = hex(&self.mac(user, &nonce, issued).finalize().into_bytes());
        format!("{nonce}.{issued}.{tag}")
    }

    /// The limiter's name for the device of `value` when it is a device cookie this
    /// process issued for `user` less than [`DEVICE_TTL`] ago: `device:<nonce>`.
    pub(crate) fn recognise(&self, value: &str, user: &str) -> Option<String> {
        self.recognise_at(value, user, unix_seconds())
    }

    fn recognise_at(&self, value: &str, user: &str, now: u64) -> Option<String> {
        if value.len() > MAX_COOKIE {
            return None;
        }
        let mut parts = value.split('.');
        let (nonce, issued, tag) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || nonce.len() != 32 {
            return None;
        }
        let issued: u64 = issued.parse().ok()?;
        if now.saturating_sub(issued) > DEVICE_TTL.as_secs() || issued > now + 60 {
            return None;
        }
        let tag = unhex(tag)?;
        // Constant time (Mac::verify_slice).
        self.mac(user, nonce, issued).verify_slice(&tag).ok()?;
        Some(format!("device:{nonce}"))
    }

    /// The limiter's name for the device the request's cookie names for `user`, if any.
    pub(crate) fn of_request(&self, parts: &Parts, user: &str) -> Option<String> {
        super::auth::cookie(parts, DEVICE_COOKIE).and_then(|value| self.recognise(value, user))
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The `Set-Cookie` value of a device cookie.
pub(crate) fn device_cookie(base: &str, value: &str, secure: bool) -> String {
    let path = if base.is_empty() { "/" } else { base };
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{DEVICE_COOKIE}={value}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        DEVICE_TTL.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_cookie_names_its_user_only_for_its_time() {
        let devices = Devices::default();
        let now = unix_seconds();
        let cookie = devices.issue_at("alice", now);
        let device = devices
            .recognise_at(&cookie, "alice", now)
            .expect("alice's");
        assert!(device.starts_with("device:"), "{device}");
        assert_eq!(devices.recognise_at(&cookie, "bob", now), None, "bob");
        let ttl = DEVICE_TTL.as_secs();
        assert_eq!(
            devices.recognise_at(&cookie, "alice", now + ttl + 1),
            None,
            "expired"
        );
        // Another process's key, a changed time or tag, and junk are not recognised.
        assert_eq!(Devices::default().recognise_at(&cookie, "alice", now), None);
        let (nonce, rest) = cookie.split_once('.').unwrap();
        let (_, tag) = rest.split_once('.').unwrap();
        let later = format!("{nonce}.{}.{tag}", now + 1);
        assert_eq!(devices.recognise_at(&later, "alice", now + 1), None);
        let flipped = format!("{}0", &cookie[..cookie.len() - 1]);
        let flipped = if flipped == cookie {
            format!("{}1", &cookie[..cookie.len() - 1])
        } else {
            flipped
        };
        assert_eq!(devices.recognise_at(&flipped, "alice", now), None);
        for junk in ["", "a.b.c", "..", &"x".repeat(1000), "é.1.zz"] {
            assert_eq!(devices.recognise_at(junk, "alice", now), None, "{junk}");
        }
    }
}
