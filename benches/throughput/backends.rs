//! What differs by backend in the benchmark's own statements: placeholders, and what it
//! runs in a library `Tx` (the backends and their databases are `benches/common/database.rs`).

use super::*;

impl Kind {
    /// The `i`-th (from 1) bind placeholder.
    pub(crate) fn placeholder(self, i: usize) -> String {
        match self {
            Kind::Postgres => format!("${i}"),
            Kind::Sqlite | Kind::Mysql => "?".into(),
        }
    }

    /// `(p, p, ...)`, `count` placeholders numbered from `from`.
    pub(crate) fn tuple(self, from: usize, count: usize) -> String {
        let items: Vec<String> = (from..from + count).map(|i| self.placeholder(i)).collect();
        format!("({})", items.join(", "))
    }
}

/// The backend's sqlx types, for the statements the benchmark runs in a library `Tx`.
pub(crate) trait BenchDb: Backend {
    /// The caller's own row.
    async fn business_insert(conn: &mut Self::Connection, n: i64) -> sqlx::Result<()>;
    /// What the baseline queue writes for one call.
    async fn queue_insert(conn: &mut Self::Connection, n: i64) -> sqlx::Result<()>;
}

macro_rules! bench_db {
    ($db:ty, $business:literal, $queue:literal) => {
        impl BenchDb for $db {
            async fn business_insert(
                conn: &mut <$db as sqlx::Database>::Connection,
                n: i64,
            ) -> sqlx::Result<()> {
                sqlx::query($business)
                    .bind(n)
                    .bind("order for a customer")
                    .execute(conn)
                    .await
                    .map(drop)
            }

            async fn queue_insert(
                conn: &mut <$db as sqlx::Database>::Connection,
                n: i64,
            ) -> sqlx::Result<()> {
                sqlx::query($queue)
                    .bind(payload(n))
                    .execute(conn)
                    .await
                    .map(drop)
            }
        }
    };
}

bench_db!(
    Sqlite,
    "INSERT INTO bench_business (n, note) VALUES (?, ?)",
    "INSERT INTO bench_queue (status, payload) VALUES ('init', ?)"
);
bench_db!(
    Postgres,
    "INSERT INTO bench_business (n, note) VALUES ($1, $2)",
    "INSERT INTO bench_queue (status, payload) VALUES ('init', $1)"
);
bench_db!(
    MySql,
    "INSERT INTO bench_business (n, note) VALUES (?, ?)",
    "INSERT INTO bench_queue (status, payload) VALUES ('init', ?)"
);
