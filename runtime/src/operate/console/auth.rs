//! Logins, sessions, CSRF tokens, bearer tokens and the limit on failed logins.
//!
//! A session is a random 256-bit token in an `HttpOnly`, `SameSite=Strict` cookie (and
//! `Secure` when configured); the server keeps only its SHA-256, with the user, role and
//! the session's CSRF token, which every state-changing request must carry (a form field
//! `csrf`, or the `X-CSRF-Token` header). Secrets are compared in constant time.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordHasher, SaltString};
use argon2::Argon2;
use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::config::{ConsoleConfig, Role};
use super::State;
use crate::base::error::{Error, Result};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "async_exec_console";

/// How long a session lasts without a new login.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Hashes a password with argon2id (a fresh salt), for [`ConsoleConfig::user`] or
/// `ASYNC_EXEC_CONSOLE_USERS`.
///
/// ```
/// let hash = async_exec::console::hash_password("correct horse battery staple").unwrap();
/// assert!(hash.starts_with("$argon2id$"));
/// ```
pub fn hash_password(password: &str) -> Result<String> {
    let mut salt = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt)
        .map_err(|e| Error::Console(format!("could not encode a salt: {e}")))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| Error::Console(format!("could not hash the password: {e}")))
}

/// The hex SHA-256 of an API token, for [`ConsoleConfig::api_token_sha256`] or
/// `ASYNC_EXEC_CONSOLE_TOKENS`. Make tokens long and random (32 bytes or more).
///
/// ```
/// let digest = async_exec::console::token_digest("test");
/// assert_eq!(digest, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
/// ```
pub fn token_digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex(&bytes)
}

/// Who is asking, and how they proved it.
#[derive(Debug, Clone)]
pub(crate) struct Who {
    pub(crate) name: String,
    pub(crate) role: Role,
    /// The session's CSRF token; `None` for a bearer token (no cookie, nothing to forge).
    pub(crate) csrf: Option<String>,
}

impl Who {
    /// Whether `sent` is this session's CSRF token (always, for a bearer token).
    pub(crate) fn csrf_ok(&self, sent: Option<&str>) -> bool {
        match (&self.csrf, sent) {
            (None, _) => true,
            (Some(ours), Some(sent)) => bool::from(ours.as_bytes().ct_eq(sent.as_bytes())),
            (Some(_), None) => false,
        }
    }
}

#[derive(Debug)]
struct Session {
    who: Who,
    expires: Instant,
    /// Its last request, for the idle timeout.
    seen: Instant,
}

/// Sessions, by the SHA-256 of their token.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<[u8; 32], Session>>,
}

impl Sessions {
    /// A new session for `name`; returns its token.
    pub(crate) fn open(&self, name: &str, role: Role) -> String {
        let token = random_token();
        let mut map = self.map.lock().expect("session lock");
        let now = Instant::now();
        map.retain(|_, s| s.expires > now);
        map.insert(
            Sha256::digest(token.as_bytes()).into(),
            Session {
                who: Who {
                    name: name.to_string(),
                    role,
                    csrf: Some(random_token()),
                },
                expires: now + SESSION_TTL,
                seen: now,
            },
        );
        token
    }

    /// The session of `token`, unless it expired or went unused for `idle`; marks it used.
    pub(crate) fn find(&self, token: &str, idle: Duration) -> Option<Who> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut map = self.map.lock().expect("session lock");
        let now = Instant::now();
        let session = map.get_mut(&key)?;
        if session.expires <= now || now.duration_since(session.seen) >= idle {
            map.remove(&key);
            return None;
        }
        session.seen = now;
        Some(session.who.clone())
    }

    pub(crate) fn close(&self, token: &str) {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.map.lock().expect("session lock").remove(&key);
    }
}

/// A hash to verify against when the user does not exist, so that the answer takes as
/// long as for a wrong password.
fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| hash_password("decoy").expect("argon2 hashes"))
}

/// The role of user `name` (`None` when there is no such user) and the hash to check a
/// password against: theirs, or a decoy's, so that the answer takes as long either way.
pub(crate) fn user_hash(config: &ConsoleConfig, name: &str) -> (Option<Role>, String) {
    let user = config
        .users
        .iter()
        .find(|u| bool::from(u.name.as_bytes().ct_eq(name.as_bytes())));
    let hash = user.map_or(decoy_hash(), |u| u.hash.as_str());
    (user.map(|u| u.role), hash.to_string())
}

/// Whether `name` is one of the configured users (every name compared in constant time).
pub(crate) fn is_user(config: &ConsoleConfig, name: &str) -> bool {
    config.users.iter().fold(false, |found, u| {
        found | bool::from(u.name.as_bytes().ct_eq(name.as_bytes()))
    })
}

/// Whether `password` matches the argon2 `hash` (slow on purpose: call it off the async
/// workers, through [`super::gate::Gate`]).
#[cfg(test)]
pub(crate) fn password_matches(hash: &str, password: &str) -> bool {
    password_matches_in(hash, password, &mut Vec::new())
}

/// Whether `password` matches the argon2 `hash`, computed in `memory` (grown to the
/// hash's memory cost and kept for the next check: the gate's threads reuse theirs,
/// rather than have the allocator keep a fresh 19 MiB per check).
pub(crate) fn password_matches_in(
    hash: &str,
    password: &str,
    memory: &mut Vec<argon2::Block>,
) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        argon2::Algorithm::try_from(parsed.algorithm),
        argon2::Params::try_from(&parsed),
    ) else {
        return false;
    };
    let version = match parsed.version.map(argon2::Version::try_from).transpose() {
        Ok(version) => version.unwrap_or_default(),
        Err(_) => return false,
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    memory.resize(params.block_count(), argon2::Block::default());
    let mut computed = zeroize::Zeroizing::new(vec![0u8; expected.len()]);
    let hashed = Argon2::new(algorithm, version, params).hash_password_into_with_memory(
        password.as_bytes(),
        salt,
        &mut computed,
        &mut memory[..],
    );
    hashed.is_ok() && bool::from(computed.as_slice().ct_eq(expected.as_bytes()))
}

/// The user `name`'s role when `password` is theirs.
#[cfg(test)]
pub(crate) fn verify_password(config: &ConsoleConfig, name: &str, password: &str) -> Option<Role> {
    let (role, hash) = user_hash(config, name);
    role.filter(|_| password_matches(&hash, password))
}

/// The token's name and role when it is one of the configured ones.
fn verify_token(config: &ConsoleConfig, token: &str) -> Option<Who> {
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let mut found = None;
    for t in &config.tokens {
        if bool::from(t.digest.ct_eq(&digest)) {
            found = Some(Who {
                name: t.name.clone(),
                role: t.role,
                csrf: None,
            });
        }
    }
    found
}

/// The value of cookie `name` in the request.
pub(crate) fn cookie<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// The path the console is mounted under (`""` at the root, `/console`, ...).
pub(crate) fn base_of(parts: &Parts) -> String {
    let inner = parts.uri.path();
    let full = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(inner, |original| original.0.path());
    let base = full.strip_suffix(inner).unwrap_or(full);
    base.trim_end_matches('/').to_string()
}

/// Whether the request came over TLS: an `https` URI, or `X-Forwarded-Proto: https`
/// from a proxy in front.
pub(crate) fn over_tls(parts: &Parts) -> bool {
    parts.uri.scheme_str() == Some("https")
        || parts
            .headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// The `Set-Cookie` value of a session.
pub(crate) fn session_cookie(base: &str, token: &str, secure: bool) -> String {
    let path = if base.is_empty() { "/" } else { base };
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={token}; Path={path}; HttpOnly; SameSite=Strict; Max-Age=43200{secure}")
}

/// The `Set-Cookie` value that ends a session.
pub(crate) fn cleared_cookie(base: &str, secure: bool) -> String {
    let path = if base.is_empty() { "/" } else { base };
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}=; Path={path}; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

fn session_of(parts: &Parts, state: &State) -> Option<Who> {
    cookie(parts, COOKIE).and_then(|token| state.sessions.find(token, state.config.idle_timeout))
}

/// `next` when it is a path inside the console to go back to after a login: relative to
/// the mount path, starting with one `/`, no backslash, no control character, not the
/// login page itself. Anything else (`//evil.example`, `https://...`) is ignored.
pub(crate) fn safe_next(next: &str) -> Option<&str> {
    let inside = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control)
        && !next.starts_with("/login")
        && next.len() <= 2048;
    inside.then_some(next)
}

/// The caller, by session cookie or bearer token, if any.
pub(crate) fn caller(parts: &Parts, state: &State) -> Option<Who> {
    let bearer = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match bearer {
        Some(token) => verify_token(&state.config, token.trim()),
        None => session_of(parts, state),
    }
}

/// A page's visitor, logged in; others are sent to the login page.
#[derive(Debug)]
pub(crate) struct PageWho {
    pub(crate) who: Who,
    pub(crate) base: String,
}

impl FromRequestParts<std::sync::Arc<State>> for PageWho {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &std::sync::Arc<State>,
    ) -> std::result::Result<Self, Self::Rejection> {
        let base = base_of(parts);
        match session_of(parts, state) {
            Some(who) => Ok(PageWho { who, base }),
            None => {
                // Back to the page asked for after the login (a page, not a form's post).
                let asked = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let next = match (&parts.method, safe_next(asked)) {
                    (&axum::http::Method::GET, Some(next)) if next != "/" => {
                        format!("?next={}", super::filter::urlencode(next))
                    }
                    _ => String::new(),
                };
                Err(Redirect::to(&format!("{base}/login{next}")).into_response())
            }
        }
    }
}

/// A JSON API caller: a session (whose writes carry `X-CSRF-Token`) or a bearer token;
/// others get 401.
#[derive(Debug)]
pub(crate) struct ApiWho {
    pub(crate) who: Who,
    /// The `X-CSRF-Token` header, if sent.
    pub(crate) csrf_header: Option<String>,
}

impl FromRequestParts<std::sync::Arc<State>> for ApiWho {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &std::sync::Arc<State>,
    ) -> std::result::Result<Self, Self::Rejection> {
        let csrf_header = parts
            .headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match caller(parts, state) {
            Some(who) => Ok(ApiWho { who, csrf_header }),
            None => Err(super::reads::problem(
                StatusCode::UNAUTHORIZED,
                "log in (POST /login) and send the session cookie, or send `Authorization: Bearer <token>`",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_verify_against_their_hash_only() {
        let hash = hash_password("secret").unwrap();
        let config = ConsoleConfig::new().user("alice", Role::Viewer, &hash);
        assert_eq!(
            verify_password(&config, "alice", "secret"),
            Some(Role::Viewer)
        );
        assert_eq!(verify_password(&config, "alice", "Secret"), None);
        assert_eq!(verify_password(&config, "bob", "secret"), None);
    }

    #[test]
    fn only_paths_inside_the_console_are_gone_back_to() {
        assert_eq!(
            safe_next("/requests?status=dead"),
            Some("/requests?status=dead")
        );
        for outside in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil.example",
            "evil",
            "/login",
            "/x\nSet-Cookie: a=b",
        ] {
            assert_eq!(safe_next(outside), None, "{outside}");
        }
    }

    #[test]
    fn csrf_tokens_must_match() {
        let who = Who {
            name: "a".into(),
            role: Role::Operator,
            csrf: Some("abc".into()),
        };
        assert!(who.csrf_ok(Some("abc")));
        assert!(!who.csrf_ok(Some("abd")));
        assert!(!who.csrf_ok(None));
    }
}
