//! Charts as inline SVG, drawn on the server: stacked bars of finished requests
//! (succeeded, failed) per time bucket, a line of the queue depth, and a queue's
//! saturation history (running against its limit, due waiting, the verdict of each sample).

use maud::{html, Markup};

use super::views::time;
use crate::base::flow::FlowSample;
use crate::base::query::{DepthSample, MinuteStat};

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 160.0;
const PAD: f64 = 24.0;

/// Finished requests in `buckets` buckets of `bucket_ms` ending at `now_minute`.
pub(crate) fn bucketed(
    stats: &[MinuteStat],
    now_minute: i64,
    bucket_ms: i64,
    buckets: i64,
) -> Vec<MinuteStat> {
    let start = now_minute - bucket_ms * (buckets - 1);
    let mut out: Vec<MinuteStat> = (0..buckets)
        .map(|i| MinuteStat {
            minute: start + i * bucket_ms,
            ..Default::default()
        })
        .collect();
    for s in stats {
        let index = (s.minute - start).div_euclid(bucket_ms);
        if let Some(bucket) = usize::try_from(index).ok().and_then(|i| out.get_mut(i)) {
            bucket.succeeded += s.succeeded;
            bucket.failed += s.failed;
            bucket.retried += s.retried;
        }
    }
    out
}

/// `HH:MM UTC` of a unix-ms time, the date before it when `dated`: the charts' axis
/// labels (a day's chart starts and ends at the same time of day).
fn clock(ms: i64, dated: bool) -> String {
    let text = time(ms);
    let (from, to) = if dated { (0, 16) } else { (11, 16) };
    match text.get(from..to) {
        Some(shown) => format!("{} UTC", shown.replace('T', " ")),
        None => text,
    }
}

/// The frame every chart shares: the time axis with its start, middle and end labelled
/// (UTC), the value axis's top line labelled with `max` and its unit, and `empty` in the
/// middle when there is nothing to draw.
fn frame(max: i64, unit: &str, since: i64, now: i64, empty: Option<&str>) -> Markup {
    let bottom = HEIGHT - PAD;
    let dated = now - since > 12 * 3600 * 1000;
    html! {
        line x1=(PAD) y1=(bottom) x2=(WIDTH - PAD) y2=(bottom) class="axis" {}
        line x1=(PAD) y1=(PAD) x2=(WIDTH - PAD) y2=(PAD) class="grid" {}
        text x=(PAD) y=(PAD - 6.0) class="label" { (max) " " (unit) }
        text x=(PAD - 4.0) y=(bottom + 3.0) class="label end" { "0" }
        @if let Some(empty) = empty {
            text x=(WIDTH / 2.0) y=(HEIGHT / 2.0) class="label middle empty" { (empty) }
        }
        text x=(PAD) y=(HEIGHT - 4.0) class="label" { (clock(since, dated)) }
        text x=(WIDTH / 2.0) y=(HEIGHT - 4.0) class="label middle" { (clock(since + (now - since) / 2, dated)) }
        text x=(WIDTH - PAD) y=(HEIGHT - 4.0) class="label end" { "now (" (clock(now, false)) ")" }
    }
}

/// Stacked bars: succeeded (below) and failed (above) per bucket; `per` names the
/// bucket (`minute`) for the value axis.
pub(crate) fn finished_bars(
    id: &str,
    title: &str,
    per: &str,
    buckets: &[MinuteStat],
    now: i64,
) -> Markup {
    let max = buckets
        .iter()
        .map(|b| b.succeeded + b.failed)
        .max()
        .unwrap_or(0)
        .max(1);
    let n = buckets.len().max(1) as f64;
    let step = (WIDTH - 2.0 * PAD) / n;
    let scale = (HEIGHT - 2.0 * PAD) / max as f64;
    let bottom = HEIGHT - PAD;
    let total_ok: i64 = buckets.iter().map(|b| b.succeeded).sum();
    let total_failed: i64 = buckets.iter().map(|b| b.failed).sum();
    let since = buckets.first().map_or(now, |b| b.minute);
    let empty = (total_ok + total_failed == 0).then_some("nothing finished in this span");
    html! {
        figure.chart id=(id) data-succeeded=(total_ok) data-failed=(total_failed) {
            figcaption {
                (title) " — " span.ok { (total_ok) " succeeded" } ", " span.failed { (total_failed) " failed (dead)" }
            }
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(title) {
                (frame(max, &format!("per {per}"), since, now, empty))
                @for (i, b) in buckets.iter().enumerate() {
                    @let x = PAD + i as f64 * step;
                    @let ok_h = b.succeeded as f64 * scale;
                    @let failed_h = b.failed as f64 * scale;
                    g {
                        title { (time(b.minute)) ": " (b.succeeded) " succeeded, " (b.failed) " failed, " (b.retried) " retried" }
                        rect class="ok" x=(x) y=(bottom - ok_h) width=(step * 0.85) height=(ok_h) {}
                        rect class="failed" x=(x) y=(bottom - ok_h - failed_h) width=(step * 0.85) height=(failed_h) {}
                    }
                }
            }
        }
    }
}

/// The queue depth (waiting and running) over time; the last sample is the cards'
/// counts, and the caption says it. Each line ends in a dot, so that a line of one
/// sample (a fresh system) shows.
pub(crate) fn depth_line(
    id: &str,
    title: &str,
    samples: &[DepthSample],
    since: i64,
    now: i64,
) -> Markup {
    let max = samples
        .iter()
        .map(|s| s.waiting.max(s.running))
        .max()
        .unwrap_or(0)
        .max(1);
    let span = (now - since).max(1) as f64;
    let x = |t: i64| PAD + (t - since).clamp(0, now - since) as f64 / span * (WIDTH - 2.0 * PAD);
    let y = |v: i64| HEIGHT - PAD - v as f64 / max as f64 * (HEIGHT - 2.0 * PAD);
    let points = |f: &dyn Fn(&DepthSample) -> i64| {
        samples
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.minute), y(f(s))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let last = samples.last();
    let empty = samples
        .is_empty()
        .then_some("no samples yet (one a minute)");
    html! {
        figure.chart id=(id) data-waiting=[last.map(|l| l.waiting)] data-running=[last.map(|l| l.running)] {
            figcaption {
                (title) " — " span.waiting { "waiting" } " (init and failed), " span.running { "running" }
                @if let Some(last) = last { ": now " (last.waiting) " waiting, " (last.running) " running (the counts above)" }
            }
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(title) {
                (frame(max, if max == 1 { "request" } else { "requests" }, since, now, empty))
                polyline class="waiting" points=(points(&|s| s.waiting)) {}
                polyline class="running" points=(points(&|s| s.running)) {}
                @if let Some(last) = last {
                    circle class="waiting" cx=(format!("{:.1}", x(last.minute))) cy=(format!("{:.1}", y(last.waiting))) r="3" {
                        title { "now: " (last.waiting) " waiting" }
                    }
                    circle class="running" cx=(format!("{:.1}", x(last.minute))) cy=(format!("{:.1}", y(last.running))) r="3" {
                        title { "now: " (last.running) " running" }
                    }
                }
            }
        }
    }
}

/// A queue's saturation history: running (and its limit, dashed, when it has one) and
/// due waiting over time, each sample's verdict a mark under the axis (its name in the
/// mark's title and class).
pub(crate) fn flow_line(id: &str, samples: &[FlowSample], since: i64, now: i64) -> Markup {
    let max = samples
        .iter()
        .map(|s| s.due.max(s.running).max(s.concurrency.unwrap_or(0)))
        .max()
        .unwrap_or(0)
        .max(1);
    let span = (now - since).max(1) as f64;
    let x = |t: i64| PAD + (t - since).clamp(0, now - since) as f64 / span * (WIDTH - 2.0 * PAD);
    let y = |v: i64| HEIGHT - PAD - v as f64 / max as f64 * (HEIGHT - 2.0 * PAD);
    let points = |f: &dyn Fn(&FlowSample) -> Option<i64>| {
        samples
            .iter()
            .filter_map(|s| f(s).map(|v| format!("{:.1},{:.1}", x(s.at), y(v))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let empty = samples.is_empty().then_some(
        "no samples in this span (a queue is sampled while it holds or starts anything)",
    );
    let saturated = samples
        .iter()
        .filter(|s| s.verdict == crate::Verdict::LimitWorking)
        .count();
    let stuck = samples
        .iter()
        .filter(|s| s.verdict == crate::Verdict::Stuck)
        .count();
    html! {
        figure.chart id=(id) data-samples=(samples.len()) data-saturated=(saturated) data-stuck=(stuck) {
            figcaption {
                "Saturation — " span.running { "running" } ", its limit (dashed), " span.waiting { "due waiting" }
                "; " (saturated) " of " (samples.len()) " samples at a limit (limit working), " (stuck) " stuck"
            }
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label="Saturation history" {
                (frame(max, if max == 1 { "request" } else { "requests" }, since, now, empty))
                polyline class="limit" points=(points(&|s| s.concurrency)) {}
                polyline class="waiting" points=(points(&|s| Some(s.due))) {}
                polyline class="running" points=(points(&|s| Some(s.running))) {}
                @for s in samples {
                    rect class={ "verdict " (s.verdict.as_str()) } x=(format!("{:.1}", x(s.at) - 1.5)) y=(HEIGHT - PAD + 2.0) width="3" height="5" {
                        title { (time(s.at)) ": " (s.verdict.as_str()) ", " (s.running) " running, " (s.due) " due, " (s.started) " started" }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels_are_clock_times_in_utc() {
        assert_eq!(clock(1_764_649_080_000, false), "04:18 UTC");
        assert_eq!(clock(1_764_649_080_000, true), "2025-12-02 04:18 UTC");
    }

    #[test]
    fn stats_fall_in_their_bucket_and_old_ones_are_left_out() {
        let stats = [
            MinuteStat {
                minute: 0,
                succeeded: 9,
                ..Default::default()
            },
            MinuteStat {
                minute: 120_000,
                succeeded: 2,
                failed: 1,
                retried: 0,
            },
            MinuteStat {
                minute: 180_000,
                succeeded: 3,
                ..Default::default()
            },
        ];
        let buckets = bucketed(&stats, 180_000, 60_000, 2);
        assert_eq!(buckets.len(), 2);
        assert_eq!(
            (buckets[0].minute, buckets[0].succeeded, buckets[0].failed),
            (120_000, 2, 1)
        );
        assert_eq!(buckets[1].succeeded, 3);
    }
}
