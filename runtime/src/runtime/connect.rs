//! Opens the store a database URL names, with the backends compiled in; over the network,
//! its statements bounded (see `store::bounded`).

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::settings::Settings;
use crate::store::bounded::{statement_bound, Abandoned, Bounded};
use crate::store::Store;

/// The URL schemes of the backends compiled in, for error messages.
fn compiled_schemes() -> String {
    let mut schemes = Vec::new();
    if cfg!(feature = "sqlite") {
        schemes.push("`sqlite:`");
    }
    if cfg!(feature = "postgres") {
        schemes.push("`postgres:`");
    }
    if cfg!(feature = "mysql") {
        schemes.push("`mysql:`/`mariadb:`");
    }
    format!(
        "{} (each backend is a Cargo feature of async-exec: `sqlite`, `postgres`, `mysql`)",
        schemes.join(", ")
    )
}

/// `store`, each of its statements bounded by [`statement_bound`] of the lease, when it
/// talks to a server over the network (SQLite's statements wait only for its lock, which
/// `sqlite_busy_timeout` bounds).
pub(crate) fn bound(
    store: Arc<dyn Store>,
    settings: &Settings,
    abandoned: Arc<Abandoned>,
) -> Arc<dyn Store> {
    if store.backend_name() == "Sqlite" {
        return store;
    }
    Arc::new(Bounded::new(
        store,
        statement_bound(settings.lease),
        abandoned,
    ))
}

/// Opens the store that the URL names; over the network, its statements bounded and its
/// pool's pings too (see `store::bounded`).
pub(crate) async fn connect(settings: &Settings) -> Result<Arc<dyn Store>> {
    let abandoned = Arc::new(Abandoned::new(statement_bound(settings.lease)));
    let opened = open(settings, abandoned.clone()).await?;
    Ok(bound(opened, settings, abandoned))
}

/// Opens the store that the URL names, its pool's pings bounded by `abandoned`.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(unused_variables)
)]
async fn open(settings: &Settings, abandoned: Arc<Abandoned>) -> Result<Arc<dyn Store>> {
    let url = settings.database_url.as_str();
    let scheme = url.split(':').next().unwrap_or_default();
    let max = settings.max_connections;
    match scheme {
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Arc::new(
            crate::store::sqlite::SqliteStore::connect(
                url,
                max,
                settings.sqlite_synchronous,
                settings.sqlite_busy_timeout,
            )
            .await?,
        )),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(
            crate::store::postgres::PostgresStore::open(url, max, Some(abandoned)).await?,
        )),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => {
            let url = url.replacen("mariadb:", "mysql:", 1);
            Ok(Arc::new(
                crate::store::mysql::MySqlStore::open(&url, max, Some(abandoned)).await?,
            ))
        }
        _ => Err(Error::UnsupportedUrl(
            crate::base::redact::url(url),
            compiled_schemes(),
        )),
    }
}
