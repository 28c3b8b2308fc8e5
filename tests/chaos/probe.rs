//! The database's own health during a chaos run: a probe writes one row every 100 ms
//! (an autocommit `UPDATE`, so each write waits for the server's commit and its flush)
//! through a connection of its own, never through a fault proxy. A write that takes
//! [`STALL_MS`] or more marks a window in which the server itself did not commit for
//! anyone (a flush stalled by the machine's disk, the server starved of CPU): no
//! instance could renew a lease then, so a re-execution in such a window is explained
//! by it, and the checker's summary says how many there were and how long the longest.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::AnyPool;

use crate::common::now_ms;

/// A probe write at least this slow marks a database stall.
pub const STALL_MS: i64 = 1_000;
const EVERY: Duration = Duration::from_millis(100);

/// A running probe; [`Probe::stop`] returns the stalls it saw (failed writes count too).
pub struct Probe {
    task: tokio::task::JoinHandle<()>,
    stalls: Arc<Mutex<Vec<(i64, i64)>>>,
}

impl Probe {
    pub async fn start(pool: &AnyPool) -> Probe {
        for sql in [
            "CREATE TABLE IF NOT EXISTS chaos_probe (id INT PRIMARY KEY, n BIGINT NOT NULL)",
            "DELETE FROM chaos_probe",
            "INSERT INTO chaos_probe (id, n) VALUES (1, 0)",
        ] {
            sqlx::query(sql)
                .execute(pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let stalls = Arc::default();
        let task = tokio::spawn(probe(pool.clone(), Arc::clone(&stalls)));
        Probe { task, stalls }
    }

    pub async fn stop(self) -> Vec<(i64, i64)> {
        self.task.abort();
        let _ = self.task.await;
        let stalls = self.stalls.lock().unwrap();
        stalls.clone()
    }
}

/// Writes until aborted.
async fn probe(pool: AnyPool, stalls: Arc<Mutex<Vec<(i64, i64)>>>) {
    loop {
        let sent = now_ms();
        let failed = sqlx::query("UPDATE chaos_probe SET n = n + 1 WHERE id = 1")
            .execute(&pool)
            .await
            .is_err();
        let took = now_ms() - sent;
        if failed || took >= STALL_MS {
            stalls.lock().unwrap().push((sent, sent + took));
        }
        tokio::time::sleep(EVERY).await;
    }
}
