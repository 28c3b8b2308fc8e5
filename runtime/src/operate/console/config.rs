//! Who may use the console, and how it is served.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::base::error::{Error, Result};

/// What a console user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Look at every page; no actions.
    Viewer,
    /// Every page and every action.
    Operator,
}

impl Role {
    /// Reads `viewer` or `operator`.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }

    /// `viewer` or `operator`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
        }
    }
}

/// A user who logs in with a password.
#[derive(Clone)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) role: Role,
    /// The argon2 hash, PHC string.
    pub(crate) hash: String,
}

/// A bearer token for the JSON API.
#[derive(Clone)]
pub(crate) struct Token {
    pub(crate) name: String,
    pub(crate) role: Role,
    /// SHA-256 of the token.
    pub(crate) digest: [u8; 32],
}

/// The console's users, tokens and serving options.
///
/// ```
/// use async_exec::console::{hash_password, ConsoleConfig, Role};
/// let config = ConsoleConfig::new()
///     .user("alice", Role::Operator, &hash_password("a long passphrase").unwrap())
///     .listen("0.0.0.0:8080".parse().unwrap())
///     .secure_cookie(true); // served over TLS (directly or behind a proxy)
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct ConsoleConfig {
    pub(crate) users: Vec<User>,
    pub(crate) tokens: Vec<Token>,
    pub(crate) listen: Option<SocketAddr>,
    pub(crate) secure_cookie: bool,
    pub(crate) counts_max_age: Duration,
    pub(crate) search_window: i64,
    pub(crate) trusted_proxies: Vec<IpAddr>,
    pub(crate) applications: Vec<String>,
    pub(crate) hosts: Vec<String>,
    pub(crate) idle_timeout: Duration,
    pub(crate) errors: Vec<String>,
}

/// How old the overview's counts may be before a view counts them again in the background.
pub const DEFAULT_COUNTS_MAX_AGE: Duration = Duration::from_secs(10);

/// How long a session lasts without a request before it must log in again.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            users: Vec::new(),
            tokens: Vec::new(),
            listen: None,
            secure_cookie: false,
            counts_max_age: DEFAULT_COUNTS_MAX_AGE,
            search_window: crate::PageSpec::DEFAULT_SEARCH_WINDOW,
            trusted_proxies: Vec::new(),
            applications: Vec::new(),
            hosts: Vec::new(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            errors: Vec::new(),
        }
    }
}

impl std::fmt::Debug for ConsoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleConfig")
            .field(
                "users",
                &self
                    .users
                    .iter()
                    .map(|u| (&u.name, u.role))
                    .collect::<Vec<_>>(),
            )
            .field(
                "tokens",
                &self
                    .tokens
                    .iter()
                    .map(|t| (&t.name, t.role))
                    .collect::<Vec<_>>(),
            )
            .field("listen", &self.listen)
            .field("secure_cookie", &self.secure_cookie)
            .field("counts_max_age", &self.counts_max_age)
            .field("search_window", &self.search_window)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("applications", &self.applications)
            .field("hosts", &self.hosts)
            .field("idle_timeout", &self.idle_timeout)
            .finish()
    }
}

/// The variable of users: `name:role:argon2-hash`, entries separated by whitespace or `;`.
pub const USERS_VAR: &str = "ASYNC_EXEC_CONSOLE_USERS";
/// The variable of API tokens: `name:role:sha256-hex`, separated like the users.
pub const TOKENS_VAR: &str = "ASYNC_EXEC_CONSOLE_TOKENS";
/// Set to `1` or `true` to mark the session cookie `Secure` (served over TLS).
pub const SECURE_COOKIE_VAR: &str = "ASYNC_EXEC_CONSOLE_SECURE_COOKIE";

impl ConsoleConfig {
    /// No users, no tokens: add some, or [`listen`](Self::listen) on a loopback address.
    pub fn new() -> Self {
        ConsoleConfig::default()
    }

    /// Adds the users and tokens of the environment ([`USERS_VAR`], [`TOKENS_VAR`],
    /// [`SECURE_COOKIE_VAR`]) to this configuration.
    ///
    /// ```sh
    /// export ASYNC_EXEC_CONSOLE_USERS='alice:operator:$argon2id$v=19$m=19456,t=2,p=1$...;bob:viewer:$argon2id$...'
    /// export ASYNC_EXEC_CONSOLE_TOKENS='ci:viewer:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'
    /// ```
    pub fn from_env(mut self) -> Self {
        if let Ok(users) = std::env::var(USERS_VAR) {
            for entry in entries(&users) {
                match entry.splitn(3, ':').collect::<Vec<_>>()[..] {
                    [name, role, hash] => match Role::parse(role) {
                        Some(role) => self = self.user(name, role, hash),
                        None => self.errors.push(format!(
                            "{USERS_VAR}: user `{name}` has role `{role}`: write `viewer` or `operator`"
                        )),
                    },
                    _ => self.errors.push(format!(
                        "{USERS_VAR}: an entry is not `name:role:argon2-hash`"
                    )),
                }
            }
        }
        if let Ok(tokens) = std::env::var(TOKENS_VAR) {
            for entry in entries(&tokens) {
                match entry.splitn(3, ':').collect::<Vec<_>>()[..] {
                    [name, role, digest] => match Role::parse(role) {
                        Some(role) => self = self.api_token_sha256(name, role, digest),
                        None => self.errors.push(format!(
                            "{TOKENS_VAR}: token `{name}` has role `{role}`: write `viewer` or `operator`"
                        )),
                    },
                    _ => self.errors.push(format!(
                        "{TOKENS_VAR}: an entry is not `name:role:sha256-hex`"
                    )),
                }
            }
        }
        if let Ok(secure) = std::env::var(SECURE_COOKIE_VAR) {
            self.secure_cookie = matches!(secure.as_str(), "1" | "true" | "yes");
        }
        self
    }

    /// Adds a user who logs in with the password whose argon2 hash (a PHC string,
    /// `$argon2id$...`, as [`hash_password`](super::hash_password) makes) is `hash`.
    pub fn user(mut self, name: &str, role: Role, hash: &str) -> Self {
        if argon2::password_hash::PasswordHash::new(hash).is_err() {
            self.errors.push(format!(
                "user `{name}`: the password hash is not an argon2 PHC string \
                 (`$argon2id$v=19$...`); make one with `async_exec::console::hash_password`"
            ));
        } else if name.is_empty() || name.contains(':') {
            self.errors
                .push(format!("user `{name}`: a name is not empty and has no `:`"));
        } else {
            self.users.push(User {
                name: name.to_string(),
                role,
                hash: hash.to_string(),
            });
        }
        self
    }

    /// Adds a bearer token for the JSON API (`Authorization: Bearer <token>`), given by
    /// the hex SHA-256 of the token (as [`token_digest`](super::token_digest) makes): the
    /// configuration never holds the token itself.
    pub fn api_token_sha256(mut self, name: &str, role: Role, sha256_hex: &str) -> Self {
        match parse_digest(sha256_hex) {
            Some(digest) => self.tokens.push(Token {
                name: name.to_string(),
                role,
                digest,
            }),
            None => self.errors.push(format!(
                "token `{name}`: the digest is not 64 hex digits (the SHA-256 of the token); \
                 make one with `async_exec::console::token_digest`"
            )),
        }
        self
    }

    /// The address the console is served on. On one that is not loopback, `router`
    /// refuses to start without users or tokens; on a loopback address without any, every
    /// visitor is an operator named `local`.
    pub fn listen(mut self, address: SocketAddr) -> Self {
        self.listen = Some(address);
        self
    }

    /// Marks the session cookie `Secure`: set it when the console is served over TLS.
    pub fn secure_cookie(mut self, secure: bool) -> Self {
        self.secure_cookie = secure;
        self
    }

    /// How old the overview's counts of requests by status and executor may be (default
    /// [`DEFAULT_COUNTS_MAX_AGE`], 10 s). They are one `GROUP BY` over every record of the
    /// application, which takes seconds at a million records: the console keeps the last
    /// count, shows it with its age, and a view that finds it older than this counts again
    /// in the background. `Duration::ZERO` counts on every view (exact, and a scan each).
    ///
    /// ```
    /// use std::time::Duration;
    /// use async_exec::console::ConsoleConfig;
    /// let config = ConsoleConfig::new().counts_max_age(Duration::from_secs(30));
    /// # let _ = config;
    /// ```
    pub fn counts_max_age(mut self, max_age: Duration) -> Self {
        self.counts_max_age = max_age;
        self
    }

    /// How many requests a page of the requests list with a text filter (remark, last
    /// error) looks at, at most (default [`PageSpec::DEFAULT_SEARCH_WINDOW`](crate::PageSpec::DEFAULT_SEARCH_WINDOW),
    /// 20,000; 1 to 100,000): a page that ends there before it fills says how many it
    /// searched and links to the rest of the search. See
    /// [`PageSpec::search_window`](crate::PageSpec::search_window).
    ///
    /// ```
    /// use async_exec::console::ConsoleConfig;
    /// let config = ConsoleConfig::new().search_window(50_000);
    /// # let _ = config;
    /// ```
    pub fn search_window(mut self, rows: i64) -> Self {
        let max = crate::PageSpec::MAX_SEARCH_WINDOW;
        if (1..=max).contains(&rows) {
            self.search_window = rows;
        } else {
            self.errors.push(format!(
                "search_window({rows}): look at 1 to {max} requests a page"
            ));
        }
        self
    }

    /// The addresses of the reverse proxies in front of the console. A request from one of
    /// them is taken to come from the address its `X-Forwarded-For` header names (the
    /// rightmost one that is not itself a trusted proxy); from any other peer the header
    /// is ignored, so that nobody can choose the address their failed logins count
    /// against. Without trusted proxies, everyone behind a proxy shares its address for
    /// the limit on failed logins.
    ///
    /// ```
    /// use async_exec::console::ConsoleConfig;
    /// let config = ConsoleConfig::new().trusted_proxies(["10.0.0.2".parse().unwrap()]);
    /// # let _ = config;
    /// ```
    pub fn trusted_proxies(mut self, proxies: impl IntoIterator<Item = IpAddr>) -> Self {
        self.trusted_proxies.extend(proxies);
        self
    }

    /// Other applications (by their `application_name`) this console also serves: their
    /// requests can be listed, counted and acted on with the filter's `application`
    /// field. Without it, the console serves the runtime's own application only and
    /// refuses a filter naming another.
    ///
    /// ```
    /// use async_exec::console::ConsoleConfig;
    /// let config = ConsoleConfig::new().applications(["billing", "mailer"]);
    /// # let _ = config;
    /// ```
    pub fn applications<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.applications.extend(names.into_iter().map(Into::into));
        self
    }

    /// Host names (as the `Host` header carries them, with or without the port) the
    /// console answers to besides the address it listens on, `localhost`, `127.0.0.1` and
    /// `[::1]`. The open console (loopback, no users) answers other `Host`s with `421
    /// Misdirected Request`, so that a web page whose name resolves to 127.0.0.1 (DNS
    /// rebinding) cannot use it; with names given here, every console checks them.
    ///
    /// ```
    /// use async_exec::console::ConsoleConfig;
    /// let config = ConsoleConfig::new().hosts(["ops.example.com"]);
    /// # let _ = config;
    /// ```
    pub fn hosts<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.hosts
            .extend(names.into_iter().map(|n| n.into().to_ascii_lowercase()));
        self
    }

    /// How long a session lasts without a request (default [`DEFAULT_IDLE_TIMEOUT`], 30
    /// minutes); a session ends 12 hours after its login in any case.
    ///
    /// ```
    /// use std::time::Duration;
    /// use async_exec::console::ConsoleConfig;
    /// let config = ConsoleConfig::new().idle_timeout(Duration::from_secs(10 * 60));
    /// # let _ = config;
    /// ```
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        if idle.is_zero() {
            self.errors
                .push("idle_timeout(0): give sessions some time, e.g. 30 minutes".into());
        } else {
            self.idle_timeout = idle;
        }
        self
    }

    /// Whether anyone can log in (or use a token).
    pub(crate) fn has_credentials(&self) -> bool {
        !self.users.is_empty() || !self.tokens.is_empty()
    }

    /// Checks the configuration: `Ok(true)` when logins are required, `Ok(false)` for the
    /// open loopback console.
    pub(crate) fn check(&self) -> Result<bool> {
        if let Some(error) = self.errors.first() {
            return Err(Error::Console(error.clone()));
        }
        if self.has_credentials() {
            return Ok(true);
        }
        match self.listen {
            Some(address) if address.ip().is_loopback() => Ok(false),
            Some(address) => Err(Error::Console(format!(
                "it would listen on {address}, which is not a loopback address, and no user \
                 is configured: anyone who reaches it could retry and delete requests. Add users \
                 (`ConsoleConfig::user`, or {USERS_VAR}=\"name:operator:$argon2id$...\"), or listen on \
                 127.0.0.1"
            ))),
            None => Err(Error::Console(format!(
                "no user is configured: add users (`ConsoleConfig::user`, or \
                 {USERS_VAR}=\"name:operator:$argon2id$...\"), or, for a console on this machine \
                 only, say `ConsoleConfig::listen(\"127.0.0.1:PORT\")`"
            ))),
        }
    }
}

fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c == ';' || c.is_whitespace())
        .filter(|e| !e.is_empty())
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(digest)
}
