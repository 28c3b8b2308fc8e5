//! Charts as inline SVG, drawn on the server: stacked bars of finished requests
//! (succeeded, failed) per time bucket, and a line of the queue depth.

use maud::{html, Markup};

use super::views::time;
use crate::query::{DepthSample, MinuteStat};

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

/// Stacked bars: succeeded (below) and failed (above) per bucket.
pub(crate) fn finished_bars(id: &str, title: &str, buckets: &[MinuteStat]) -> Markup {
    let max = buckets
        .iter()
        .map(|b| b.succeeded + b.failed)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let n = buckets.len().max(1) as f64;
    let step = (WIDTH - 2.0 * PAD) / n;
    let scale = (HEIGHT - 2.0 * PAD) / max;
    let bottom = HEIGHT - PAD;
    let total_ok: i64 = buckets.iter().map(|b| b.succeeded).sum();
    let total_failed: i64 = buckets.iter().map(|b| b.failed).sum();
    html! {
        figure.chart id=(id) {
            figcaption {
                (title) " — " span.ok { (total_ok) " succeeded" } ", " span.failed { (total_failed) " failed" }
            }
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(title) {
                line x1=(PAD) y1=(bottom) x2=(WIDTH - PAD) y2=(bottom) class="axis" {}
                text x=(PAD) y=(PAD - 8.0) class="label" { "max " (max as i64) }
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
                text x=(PAD) y=(HEIGHT - 6.0) class="label" { (buckets.first().map(|b| time(b.minute)).unwrap_or_default()) }
                text x=(WIDTH - PAD) y=(HEIGHT - 6.0) class="label end" { "now" }
            }
        }
    }
}

/// The queue depth (waiting and running) over time.
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
        .max(1) as f64;
    let span = (now - since).max(1) as f64;
    let x = |t: i64| PAD + (t - since) as f64 / span * (WIDTH - 2.0 * PAD);
    let y = |v: i64| HEIGHT - PAD - v as f64 / max * (HEIGHT - 2.0 * PAD);
    let points = |f: &dyn Fn(&DepthSample) -> i64| {
        samples
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.minute), y(f(s))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    html! {
        figure.chart id=(id) {
            figcaption {
                (title) " — " span.waiting { "waiting" } ", " span.running { "running" }
                @if let Some(last) = samples.last() { " (last: " (last.waiting) " waiting, " (last.running) " running)" }
            }
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(title) {
                line x1=(PAD) y1=(HEIGHT - PAD) x2=(WIDTH - PAD) y2=(HEIGHT - PAD) class="axis" {}
                text x=(PAD) y=(PAD - 8.0) class="label" { "max " (max as i64) }
                @if samples.is_empty() {
                    text x=(WIDTH / 2.0) y=(HEIGHT / 2.0) class="label middle" { "no samples yet (one a minute)" }
                }
                polyline class="waiting" points=(points(&|s| s.waiting)) {}
                polyline class="running" points=(points(&|s| s.running)) {}
                text x=(PAD) y=(HEIGHT - 6.0) class="label" { (time(since)) }
                text x=(WIDTH - PAD) y=(HEIGHT - 6.0) class="label end" { "now" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
