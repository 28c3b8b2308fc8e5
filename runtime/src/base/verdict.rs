//! What a queue's numbers mean: the [`Verdict`] of a queue from what runs, waits and
//! starts in it and its limits ([`judge`]). "Saturated" is running at a limit while due
//! requests wait: the limit is working. Due requests that wait while the queue runs below
//! its limits and nothing starts are a stuck queue (paused, no instance runs its
//! executors, or its instances are wedged).

use serde::Serialize;

/// How long the longest-waiting due request of a queue that starts nothing and runs below
/// its limits may have waited before the queue reads [`Verdict::Stuck`].
pub(crate) const STUCK_AFTER_MS: i64 = 5_000;

/// What a queue's numbers mean.
///
/// ```
/// use async_exec::Verdict;
/// assert_eq!(Verdict::LimitWorking.as_str(), "limit_working");
/// assert_eq!(Verdict::parse("stuck"), Some(Verdict::Stuck));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "console", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Verdict {
    /// Nothing runs and nothing is due.
    Idle,
    /// Requests run and none that is due waits.
    Flowing,
    /// Saturated: due requests wait because a limit holds them (the queue's concurrency
    /// reached, every partition with due requests at its per-partition limit, or starts
    /// at the queue's rate). The limit is doing its job.
    LimitWorking,
    /// Due requests wait while the queue runs below its limits and starts continue (or
    /// they became due only now): the instances' workers are the bound.
    Backlogged,
    /// Due requests wait, the queue runs below its limits and nothing started in the
    /// last minute while the oldest waited longer than a few seconds, or the queue is
    /// paused: paused, no instance runs its executors, or they are wedged.
    Stuck,
}

impl Verdict {
    /// The verdict's name (`idle`, `flowing`, `limit_working`, `backlogged`, `stuck`),
    /// as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Idle => "idle",
            Verdict::Flowing => "flowing",
            Verdict::LimitWorking => "limit_working",
            Verdict::Backlogged => "backlogged",
            Verdict::Stuck => "stuck",
        }
    }

    /// The verdict named `name` ([`Verdict::as_str`]), if any.
    pub fn parse(name: &str) -> Option<Verdict> {
        [
            Verdict::Idle,
            Verdict::Flowing,
            Verdict::LimitWorking,
            Verdict::Backlogged,
            Verdict::Stuck,
        ]
        .into_iter()
        .find(|v| v.as_str() == name)
    }
}

/// What a verdict is made of: a queue's numbers and limits now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    pub(crate) running: i64,
    pub(crate) due: i64,
    pub(crate) lag_ms: Option<i64>,
    /// Started over `window_ms`.
    pub(crate) started: i64,
    pub(crate) window_ms: i64,
    pub(crate) concurrency: Option<i64>,
    pub(crate) rate: Option<i64>,
    pub(crate) paused: bool,
    /// With a per-partition limit: whether every partition with due requests (of those
    /// read) runs at its limit; `None` without one.
    pub(crate) partitions_full: Option<bool>,
}

/// The verdict of `r`, and a sentence that says why.
pub(crate) fn judge(r: &Reading) -> (Verdict, String) {
    if r.due == 0 {
        return if r.running > 0 {
            (
                Verdict::Flowing,
                format!("{} running, none due waits", r.running),
            )
        } else {
            (Verdict::Idle, "nothing runs or is due".into())
        };
    }
    let lag = r.lag_ms.unwrap_or(0) / 1000;
    if r.paused {
        return (
            Verdict::Stuck,
            format!(
                "paused: {} due wait (the oldest {lag} s); resume the queue or its executors",
                r.due
            ),
        );
    }
    if let Some(limit) = r.concurrency.filter(|&limit| r.running >= limit) {
        return (
            Verdict::LimitWorking,
            format!(
                "running at the queue's limit ({} of {limit}) while {} due wait",
                r.running, r.due
            ),
        );
    }
    if r.partitions_full == Some(true) {
        return (
            Verdict::LimitWorking,
            format!(
                "every partition with due requests runs at its per-partition limit; {} due wait",
                r.due
            ),
        );
    }
    if let Some(rate) = r.rate {
        // Starts at nine tenths of the rate or more over the window: the bucket is the bound.
        if r.window_ms > 0 && r.started * 1000 * 10 >= rate * r.window_ms * 9 {
            return (
                Verdict::LimitWorking,
                format!(
                    "starting at the queue's rate ({rate}/s) while {} due wait",
                    r.due
                ),
            );
        }
    }
    if r.started == 0 && r.lag_ms.unwrap_or(0) >= STUCK_AFTER_MS {
        return (
            Verdict::Stuck,
            format!(
                "{} due wait (the oldest {lag} s), {} running below the limits, and none \
                 started in the last minute: is an instance running the queue's executors, \
                 and are they paused?",
                r.due, r.running
            ),
        );
    }
    (
        Verdict::Backlogged,
        format!(
            "{} due wait (the oldest {lag} s) below the limits, {} started in the last \
             minute: the instances' workers are the bound",
            r.due, r.started
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(running: i64, concurrency: Option<i64>) -> Reading {
        Reading {
            running,
            due: 4,
            lag_ms: Some(30_000),
            window_ms: 60_000,
            concurrency,
            ..Reading::default()
        }
    }

    #[test]
    fn a_queue_at_its_limit_with_a_backlog_is_the_limit_working() {
        assert_eq!(judge(&due(2, Some(2))).0, Verdict::LimitWorking);
        let partitions = Reading {
            partitions_full: Some(true),
            ..due(1, Some(5))
        };
        assert_eq!(judge(&partitions).0, Verdict::LimitWorking);
        let rate = Reading {
            rate: Some(2),
            started: 110,
            ..due(1, None)
        };
        assert_eq!(judge(&rate).0, Verdict::LimitWorking);
    }

    #[test]
    fn waiting_below_the_limit_with_no_starts_is_stuck() {
        assert_eq!(judge(&due(0, Some(2))).0, Verdict::Stuck);
        assert_eq!(judge(&due(1, None)).0, Verdict::Stuck);
        let paused = Reading {
            paused: true,
            lag_ms: Some(0),
            ..due(2, Some(2))
        };
        assert_eq!(judge(&paused).0, Verdict::Stuck, "a pause wins");
        let fresh = Reading {
            lag_ms: Some(STUCK_AFTER_MS - 1),
            ..due(0, Some(2))
        };
        assert_eq!(judge(&fresh).0, Verdict::Backlogged);
        let starting = Reading {
            started: 5,
            ..due(0, Some(2))
        };
        assert_eq!(judge(&starting).0, Verdict::Backlogged);
        let slow_rate = Reading {
            rate: Some(2),
            started: 10,
            ..due(0, None)
        };
        assert_eq!(judge(&slow_rate).0, Verdict::Backlogged);
    }

    #[test]
    fn nothing_due_is_idle_or_flowing() {
        let idle = Reading::default();
        assert_eq!(judge(&idle).0, Verdict::Idle);
        let flowing = Reading {
            running: 3,
            concurrency: Some(3),
            ..Reading::default()
        };
        assert_eq!(judge(&flowing).0, Verdict::Flowing);
        for v in ["idle", "flowing", "limit_working", "backlogged", "stuck"] {
            assert_eq!(Verdict::parse(v).map(Verdict::as_str), Some(v));
        }
    }
}
