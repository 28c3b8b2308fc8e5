//! What the behaviour tests share: a fresh database per test, a runtime builder with
//! sweeps parked (tests drive them with `run_once`), and a probe that bodies report to.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_exec::{Builder, Runtime};
use sqlx::SqlitePool;
use tokio::sync::Notify;

/// A database of its own for one test.
pub struct TestDb {
    _dir: tempfile::TempDir,
    pub url: String,
}

impl TestDb {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite:{}", dir.path().join("test.db").display());
        TestDb { _dir: dir, url }
    }

    /// A runtime on this database: not global, sweeps parked, quick retries.
    pub fn builder(&self) -> Builder {
        Runtime::builder()
            .database_url(&self.url)
            .application_name("tests")
            .install_global(false)
            .retry_interval(Duration::from_secs(3600))
            .compensate_interval(Duration::from_secs(3600))
            .retry_base_delay(Duration::from_millis(20))
            .retry_max_delay(Duration::from_secs(2))
            .data(Probe::default())
    }

    /// A plain pool on the same database, to look at or tamper with the tables.
    pub async fn pool(&self) -> SqlitePool {
        SqlitePool::connect(&self.url).await.expect("connect")
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
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
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

/// Counts the rows of a table matching a condition.
pub async fn count(pool: &SqlitePool, sql_where: &str) -> i64 {
    let (n,): (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) FROM {sql_where}"))
        .fetch_one(pool)
        .await
        .expect("count");
    n
}
