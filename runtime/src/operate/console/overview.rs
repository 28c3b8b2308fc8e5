//! The overview's numbers, shared by the page and `api/overview`, and the counts they
//! show: requests by status and by executor, counted by one `GROUP BY` over every record
//! of the application. At 1,000,000 records that reads every one of them (seconds on a
//! busy server), so the console keeps the last count and serves it with its age: a view
//! of counts older than [`ConsoleConfig::counts_max_age`](super::ConsoleConfig::counts_max_age)
//! starts a recount in the background and shows the count it has. The due time of the
//! longest-waiting request (a `MIN` over every waiting record) is kept with the counts. Only the first view
//! (and every view with a max age of zero) waits for a count. Nothing is written on the
//! hot path (submit, claim, complete) for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use super::State;
use crate::base::query::{DepthSample, ExecutorCount, MinuteStat};
use crate::base::record::{now_ms, Status};
use crate::runtime::Runtime;
use crate::store::ops::minute_of;

/// One count of the requests of the application.
#[derive(Debug, Clone)]
pub(crate) struct Counts {
    /// When the count started (unix ms): it holds what was stored then, or later.
    pub(crate) as_of: i64,
    /// By executor and status (zeros left out).
    pub(crate) by_executor: Vec<ExecutorCount>,
    /// When the longest-waiting due request was due (unix ms, the database's clock), if
    /// one waited: a `MIN` over the waiting records, as slow as the counts on some servers.
    pub(crate) oldest_due: Option<i64>,
}

impl Counts {
    /// Every status, in the order of [`Status::ALL`], zeros included.
    pub(crate) fn by_status(&self) -> Vec<StatusCount> {
        Status::ALL
            .iter()
            .map(|&status| StatusCount {
                status,
                count: self
                    .by_executor
                    .iter()
                    .filter(|c| c.status == status)
                    .map(|c| c.count)
                    .sum(),
            })
            .collect()
    }

    /// The queue depth these counts show: `init` and `failed` waiting, `running`, in the
    /// minute the count started.
    pub(crate) fn depth(&self) -> DepthSample {
        let of = |statuses: &[Status]| {
            self.by_executor
                .iter()
                .filter(|c| statuses.contains(&c.status))
                .map(|c| c.count)
                .sum()
        };
        DepthSample {
            minute: minute_of(self.as_of),
            waiting: of(&[Status::Init, Status::Failed]),
            running: of(&[Status::Running]),
        }
    }
}

/// The last count, recounted in the background when it is older than its max age.
#[derive(Debug, Clone)]
pub(crate) struct CountCache {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    max_age_ms: i64,
    latest: Mutex<Option<Arc<Counts>>>,
    /// A background recount is under way.
    recounting: AtomicBool,
    /// Held while a view waits for a count, so that views arriving together count once.
    waiting: tokio::sync::Mutex<()>,
}

impl CountCache {
    pub(crate) fn new(max_age: Duration) -> CountCache {
        CountCache {
            shared: Arc::new(Shared {
                max_age_ms: max_age.as_millis().min(i64::MAX as u128) as i64,
                latest: Mutex::new(None),
                recounting: AtomicBool::new(false),
                waiting: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Counts older than this are counted again (ms).
    pub(crate) fn max_age_ms(&self) -> i64 {
        self.shared.max_age_ms
    }

    fn latest(&self) -> Option<Arc<Counts>> {
        self.shared.latest.lock().expect("count lock").clone()
    }

    /// The counts to show: the last one, recounted in the background when it is older
    /// than the max age; counted now when there is none (or the max age is zero).
    pub(crate) async fn get(&self, rt: &Runtime) -> crate::Result<Arc<Counts>> {
        if self.shared.max_age_ms > 0 {
            if let Some(counts) = self.latest() {
                if now_ms() - counts.as_of >= self.shared.max_age_ms {
                    self.recount_soon(rt);
                }
                return Ok(counts);
            }
        }
        let _one_at_a_time = self.shared.waiting.lock().await;
        if self.shared.max_age_ms > 0 {
            if let Some(counts) = self.latest() {
                return Ok(counts); // counted while this view waited
            }
        }
        self.count(rt).await
    }

    /// Starts a recount in the background unless one is under way (after an operator
    /// action, so that the next views show its effect).
    pub(crate) fn recount_soon(&self, rt: &Runtime) {
        if self.shared.recounting.swap(true, Ordering::AcqRel) {
            return;
        }
        let cache = self.clone();
        let rt = rt.clone();
        tokio::spawn(async move {
            if let Err(error) = cache.count(&rt).await {
                crate::log::warn!(error = ?error.to_string(), "could not count the requests for the console's overview; \
                    showing the last count, trying again on the next view");
            }
            cache.shared.recounting.store(false, Ordering::Release);
        });
    }

    async fn count(&self, rt: &Runtime) -> crate::Result<Arc<Counts>> {
        let as_of = now_ms();
        let counts = Arc::new(Counts {
            as_of,
            by_executor: rt.counts_by_executor().await?,
            oldest_due: rt.oldest_waiting_due().await?,
        });
        let mut latest = self.shared.latest.lock().expect("count lock");
        // A slower count that started earlier does not replace a newer one.
        if !latest.as_ref().is_some_and(|l| l.as_of > as_of) {
            *latest = Some(counts.clone());
        }
        Ok(latest.clone().unwrap_or(counts))
    }
}

/// How many requests are in one status.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct StatusCount {
    pub(crate) status: Status,
    pub(crate) count: i64,
}

/// The overview page's numbers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Overview {
    /// Every status, zeros included (as of `counts_as_of`).
    pub(crate) by_status: Vec<StatusCount>,
    /// By executor and status, zeros left out (as of `counts_as_of`).
    pub(crate) by_executor: Vec<ExecutorCount>,
    /// When the counts were taken (unix ms): they are recounted in the background when
    /// older than the console's `counts_max_age` (10 s unless configured).
    pub(crate) counts_as_of: i64,
    /// How old the counts are (ms).
    pub(crate) counts_age_ms: i64,
    /// How long the longest-waiting due request has waited (ms): the one that waited
    /// longest as of `counts_as_of`, if it still waits.
    pub(crate) oldest_waiting_ms: Option<i64>,
    /// Failed (dead) out of finished in the last hour, 0 to 1; `null` when none finished.
    pub(crate) failure_rate_last_hour: Option<f64>,
    /// Finished per minute over the last day (minutes without any left out): every
    /// instance's written so far (every two seconds) and this instance's not written yet.
    pub(crate) finished_per_minute: Vec<MinuteStat>,
    /// Queue depth over the last day: the samples, one a minute, then the counts of
    /// `by_status` (waiting: `init` and `failed`) in the minute of `counts_as_of`, in place
    /// of that minute's sample (and any later one).
    pub(crate) queue_depth: Vec<DepthSample>,
}

/// Counts (from the cache), the oldest waiting request, the failure rate of the last hour
/// and the series of the charts: what the page and `api/overview` show.
pub(crate) async fn overview(state: &State) -> crate::Result<Overview> {
    let rt = &state.rt;
    let day = Duration::from_secs(24 * 3600);
    let counts = state.counts.get(rt).await?;
    let finished = rt.finished_per_minute(day).await?;
    let hour_start = minute_of(now_ms()) - 59 * 60_000;
    let (ok, dead) = finished
        .iter()
        .filter(|m| m.minute >= hour_start)
        .fold((0, 0), |(o, d), m| (o + m.succeeded, d + m.failed));
    Ok(Overview {
        by_status: counts.by_status(),
        by_executor: counts.by_executor.clone(),
        counts_as_of: counts.as_of,
        counts_age_ms: (now_ms() - counts.as_of).max(0),
        oldest_waiting_ms: counts
            .oldest_due
            .map(|due| (rt.inner.now_ms() - due).max(0)),
        failure_rate_last_hour: (ok + dead > 0).then(|| dead as f64 / (ok + dead) as f64),
        finished_per_minute: finished,
        queue_depth: with_live_depth(rt.queue_depth(day).await?, counts.depth()),
    })
}

/// `samples` ending with `live`: samples of its minute or later are left out (the live
/// point is what the cards show; a sample of the same minute may be older or newer).
fn with_live_depth(mut samples: Vec<DepthSample>, live: DepthSample) -> Vec<DepthSample> {
    samples.retain(|s| s.minute < live.minute);
    samples.push(live);
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_depth_is_the_cards_counts_in_place_of_the_minutes_sample() {
        let count = |status, count| ExecutorCount {
            executor: "e".into(),
            status,
            count,
        };
        let counts = Counts {
            as_of: 180_500,
            by_executor: vec![
                count(Status::Init, 2),
                count(Status::Failed, 3),
                count(Status::Running, 1),
                count(Status::Dead, 9),
            ],
            oldest_due: None,
        };
        let live = counts.depth();
        assert_eq!((live.minute, live.waiting, live.running), (180_000, 5, 1));
        let sample = |minute, waiting| DepthSample {
            minute,
            waiting,
            running: 0,
        };
        let series = with_live_depth(
            vec![sample(60_000, 7), sample(180_000, 8), sample(240_000, 9)],
            live,
        );
        assert_eq!(series, [sample(60_000, 7), live]);
        assert_eq!(with_live_depth(Vec::new(), live), [live]);
    }
}
