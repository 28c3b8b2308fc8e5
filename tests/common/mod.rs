//! What the behaviour tests share: a database of its own per test on each backend, a
//! runtime builder with the sweeps parked (tests drive them with `run_once`), raw SQL on
//! the same database, and a probe that bodies report to.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

#[cfg(feature = "console")]
pub mod console;
pub mod proxy;

use async_exec::{Builder, Runtime};
use sqlx::AnyPool;
use tokio::sync::Notify;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
    MySql,
}

/// A database of its own for one test; dropped with it.
pub struct TestDb {
    pub kind: Kind,
    pub url: String,
    name: String,
    admin_url: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

fn unique_name() -> String {
    format!(
        "ae_test_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Replaces the database name (the path) of a server URL.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{}", &base[..path_start], database);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

impl TestDb {
    pub async fn new(kind: Kind) -> TestDb {
        sqlx::any::install_default_drivers();
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite:{}", dir.path().join("test.db").display());
                TestDb {
                    kind,
                    url,
                    name: String::new(),
                    admin_url: None,
                    _dir: Some(dir),
                }
            }
            Kind::Postgres | Kind::MySql => {
                let var = if kind == Kind::Postgres {
                    "ASYNC_EXEC_TEST_POSTGRES_URL"
                } else {
                    "ASYNC_EXEC_TEST_MYSQL_URL"
                };
                let admin_url = std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set"));
                let name = unique_name();
                let admin = AnyPool::connect(&admin_url)
                    .await
                    .unwrap_or_else(|e| panic!("{var}={admin_url} is unreachable: {e}"));
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&admin)
                    .await
                    .expect("create database");
                admin.close().await;
                let url = with_database(&admin_url, &name);
                TestDb {
                    kind,
                    url,
                    name,
                    admin_url: Some(admin_url),
                    _dir: None,
                }
            }
        }
    }

    /// A runtime on this database: not global, sweeps parked, quick retries.
    pub fn builder(&self) -> Builder {
        Runtime::builder()
            .database_url(&self.url)
            .application_name("tests")
            .install_global(false)
            .retry_interval(Duration::from_secs(3600))
            .compensate_interval(Duration::from_secs(3600))
            .poll_interval(Duration::from_secs(3600))
            .retry_base_delay(Duration::from_millis(20))
            .retry_max_delay(Duration::from_secs(2))
            .data(Probe::default())
            .data(StartOrder::default())
    }

    async fn pool(&self) -> AnyPool {
        AnyPool::connect(&self.url).await.expect("connect")
    }

    /// Runs a statement (no binds: write literals).
    pub async fn exec(&self, sql: &str) {
        let pool = self.pool().await;
        sqlx::query(sql)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        pool.close().await;
    }

    /// `SELECT COUNT(*) FROM <what>`.
    pub async fn count(&self, what: &str) -> i64 {
        let pool = self.pool().await;
        let (n,): (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) FROM {what}"))
            .fetch_one(&pool)
            .await
            .expect("count");
        pool.close().await;
        n
    }

    /// Inserts an `init` record as another build (or another service) would have.
    pub async fn insert_raw(&self, executor: &str, sign: &str, params: &str) -> i64 {
        let now = now_ms();
        self.exec(&format!(
            "INSERT INTO async_req (application_name, executor, sign, strategy, status, exec_count, max_attempts, \
             param_json, remark, priority, run_at, create_time, update_time) \
             VALUES ('tests', '{executor}', '{sign}', 'SaveAsync', 'init', 0, 5, '{params}', '', 0, {now}, {now}, {now})"
        ))
        .await;
        let pool = self.pool().await;
        let (id,): (i64,) = sqlx::query_as(&format!(
            "SELECT MAX(id) FROM async_req WHERE executor = '{executor}'"
        ))
        .fetch_one(&pool)
        .await
        .expect("inserted id");
        pool.close().await;
        id
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(admin_url) = self.admin_url.clone() else {
            return;
        };
        let drop_sql = match self.kind {
            Kind::Postgres => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            _ => format!("DROP DATABASE IF EXISTS {}", self.name),
        };
        // Drop runs inside the test's runtime: use a thread with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok(admin) = AnyPool::connect(&admin_url).await {
                    let _ = sqlx::query(&drop_sql).execute(&admin).await;
                    admin.close().await;
                }
            });
        })
        .join();
    }
}

/// Makes the database refuse, as a data error, to mark record `id` `failed`: a trigger
/// that raises SQLSTATE 22021 (PostgreSQL), 22000 (MariaDB), or a constraint (SQLite).
pub async fn refuse_failed_outcome_of(db: &TestDb, id: i64) {
    let statements = match db.kind {
        Kind::Sqlite => vec![format!(
            "CREATE TRIGGER refuse_outcome BEFORE UPDATE ON async_req \
             WHEN NEW.id = {id} AND NEW.status = 'failed' \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )],
        Kind::Postgres => vec![
            "CREATE FUNCTION refuse_outcome() RETURNS trigger AS $$ BEGIN \
             RAISE EXCEPTION 'refused by the test' USING ERRCODE = '22021'; END $$ \
             LANGUAGE plpgsql"
                .to_string(),
            format!(
                "CREATE TRIGGER refuse_outcome BEFORE UPDATE ON async_req FOR EACH ROW \
                 WHEN (NEW.id = {id} AND NEW.status = 'failed') EXECUTE FUNCTION refuse_outcome()"
            ),
        ],
        Kind::MySql => vec![format!(
            "CREATE TRIGGER refuse_outcome BEFORE UPDATE ON async_req FOR EACH ROW BEGIN \
             IF NEW.id = {id} AND NEW.status = 'failed' THEN \
             SIGNAL SQLSTATE '22000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END"
        )],
    };
    let pool = sqlx::AnyPool::connect(&db.url).await.expect("connect");
    for statement in statements {
        sqlx::raw_sql(&statement)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    pool.close().await;
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The order in which bodies started, by label (`tests/reliability.rs`); registered on
/// every test runtime, as the executors that take it are linked into that test binary.
#[derive(Default)]
pub struct StartOrder(pub Mutex<Vec<String>>);

impl StartOrder {
    pub fn labels(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// What bodies report: one entry per run, by label.
#[derive(Default)]
pub struct Probe {
    runs: Mutex<HashMap<String, Vec<u32>>>,
    changed: Notify,
}

impl Probe {
    pub fn record(&self, label: &str, attempt: u32) {
        self.runs
            .lock()
            .unwrap()
            .entry(label.to_string())
            .or_default()
            .push(attempt);
        self.changed.notify_waiters();
    }

    pub fn runs(&self, label: &str) -> usize {
        self.runs.lock().unwrap().get(label).map_or(0, Vec::len)
    }

    pub fn attempts(&self, label: &str) -> Vec<u32> {
        self.runs
            .lock()
            .unwrap()
            .get(label)
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until `label` has run `n` times, for at most 10 s.
    pub async fn wait_runs(&self, label: &str, n: usize) {
        self.wait_runs_within(label, n, Duration::from_secs(10))
            .await
    }

    /// Waits until `label` has run `n` times, for at most `limit`.
    pub async fn wait_runs_within(&self, label: &str, n: usize, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            if self.runs(label) >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("`{label}` ran {} times, expected {n}", self.runs(label));
            }
        }
    }
}

/// Waits until `check` holds, for at most 5 s.
pub async fn wait_for<F, Fut>(mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..500 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not met within 5 s");
}

/// Generates, for each named generic test `fn name<DB: Backend>(db: TestDb)`, one test per
/// backend: `sqlite::name`, and `postgres::name` / `mysql::name` when their server URL is
/// set (else one ignored test per backend says which variable to set).
#[macro_export]
macro_rules! backend_suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let db = $crate::common::TestDb::new($crate::common::Kind::Sqlite).await;
                    super::$name::<async_exec::Sqlite>(db).await;
                }
            )*
        }

        #[cfg(all(feature = "postgres", async_exec_test_postgres))]
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let db = $crate::common::TestDb::new($crate::common::Kind::Postgres).await;
                    super::$name::<async_exec::Postgres>(db).await;
                }
            )*
        }

        #[cfg(not(all(feature = "postgres", async_exec_test_postgres)))]
        mod postgres {
            #[test]
            #[ignore = "PostgreSQL suite skipped: set ASYNC_EXEC_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test and enable --features postgres (or --all-features) to run it"]
            fn suite() {}
        }

        #[cfg(all(feature = "mysql", async_exec_test_mysql))]
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let db = $crate::common::TestDb::new($crate::common::Kind::MySql).await;
                    super::$name::<async_exec::MySql>(db).await;
                }
            )*
        }

        #[cfg(not(all(feature = "mysql", async_exec_test_mysql)))]
        mod mysql {
            #[test]
            #[ignore = "MySQL/MariaDB suite skipped: set ASYNC_EXEC_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306/test and enable --features mysql (or --all-features) to run it"]
            fn suite() {}
        }
    };
}

/// Like [`backend_suite`], for tests that need a network between the runtime and its
/// database (a proxy to cut): PostgreSQL and MySQL/MariaDB only.
#[macro_export]
macro_rules! network_suite {
    ($($name:ident),* $(,)?) => {
        #[cfg(all(feature = "postgres", async_exec_test_postgres))]
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let db = $crate::common::TestDb::new($crate::common::Kind::Postgres).await;
                    super::$name(db).await;
                }
            )*
        }

        #[cfg(not(all(feature = "postgres", async_exec_test_postgres)))]
        mod postgres {
            #[test]
            #[ignore = "PostgreSQL suite skipped: set ASYNC_EXEC_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test and enable --features postgres (or --all-features) to run it"]
            fn suite() {}
        }

        #[cfg(all(feature = "mysql", async_exec_test_mysql))]
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let db = $crate::common::TestDb::new($crate::common::Kind::MySql).await;
                    super::$name(db).await;
                }
            )*
        }

        #[cfg(not(all(feature = "mysql", async_exec_test_mysql)))]
        mod mysql {
            #[test]
            #[ignore = "MySQL/MariaDB suite skipped: set ASYNC_EXEC_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306/test and enable --features mysql (or --all-features) to run it"]
            fn suite() {}
        }
    };
}
