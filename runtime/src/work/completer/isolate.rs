//! Writes one batch of outcomes so that no outcome can hold up the others.
//!
//! A transient failure (the connection, a lock, the server's load) is retried with a capped
//! backoff, each retry logged. A permanent one (the database refuses the data) splits the
//! batch in halves, recursively, until the outcome that causes it is alone; the others are
//! written, and that one is written `dead` with a message saying why. If even that fails,
//! it is logged and left: its lease expires and the rescuer counts the attempt. It keeps
//! track of which outcomes were not written (fenced off, or left), by their positions in
//! the batch, so that each written one, and only those, gets its listeners' event.

use std::ops::Range;
use std::time::Duration;

use async_trait::async_trait;

use crate::base::error::{Error, Result};
use crate::base::fault::is_transient;
use crate::base::record::AttemptLog;
use crate::base::text;
use crate::store::{Completion, CompletionResult, Store, Wrote};

/// Where outcomes are written: the store, or a fake in tests.
#[async_trait]
pub(crate) trait OutcomeSink: Send + Sync {
    /// Writes `completions` in one transaction, all or none; says which were not written.
    async fn write(&self, completions: &[Completion]) -> Result<Wrote>;
}

#[async_trait]
impl OutcomeSink for dyn Store {
    async fn write(&self, completions: &[Completion]) -> Result<Wrote> {
        self.request_complete_many(completions).await
    }
}

/// How transient failures are retried: `first`, doubling up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub(crate) first: Duration,
    pub(crate) max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_millis(50),
            max: Duration::from_secs(5),
        }
    }
}

/// What became of a batch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Written {
    /// Records written (others had been claimed again by someone else: fenced off).
    pub(crate) rows: u64,
    /// Outcomes the database refused, written `dead` instead.
    pub(crate) isolated: usize,
    /// Outcomes refused that could not be written even as `dead`: left to lease expiry.
    pub(crate) unwritable: usize,
    /// The positions in the batch of the outcomes not written (fenced off, unwritable, or
    /// not told apart: see [`Wrote::unwritten`]), ascending. Empty when all were.
    pub(crate) unwritten: Vec<usize>,
    /// The `dead` outcomes written in place of refused ones, with their positions.
    pub(crate) replaced: Vec<(usize, Completion)>,
}

impl From<Wrote> for Written {
    fn from(wrote: Wrote) -> Self {
        Written {
            rows: wrote.rows,
            unwritten: wrote.unwritten,
            ..Written::default()
        }
    }
}

/// Writes `batch`, isolating the outcomes the database refuses. Returns once every outcome
/// is written, written `dead`, or found unwritable; waits as long as failures are transient.
pub(crate) async fn write_isolating<S>(sink: &S, batch: &[Completion], backoff: Backoff) -> Written
where
    S: OutcomeSink + ?Sized,
{
    let mut written = Written::default();
    // Parts still to write (positions in the batch), the next one last; halves keep the
    // batch's order.
    let mut parts: Vec<Range<usize>> = Vec::with_capacity(1);
    parts.push(0..batch.len());
    while let Some(part) = parts.pop() {
        let error = match write_retrying(sink, &batch[part.clone()], backoff).await {
            Ok(wrote) => {
                written.rows += wrote.rows;
                let start = part.start;
                written
                    .unwritten
                    .extend(wrote.unwritten.into_iter().map(|i| start + i));
                continue;
            }
            Err(error) => error,
        };
        if part.len() == 1 {
            let position = part.start;
            match write_dead_instead(sink, &batch[position], &error, backoff).await {
                Instead::Written(dead) => {
                    written.rows += 1;
                    written.isolated += 1;
                    written.replaced.push((position, *dead));
                    crate::operate::metrics::outcome_write_failed("poisoned", 1);
                }
                Instead::FencedOff => {
                    written.isolated += 1;
                    written.unwritten.push(position);
                    crate::operate::metrics::outcome_write_failed("poisoned", 1);
                }
                Instead::Refused => {
                    written.unwritable += 1;
                    written.unwritten.push(position);
                    crate::operate::metrics::outcome_write_failed("unwritable", 1);
                }
            }
            continue;
        }
        crate::log::warn!(error = %crate::log::escaped(&error), completions = part.len(),
            "the database refused a batch of outcomes; splitting it to isolate the refused one");
        let middle = part.start + part.len() / 2;
        parts.push(middle..part.end);
        parts.push(part.start..middle);
    }
    written.unwritten.sort_unstable();
    written
}

/// What became of an outcome the database refused.
enum Instead {
    /// Written `dead` instead, as this.
    Written(Box<Completion>),
    /// Not written `dead` either: its record was claimed again meanwhile.
    FencedOff,
    /// Refused even as `dead`: left.
    Refused,
}

/// Writes `part`, retrying transient failures for as long as they last. Returns the
/// permanent failure, if one comes.
async fn write_retrying<S>(sink: &S, part: &[Completion], backoff: Backoff) -> Result<Wrote>
where
    S: OutcomeSink + ?Sized,
{
    let mut delay = backoff.first;
    loop {
        match sink.write(part).await {
            Err(error) if is_transient(&error) => {
                crate::operate::metrics::outcome_write_failed("transient", 1);
                crate::log::warn!(error = %crate::log::escaped(&error), completions = part.len(), retry_in = ?delay,
                    "could not write outcomes (a transient failure); retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(backoff.max);
            }
            result => return result,
        }
    }
}

/// Writes `refused` as `dead`, with the database's reason.
async fn write_dead_instead<S>(
    sink: &S,
    refused: &Completion,
    error: &Error,
    backoff: Backoff,
) -> Instead
where
    S: OutcomeSink + ?Sized,
{
    let dead = dead_instead(refused, error);
    match write_retrying(sink, std::slice::from_ref(&dead), backoff).await {
        Ok(wrote) if wrote.unwritten.is_empty() => {
            crate::log::error!(id = refused.id, attempt = refused.attempt, error = %crate::log::escaped(&error),
                "the database refused an outcome; the request is written `dead` instead");
            Instead::Written(Box::new(dead))
        }
        Ok(_) => {
            crate::log::warn!(id = refused.id, attempt = refused.attempt, error = %crate::log::escaped(&error),
                "the database refused an outcome, and its record was claimed again meanwhile: \
                 neither is written");
            Instead::FencedOff
        }
        Err(dead_error) => {
            crate::log::error!(id = refused.id, attempt = refused.attempt, error = %crate::log::escaped(&error), dead_error = %crate::log::escaped(&dead_error),
                "the database refused an outcome, and refused it as `dead` too; leaving it: \
                 its lease will expire and the rescuer will count the attempt");
            Instead::Refused
        }
    }
}

/// The `dead` outcome written in place of one the database refused: the same record and
/// fence, a message naming the database's error and the outcome it replaces.
fn dead_instead(refused: &Completion, error: &Error) -> Completion {
    let reason = text::stored(&format!(
        "async-exec could not store the outcome of attempt {}: the database refused it ({}). \
         The outcome was {}. Fix what refused it, then replay the request if it should run again.",
        refused.attempt,
        text::capped(&error.to_string(), 2048),
        describe(&refused.result),
    ));
    Completion {
        result: CompletionResult::Dead {
            error: reason.clone(),
        },
        log: refused.log.as_ref().map(|log| AttemptLog {
            error: Some(reason),
            ..log.clone()
        }),
        ..refused.clone()
    }
}

/// The outcome a completion would have written, for people.
fn describe(result: &CompletionResult) -> String {
    match result {
        CompletionResult::Delete => "a success (delete the record)".into(),
        CompletionResult::Succeeded => "a success".into(),
        CompletionResult::Failed { error, run_at } => format!(
            "`failed`, to run again at {run_at}, error: {}",
            text::capped(error, 4096)
        ),
        CompletionResult::Dead { error } => {
            format!("`dead`, error: {}", text::capped(error, 4096))
        }
        CompletionResult::Snoozed { note, run_at } => format!(
            "`init` (snoozed), to run again at {run_at}: {}",
            text::capped(note, 4096)
        ),
        CompletionResult::Cancelled { note } => {
            format!("`cancelled`: {}", text::capped(note, 4096))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::base::record::RequestId;

    /// A sink that refuses any batch holding a refused id (unless it is written `dead`),
    /// fails the first `transient` writes with a reset connection, leaves the fenced ids
    /// unwritten, and records what it wrote.
    #[derive(Default)]
    struct FakeSink {
        refused: HashSet<RequestId>,
        fenced: HashSet<RequestId>,
        refuse_dead_too: bool,
        transient: Mutex<usize>,
        calls: Mutex<usize>,
        written: Mutex<Vec<(RequestId, &'static str, Option<String>)>>,
    }

    #[async_trait]
    impl OutcomeSink for FakeSink {
        async fn write(&self, completions: &[Completion]) -> Result<Wrote> {
            *self.calls.lock().unwrap() += 1;
            {
                let mut transient = self.transient.lock().unwrap();
                if *transient > 0 {
                    *transient -= 1;
                    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
                    return Err(Error::Database(sqlx::Error::Io(reset)));
                }
            }
            let refused = completions.iter().any(|c| {
                self.refused.contains(&c.id)
                    && (self.refuse_dead_too || !matches!(c.result, CompletionResult::Dead { .. }))
            });
            if refused {
                return Err(Error::Database(sqlx::Error::Encode(
                    "invalid byte sequence for encoding \"UTF8\": 0x00".into(),
                )));
            }
            let mut written = self.written.lock().unwrap();
            let mut unwritten = Vec::new();
            for (position, c) in completions.iter().enumerate() {
                if self.fenced.contains(&c.id) {
                    unwritten.push(position);
                    continue;
                }
                let (status, error, _) = c.result.update().unwrap_or(("delete", None, None));
                written.push((c.id, status, error.map(str::to_owned)));
            }
            Ok(Wrote {
                rows: (completions.len() - unwritten.len()) as u64,
                unwritten,
            })
        }
    }

    fn completion(id: RequestId, result: CompletionResult) -> Completion {
        Completion {
            id,
            attempt: 1,
            owner: Arc::from("test@1"),
            executor: "test",
            result,
            finished: crate::base::record::now_ms(),
            log: None,
            result_json: None,
            subject: Default::default(),
        }
    }

    /// Rows, isolated, unwritable.
    fn counts(written: &Written) -> (u64, usize, usize) {
        (written.rows, written.isolated, written.unwritable)
    }

    fn batch(n: i64, failing: RequestId) -> Vec<Completion> {
        (1..=n)
            .map(|id| match id == failing {
                true => completion(
                    id,
                    CompletionResult::Failed {
                        error: "card declined".into(),
                        run_at: 7,
                    },
                ),
                false => completion(id, CompletionResult::Delete),
            })
            .collect()
    }

    const QUICK: Backoff = Backoff {
        first: Duration::from_millis(1),
        max: Duration::from_millis(4),
    };

    #[tokio::test]
    async fn a_refused_outcome_is_isolated_and_the_others_written() {
        let sink = FakeSink {
            refused: HashSet::from([37]),
            ..FakeSink::default()
        };
        let batch = batch(100, 37);
        let written = write_isolating(&sink, &batch, QUICK).await;
        assert_eq!(counts(&written), (100, 1, 0));
        assert!(written.unwritten.is_empty());
        assert_eq!(written.replaced.len(), 1);
        assert_eq!(written.replaced[0].0, 36, "id 37's position");
        assert!(matches!(
            written.replaced[0].1.result,
            CompletionResult::Dead { .. }
        ));
        let rows = sink.written.lock().unwrap().clone();
        let mut ids: Vec<RequestId> = rows.iter().map(|r| r.0).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (1..=100).collect::<Vec<_>>(),
            "each outcome written once"
        );
        let (_, status, error) = rows.iter().find(|r| r.0 == 37).unwrap();
        assert_eq!(*status, "dead");
        let error = error.as_deref().unwrap();
        assert!(error.contains("the database refused it"), "{error}");
        assert!(
            error.contains("0x00"),
            "names the database's error: {error}"
        );
        assert!(
            error.contains("card declined"),
            "names the outcome: {error}"
        );
        assert!(rows.iter().filter(|r| r.0 != 37).all(|r| r.1 == "delete"));
        // Halving: about 2 log2(100) writes, not one per outcome.
        let calls = *sink.calls.lock().unwrap();
        assert!(calls <= 16, "{calls} writes");
    }

    #[tokio::test]
    async fn an_outcome_refused_even_as_dead_is_left_and_the_rest_written() {
        let sink = FakeSink {
            refused: HashSet::from([1, 8]),
            refuse_dead_too: true,
            ..FakeSink::default()
        };
        let written = write_isolating(&sink, &batch(8, 0), QUICK).await;
        assert_eq!(counts(&written), (6, 0, 2));
        assert_eq!(written.unwritten, [0, 7], "ids 1 and 8");
        let ids: HashSet<RequestId> = sink.written.lock().unwrap().iter().map(|r| r.0).collect();
        assert_eq!(ids, (2..=7).collect());
    }

    /// Outcomes fenced off in the parts of a split batch are named by their positions in
    /// the batch, with the refused one that was written `dead` instead.
    #[tokio::test]
    async fn fenced_outcomes_are_named_by_their_position_in_the_batch() {
        let sink = FakeSink {
            refused: HashSet::from([6]),
            fenced: HashSet::from([3, 7, 6]),
            ..FakeSink::default()
        };
        let written = write_isolating(&sink, &batch(8, 0), QUICK).await;
        assert_eq!(counts(&written), (5, 1, 0));
        assert_eq!(
            written.unwritten,
            [2, 5, 6],
            "ids 3 and 7 fenced off; 6, refused, fenced off as `dead` too"
        );
        assert!(written.replaced.is_empty());
        let sink = FakeSink {
            fenced: HashSet::from([2]),
            ..FakeSink::default()
        };
        let written = write_isolating(&sink, &batch(4, 0), QUICK).await;
        assert_eq!((counts(&written), written.unwritten), ((3, 0, 0), vec![1]));
    }

    #[tokio::test]
    async fn a_transient_failure_is_retried_not_split() {
        let sink = FakeSink {
            transient: Mutex::new(3),
            ..FakeSink::default()
        };
        let written = write_isolating(&sink, &batch(50, 0), QUICK).await;
        assert_eq!(written.rows, 50);
        assert_eq!(written.isolated, 0);
        assert_eq!(
            *sink.calls.lock().unwrap(),
            4,
            "three failures, then the whole batch"
        );
        assert_eq!(sink.written.lock().unwrap().len(), 50);
    }

    /// Counts `async_exec_outcome_write_failures_total` by its `result` label.
    #[derive(Default)]
    struct Failures(Arc<Mutex<std::collections::HashMap<String, u64>>>);

    struct Slot(String, Arc<Mutex<std::collections::HashMap<String, u64>>>);

    impl metrics::CounterFn for Slot {
        fn increment(&self, value: u64) {
            *self.1.lock().unwrap().entry(self.0.clone()).or_default() += value;
        }
        fn absolute(&self, _: u64) {}
    }

    impl metrics::Recorder for Failures {
        fn describe_counter(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_gauge(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_histogram(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn register_counter(
            &self,
            key: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Counter {
            if key.name() != "async_exec_outcome_write_failures_total" {
                return metrics::Counter::noop();
            }
            let result = key
                .labels()
                .find(|l| l.key() == "result")
                .map(|l| l.value().to_owned());
            metrics::Counter::from_arc(Arc::new(Slot(result.unwrap_or_default(), self.0.clone())))
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    /// Every transient write tried again, every outcome written `dead` instead (poisoned),
    /// and every one refused even so (unwritable) is counted.
    #[test]
    fn failed_outcome_writes_are_counted() {
        let failures = Failures::default();
        metrics::with_local_recorder(&failures, || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async {
                let flaky = FakeSink {
                    transient: Mutex::new(3),
                    ..FakeSink::default()
                };
                write_isolating(&flaky, &batch(10, 0), QUICK).await;
                let poisoned = FakeSink {
                    refused: HashSet::from([4]),
                    ..FakeSink::default()
                };
                write_isolating(&poisoned, &batch(10, 4), QUICK).await;
                let unwritable = FakeSink {
                    refused: HashSet::from([1, 8]),
                    refuse_dead_too: true,
                    ..FakeSink::default()
                };
                write_isolating(&unwritable, &batch(8, 0), QUICK).await;
            });
        });
        let counted = failures.0.lock().unwrap().clone();
        let get = |result: &str| counted.get(result).copied().unwrap_or(0);
        assert_eq!(
            (get("transient"), get("poisoned"), get("unwritable")),
            (3, 1, 2),
            "{counted:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn transient_retries_back_off_up_to_the_cap() {
        let sink = FakeSink {
            transient: Mutex::new(10),
            ..FakeSink::default()
        };
        let started = tokio::time::Instant::now();
        let written = write_isolating(&sink, &batch(2, 0), Backoff::default()).await;
        assert_eq!(written.rows, 2);
        // 50 + 100 + ... + 3,200 ms, then the cap of 5 s three times.
        let waited = started.elapsed();
        assert_eq!(
            waited,
            Duration::from_millis(50 + 100 + 200 + 400 + 800 + 1600 + 3200)
                + Duration::from_secs(5 * 3)
        );
    }
}
