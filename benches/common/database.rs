//! What the benchmarks share: which backend, and a fresh database for one run (a
//! temporary SQLite file, or `ae_<name>_<pid>` on a server, dropped at the end).
//! Included by `benches/throughput/main.rs` and `benches/console.rs` (`#[path]`).

use std::str::FromStr;

use anyhow::{anyhow, bail, Result};
use sqlx::Connection;

/// A backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Sqlite,
    Postgres,
    Mysql,
}

impl Kind {
    /// Its name in the output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite",
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
        }
    }
}

impl FromStr for Kind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Kind> {
        match s {
            "sqlite" => Ok(Kind::Sqlite),
            "postgres" | "postgresql" => Ok(Kind::Postgres),
            "mysql" | "mariadb" => Ok(Kind::Mysql),
            _ => bail!("unknown backend `{s}`: sqlite, postgres, mysql or all"),
        }
    }
}

/// A benchmark's own database.
pub(crate) struct Database {
    pub(crate) kind: Kind,
    pub(crate) url: String,
    /// The server database to connect to for `DROP DATABASE`, and the name to drop.
    server: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl Database {
    /// A new database for `kind`: the file `<name>.db` in a temporary directory, or
    /// `ae_<name>_<pid>` created on the server of `postgres_url` or `mysql_url`.
    pub(crate) async fn create(
        kind: Kind,
        name: &str,
        postgres_url: &str,
        mysql_url: &str,
    ) -> Result<Database> {
        let admin = match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir()?;
                let url = format!("sqlite:{}", dir.path().join(format!("{name}.db")).display());
                return Ok(Database {
                    kind,
                    url,
                    server: None,
                    _dir: Some(dir),
                });
            }
            Kind::Postgres => postgres_url,
            Kind::Mysql => mysql_url,
        };
        let database = format!("ae_{name}_{}", std::process::id());
        admin_execute(kind, admin, &format!("CREATE DATABASE {database}")).await?;
        let (base, _) = admin
            .rsplit_once('/')
            .ok_or_else(|| anyhow!("no database name in `{admin}`"))?;
        Ok(Database {
            kind,
            url: format!("{base}/{database}"),
            server: Some((admin.to_owned(), database)),
            _dir: None,
        })
    }

    /// Drops the server's database (a SQLite file goes with its directory).
    pub(crate) async fn drop_database(self) -> Result<()> {
        if let Some((admin, name)) = &self.server {
            let sql = match self.kind {
                Kind::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                _ => format!("DROP DATABASE IF EXISTS {name}"),
            };
            admin_execute(self.kind, admin, &sql).await?;
        }
        Ok(())
    }
}

/// Runs `sql` on a connection of its own to the server at `url`.
async fn admin_execute(kind: Kind, url: &str, sql: &str) -> Result<()> {
    match kind {
        Kind::Postgres => {
            let mut conn = sqlx::PgConnection::connect(url).await?;
            sqlx::query(sql).execute(&mut conn).await?;
            conn.close().await?;
        }
        Kind::Mysql => {
            let mut conn = sqlx::MySqlConnection::connect(url).await?;
            sqlx::query(sql).execute(&mut conn).await?;
            conn.close().await?;
        }
        Kind::Sqlite => unreachable!("a SQLite database is a file"),
    }
    Ok(())
}
