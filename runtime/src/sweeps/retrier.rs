//! The retry sweep: runs `failed` records whose backoff has passed, and delayed
//! (`.delay(..)`) or released `init` records whose time has come.
//!
//! It holds the [`Claimer`] it claims and starts them with, and its [`RetrierConfig`].

use std::sync::Arc;

use crate::base::error::Result;
use crate::base::settings::Settings;
use crate::operate::metrics::Sweep;
use crate::store::DueKind;
use crate::work::claimer::Claimer;

/// The settings the retrier reads, taken from [`Settings`] (validated there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetrierConfig {
    /// The most records claimed per run (`retry_batch`).
    pub(crate) batch: i64,
    /// Claim one record even when no worker is free (`retries_take_turns`).
    pub(crate) take_turns: bool,
}

impl RetrierConfig {
    /// The retrier's settings among the runtime's.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
        RetrierConfig {
            batch: settings.retry_batch,
            take_turns: settings.retries_take_turns,
        }
    }
}

/// Runs due retries. Get one with [`Runtime::retrier`](crate::Runtime::retrier).
///
/// ```no_run
/// # async fn demo(rt: async_exec::Runtime) -> async_exec::Result<()> {
/// let started = rt.retrier().run_once().await?.started;
/// rt.wait_idle().await; // the retries it started have run
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Retrier {
    pub(crate) claimer: Arc<Claimer>,
    pub(crate) config: RetrierConfig,
}

/// What one retry sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryReport {
    /// Records claimed and started.
    pub started: usize,
}

impl Retrier {
    /// Claims due records (at most `retry_batch`, and no more than there are free workers,
    /// or one when none is and `retries_take_turns` is set: it waits in line for the next)
    /// and starts them. Does not wait for them to finish: see
    /// [`Runtime::wait_idle`](crate::Runtime::wait_idle).
    ///
    /// Counted: `async_exec_sweep_records_total{sweep="retrier",result="claimed"}`, and a
    /// failed round in `async_exec_sweep_failures_total{sweep="retrier"}`.
    pub async fn run_once(&self) -> Result<RetryReport> {
        let claimed = self
            .claimer
            .claim_and_start(
                DueKind::Scheduled,
                self.config.batch,
                self.config.take_turns,
            )
            .await;
        let started = crate::operate::metrics::round(Sweep::Retrier, claimed)?;
        crate::operate::metrics::swept(Sweep::Retrier, "claimed", started as u64);
        Ok(RetryReport { started })
    }
}

/// The retrier on its own: the core parts on a store, no runtime started.
#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    use crate::base::record::{now_ms, Inserted, NewRequest, RequestId, Status};
    use crate::base::registry::ExecutorDef;
    use crate::base::strategy::Strategy;
    use crate::runtime::parts::{Core, Shared};
    use crate::store::Store;
    use crate::sweeps::clock::Clock;

    /// The requests whose bodies ran, by any test here (on any backend: ids may repeat).
    static RAN: Mutex<Vec<RequestId>> = Mutex::new(Vec::new());

    static RETRIED: ExecutorDef = ExecutorDef {
        name: "retrier_test::retried",
        path: "retrier_test::retried",
        sign: "0000000000000000",
        signature: "()",
        remark: "",
        strategy: Strategy::SaveAsync,
        max_attempts: None,
        timeout_ms: None,
        queue: None,
        deadline_ms: None,
        data: &[],
        secrets: &[],
        schedule: None,
        modes: crate::base::registry::Modes::NONE,
        run: |invocation| {
            RAN.lock().unwrap().extend(invocation.context.request_id);
            Box::pin(async { Ok(()) })
        },
    };

    fn failed(application: &Arc<str>, run_at: i64) -> NewRequest {
        NewRequest {
            status: Status::Failed,
            exec_count: 1,
            run_at,
            last_error: Some("the first attempt failed".into()),
            ..crate::store::fixture::new_request(application, RETRIED.name, RETRIED.sign)
        }
    }

    /// A due retry is claimed and its body run; one not yet due is left.
    async fn a_due_retry_is_claimed_and_run_and_a_later_one_left(store: Arc<dyn Store>) {
        let application: Arc<str> = Arc::from(format!("retrier-test-{}", now_ms()).as_str());
        let ids: Vec<RequestId> = store
            .request_insert_many(&[
                failed(&application, now_ms() - 10_000),
                failed(&application, now_ms() + 3_600_000),
            ])
            .await
            .unwrap()
            .into_iter()
            .map(|inserted| match inserted {
                Inserted::New(id) => id,
                Inserted::Existing(_) | Inserted::Live(_) | Inserted::Merged(_) => {
                    unreachable!("no keys, no singletons")
                }
            })
            .collect();
        let (due, later) = (ids[0], ids[1]);
        let clock = Arc::new(Clock::new(0));
        clock.sync(&*store).await.unwrap();
        let settings = Settings::default();
        let shared = Shared::for_tests(
            store.clone(),
            application.clone(),
            "retrier-test",
            clock,
            &RETRIED,
        );
        let core = Core::assemble(&settings, &shared);
        let retrier = Retrier {
            claimer: core.claimer.clone(),
            config: RetrierConfig::from_settings(&settings),
        };
        assert_eq!(
            retrier.run_once().await.unwrap(),
            RetryReport { started: 1 }
        );
        let ran = async {
            while !RAN.lock().unwrap().contains(&due) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), ran)
            .await
            .expect("the due retry's body runs");
        // (`RAN` is shared by the three backends' tests, whose ids may coincide: that the
        // later record was not claimed is shown by its status below, not by `RAN`.)
        let status = |id| {
            let (store, application) = (store.clone(), application.clone());
            async move {
                let record = store.request_get(&application, id).await.unwrap().unwrap();
                (record.status, record.exec_count)
            }
        };
        // Claimed for this instance; its outcome waits in the completer's channel (no
        // completer task runs here).
        assert_eq!(status(due).await, (Status::Running, 2));
        assert_eq!(status(later).await, (Status::Failed, 1));
        assert_eq!(
            retrier.run_once().await.unwrap(),
            RetryReport { started: 0 }
        );
        for id in ids {
            store.request_delete(&application, id).await.unwrap();
        }
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_a_due_retry_is_claimed_and_run_and_a_later_one_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fixture::sqlite(&dir).await;
        a_due_retry_is_claimed_and_run_and_a_later_one_left(store).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_postgres),
        ignore = "set ASYNC_EXEC_TEST_POSTGRES_URL to run it"
    )]
    async fn postgres_a_due_retry_is_claimed_and_run_and_a_later_one_left() {
        a_due_retry_is_claimed_and_run_and_a_later_one_left(
            crate::store::fixture::postgres().await,
        )
        .await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test]
    #[cfg_attr(
        not(async_exec_test_mysql),
        ignore = "set ASYNC_EXEC_TEST_MYSQL_URL to run it"
    )]
    async fn mysql_a_due_retry_is_claimed_and_run_and_a_later_one_left() {
        a_due_retry_is_claimed_and_run_and_a_later_one_left(crate::store::fixture::mysql().await)
            .await;
    }
}
