//! Reaching the database at start, so that a server that is down, a wrong port or a wrong
//! password is reported at once, with where it is (never the password) and the driver's
//! reason. A pool retries a refused connection until its acquire timeout and then reports
//! only that it timed out: a pool that has not connected within [`QUICK`] is raced by one
//! plain connection, whose error says why. A pool that connects at once (every start of a
//! healthy service) costs no connection more.

#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::time::Duration;

#[cfg(any(feature = "postgres", feature = "mysql"))]
use sqlx::Connection;

use crate::base::error::Error;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::base::error::Result;

/// How long the first connection may take.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const PATIENCE: Duration = Duration::from_secs(30);

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// `user@host:port/database`, or the socket path: where a server is, without secrets.
pub(crate) fn server_target(
    user: &str,
    host: &str,
    port: u16,
    socket: Option<&std::path::Path>,
    database: Option<&str>,
) -> String {
    let place = match socket {
        Some(path) => path.display().to_string(),
        None => format!("{host}:{port}"),
    };
    let user = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    format!("{user}{place}/{}", database.unwrap_or(""))
}

/// How long a pool may take to connect before one plain connection is tried beside it.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const QUICK: Duration = Duration::from_millis(200);

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// Opens a pool (`open`, one connection made before it returns); when it has not
/// connected within [`QUICK`], a plain connection with `options` is tried beside it, and
/// the first error of either names `backend` and `target` and carries the cause.
pub(crate) async fn open_pool<C: Connection, P>(
    open: impl std::future::Future<Output = std::result::Result<P, sqlx::Error>>,
    options: &C::Options,
    backend: &'static str,
    target: &str,
) -> Result<P> {
    tokio::pin!(open);
    if let Ok(opened) = tokio::time::timeout(QUICK, &mut open).await {
        return opened.map_err(|cause| unreachable(backend, target, cause));
    }
    tokio::select! {
        opened = &mut open => opened.map_err(|cause| unreachable(backend, target, cause)),
        checked = check::<C>(options, backend, target) => {
            checked?;
            open.await.map_err(|cause| unreachable(backend, target, cause))
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// Opens one connection with `options` and closes it; an error names `backend` and
/// `target` and carries the cause.
async fn check<C: Connection>(
    options: &C::Options,
    backend: &'static str,
    target: &str,
) -> Result<()> {
    let connected = tokio::time::timeout(PATIENCE, C::connect_with(options)).await;
    let cause = match connected {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            return Ok(());
        }
        Ok(Err(cause)) => cause,
        Err(_) => sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {PATIENCE:?}"),
        )),
    };
    Err(unreachable(backend, target, cause))
}

/// The error for a database that could not be reached.
pub(crate) fn unreachable(backend: &'static str, target: &str, cause: sqlx::Error) -> Error {
    Error::Unreachable {
        backend,
        target: target.to_owned(),
        cause: Box::new(cause),
    }
}
