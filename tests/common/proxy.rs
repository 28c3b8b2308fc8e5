//! A TCP proxy between a runtime and its database, for injecting network faults: `cut`
//! drops every connection and refuses new ones (the database "goes away"), `stall` stops
//! moving bytes while keeping connections open (a black hole: statements hang), `restore`
//! goes back to forwarding.

use std::net::SocketAddr;
use std::sync::Arc;

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

/// A running proxy; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free local port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (mode, _) = watch::channel(Mode::Forward);
        let mode = Arc::new(mode);
        let accepting = mode.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if *accepting.borrow() == Mode::Cut {
                    drop(client);
                    continue;
                }
                let mode = accepting.subscribe();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        pipe(client, server, mode).await;
                    }
                });
            }
        });
        Proxy { addr, mode, accept }
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
        self.mode.send_replace(mode);
    }

    pub fn cut(&self) {
        self.set(Mode::Cut);
    }

    pub fn stall(&self) {
        self.set(Mode::Stall);
    }

    pub fn restore(&self) {
        self.set(Mode::Forward);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.set(Mode::Cut);
        self.accept.abort();
    }
}

/// Moves bytes both ways while the mode is `Forward`; holds them during `Stall`; drops
/// both sockets on `Cut`.
async fn pipe(client: TcpStream, server: TcpStream, mode: watch::Receiver<Mode>) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = tokio::spawn(one_way(client_read, server_write, mode.clone()));
    let down = tokio::spawn(one_way(server_read, client_write, mode));
    let _ = tokio::join!(up, down);
}

async fn one_way(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow() == Mode::Cut {
                    return;
                }
                continue;
            }
        };
        // Hold the bytes while stalled; give up the connection when cut.
        loop {
            let now = *mode.borrow_and_update();
            match now {
                Mode::Forward => break,
                Mode::Cut => return,
                Mode::Stall => {
                    if mode.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
