//! A TCP proxy between a runtime and its database, for injecting network faults:
//!
//! - `cut` drops every connection and refuses new ones (the database "goes away") until
//!   `restore`;
//! - `reset` drops every current connection (with a TCP reset) but keeps accepting new
//!   ones: the connections break, the database stays reachable;
//! - `stall` stops moving bytes while keeping connections open (a black hole: statements
//!   hang) until `restore`;
//! - `black_hole` silences every connection open now, for ever (what they send is
//!   swallowed, nothing comes back, they are never closed, not even when the client
//!   closes its end), while new ones pass: a failover that moved an address, a firewall
//!   or conntrack flush; `black_hole_noticed_after` the same, but the server's side of
//!   each silenced connection is reset after a while, as the server's own TCP keepalive
//!   would (this proxy acknowledges every byte, so the server cannot find out itself);
//! - `set_latency` delays every chunk forwarded, either way, by a settable time;
//! - `restore` goes back to forwarding (the latency stays until set to zero; connections
//!   black-holed stay silent).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Forward,
    Cut,
    Stall,
}

/// The proxy's settings, watched by every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    mode: Mode,
    /// Bumped by `reset`: a connection opened in an earlier epoch is dropped.
    epoch: u64,
    /// Added before each chunk is written on.
    latency: Duration,
    /// Connections numbered below this one (in the order accepted) are black-holed.
    silent_below: u64,
    /// When the server's side of a black-holed connection is reset, if ever.
    noticed_at: Option<tokio::time::Instant>,
}

/// A running proxy; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    /// How many connections were accepted: the number of the next one.
    accepted: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free local port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (state, _) = watch::channel(State {
            mode: Mode::Forward,
            epoch: 0,
            latency: Duration::ZERO,
            silent_below: 0,
            noticed_at: None,
        });
        let state = Arc::new(state);
        let accepting = state.clone();
        let accepted = Arc::new(AtomicU64::new(0));
        let counting = accepted.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let now = *accepting.borrow();
                if now.mode == Mode::Cut {
                    drop(client);
                    continue;
                }
                let state = accepting.subscribe();
                let conn = Conn {
                    epoch: now.epoch,
                    number: counting.fetch_add(1, Ordering::SeqCst),
                };
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        pipe(client, server, state, conn).await;
                    }
                });
            }
        });
        Proxy {
            addr,
            state,
            accepted,
            accept,
        }
    }

    /// The proxy's port for the server of `url` (`scheme://user@host:port/db`): the same
    /// URL with `host:port` replaced by the proxy's.
    pub async fn for_url(url: &str) -> (Proxy, String) {
        let after_scheme = url.find("://").expect("a URL") + 3;
        let rest = &url[after_scheme..];
        let host_start = rest.find('@').map_or(0, |i| i + 1);
        let host_end = rest[host_start..]
            .find('/')
            .map_or(rest.len(), |i| host_start + i);
        let host_port = &rest[host_start..host_end];
        let upstream: SocketAddr = tokio::net::lookup_host(host_port)
            .await
            .expect("resolve the database server")
            .next()
            .expect("an address");
        let proxy = Proxy::start(upstream).await;
        let proxied = format!(
            "{}{}{}{}",
            &url[..after_scheme],
            &rest[..host_start],
            proxy.addr,
            &rest[host_end..]
        );
        (proxy, proxied)
    }

    pub fn set(&self, mode: Mode) {
        self.state.send_modify(|state| state.mode = mode);
    }

    /// Drops every connection and refuses new ones until `restore`.
    pub fn cut(&self) {
        self.set(Mode::Cut);
    }

    /// Drops every current connection with a TCP reset; new ones are accepted.
    pub fn reset(&self) {
        self.state.send_modify(|state| state.epoch += 1);
    }

    /// Holds every byte (connections stay open, nothing arrives) until `restore`.
    pub fn stall(&self) {
        self.set(Mode::Stall);
    }

    /// Silences every connection open now, for ever: what they send is swallowed, nothing
    /// comes back, and they stay open (until `cut`, `reset` or the proxy's drop). New
    /// connections pass as before.
    pub fn black_hole(&self) {
        let below = self.accepted.load(Ordering::SeqCst);
        self.state.send_modify(|state| {
            state.silent_below = below;
            state.noticed_at = None;
        });
    }

    /// As `black_hole`, but each connection silenced is reset (both ways) `after` this
    /// long: the server found out through its TCP keepalive.
    pub fn black_hole_noticed_after(&self, after: Duration) {
        let below = self.accepted.load(Ordering::SeqCst);
        let at = tokio::time::Instant::now() + after;
        self.state.send_modify(|state| {
            state.silent_below = below;
            state.noticed_at = Some(at);
        });
    }

    /// Forwards again (after `cut` or `stall`; black-holed connections stay silent).
    pub fn restore(&self) {
        self.set(Mode::Forward);
    }

    /// Delays every chunk forwarded, either way, by `latency` (zero: none).
    pub fn set_latency(&self, latency: Duration) {
        self.state.send_modify(|state| state.latency = latency);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.set(Mode::Cut);
        self.accept.abort();
    }
}

/// Which connection a pipe carries: the epoch it was opened in, and its number.
#[derive(Debug, Clone, Copy)]
struct Conn {
    epoch: u64,
    number: u64,
}

/// Moves bytes both ways while the mode is `Forward`; holds them during `Stall`; swallows
/// them once black-holed; drops both sockets on `Cut` or when `reset` starts a new epoch.
async fn pipe(client: TcpStream, server: TcpStream, state: watch::Receiver<State>, conn: Conn) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = tokio::spawn(one_way(client_read, server_write, state.clone(), conn));
    let down = tokio::spawn(one_way(server_read, client_write, state, conn));
    let _ = tokio::join!(up, down);
}

/// Whether `conn` is to be dropped now.
fn dropped(state: &State, conn: Conn) -> bool {
    state.mode == Mode::Cut || state.epoch != conn.epoch
}

/// Whether `conn` is black-holed.
fn silent(state: &State, conn: Conn) -> bool {
    conn.number < state.silent_below
}

async fn one_way(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    conn: Conn,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if silent(&state.borrow(), conn) {
            return swallow(from, to, state, conn).await;
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                // The other side of a black hole never learns that this one closed.
                Ok(0) | Err(_) if silent(&state.borrow(), conn) => {
                    return hold_until_dropped(to, state, conn).await
                }
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = state.changed() => {
                if changed.is_err() || dropped(&state.borrow(), conn) {
                    return drop_with_reset(to);
                }
                continue;
            }
        };
        // Hold the bytes while stalled; swallow them once black-holed; give up the
        // connection when cut or reset.
        let latency = loop {
            let now = *state.borrow_and_update();
            if dropped(&now, conn) {
                return drop_with_reset(to);
            }
            if silent(&now, conn) {
                return swallow(from, to, state, conn).await;
            }
            match now.mode {
                Mode::Stall => {
                    if state.changed().await.is_err() {
                        return;
                    }
                }
                _ => break now.latency,
            }
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A black-holed direction: reads and drops what comes, writes nothing, until the
/// connection is cut, reset, or noticed.
async fn swallow(
    mut from: tokio::net::tcp::OwnedReadHalf,
    to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    conn: Conn,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let noticed_at = state.borrow().noticed_at;
        tokio::select! {
            read = from.read(&mut buf) => if matches!(read, Ok(0) | Err(_)) {
                return hold_until_dropped(to, state, conn).await;
            },
            changed = state.changed() => {
                if changed.is_err() || dropped(&state.borrow(), conn) {
                    return drop_with_reset(to);
                }
            }
            _ = noticed(noticed_at) => return drop_with_reset(to),
        }
    }
}

/// Waits until `at`; for ever when `None`.
async fn noticed(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Keeps `to` open, silent, until the connection is cut, reset or noticed (or the proxy
/// dropped).
async fn hold_until_dropped(
    to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    conn: Conn,
) {
    loop {
        let noticed_at = state.borrow().noticed_at;
        tokio::select! {
            changed = state.changed() => {
                if changed.is_err() || dropped(&state.borrow(), conn) {
                    return drop_with_reset(to);
                }
            }
            _ = noticed(noticed_at) => return drop_with_reset(to),
        }
    }
}

/// Closes with RST rather than FIN, as a connection broken by the network would be seen.
fn drop_with_reset(to: tokio::net::tcp::OwnedWriteHalf) {
    let _ = to.as_ref().set_zero_linger();
    drop(to);
}
