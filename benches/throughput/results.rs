//! Results: one JSON line per result as it comes, then the medians with their ratios to
//! the baseline, then a table; and the arithmetic they need.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Impl {
    Lib,
    Baseline,
    /// The overhead phase's transaction without any call.
    Plain,
}

impl Impl {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Impl::Lib => "async-exec",
            Impl::Baseline => "baseline",
            Impl::Plain => "plain",
        }
    }
}

/// Where a result goes in the table: backend, phase order, phase, implementation.
pub(crate) type ResultKey = (Kind, usize, &'static str, Impl);

/// Every result, printed as it comes.
#[derive(Default)]
pub(crate) struct Results {
    /// The unit and the values of each repetition.
    pub(crate) values: BTreeMap<ResultKey, (&'static str, Vec<f64>)>,
}

impl Results {
    pub(crate) fn record(
        &mut self,
        kind: Kind,
        phase: &'static str,
        implementation: Impl,
        rep: usize,
        value: f64,
        unit: &'static str,
    ) {
        println!(
            "{}",
            json!({"backend": kind.name(), "phase": phase, "impl": implementation.name(),
                   "rep": rep, "value": round(value), "unit": unit})
        );
        eprintln!(
            "[{}] rep {rep} {phase} {}: {} {unit}",
            kind.name(),
            implementation.name(),
            round(value)
        );
        let order = PHASE_ORDER
            .iter()
            .position(|p| *p == phase)
            .unwrap_or(PHASE_ORDER.len());
        self.values
            .entry((kind, order, phase, implementation))
            .or_insert((unit, Vec::new()))
            .1
            .push(value);
    }

    pub(crate) fn median(
        &self,
        kind: Kind,
        order: usize,
        phase: &'static str,
        i: Impl,
    ) -> Option<f64> {
        self.values
            .get(&(kind, order, phase, i))
            .map(|(_, values)| median(values))
    }

    /// One JSON line per median, with its ratio to the baseline, then a table.
    pub(crate) fn print_summary(&self) {
        let mut rows = Vec::new();
        for (&(kind, order, phase, implementation), (unit, values)) in &self.values {
            let value = median(values);
            let ratio = match implementation {
                Impl::Baseline => None,
                _ => self
                    .median(kind, order, phase, Impl::Baseline)
                    .filter(|b| *b != 0.0)
                    .map(|b| value / b),
            };
            println!(
                "{}",
                json!({"backend": kind.name(), "phase": phase, "impl": implementation.name(),
                       "median": round(value), "unit": unit, "reps": values.len(),
                       "ratio": ratio.map(round)})
            );
            if implementation == Impl::Baseline {
                continue;
            }
            let baseline = self.median(kind, order, phase, Impl::Baseline);
            rows.push([
                kind.name().to_string(),
                phase.to_string(),
                format!("{} ({})", implementation.name(), values.len()),
                format!("{} {unit}", round(value)),
                baseline.map_or("-".into(), |b| format!("{} {unit}", round(b))),
                ratio.map_or("-".into(), |r| format!("{:.2}x", r)),
                better(unit).into(),
            ]);
        }
        let header = [
            "backend",
            "phase",
            "impl (reps)",
            "median",
            "baseline",
            "ratio",
            "better",
        ]
        .map(String::from);
        let mut widths = header.clone().map(|h| h.len());
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        println!();
        for row in std::iter::once(&header).chain(&rows) {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            println!("{}", cells.join("  ").trim_end());
        }
    }
}

/// Result phases, in the order of the table.
pub(crate) const PHASE_ORDER: &[&str] = &[
    "submit_tx1",
    "submit_tx1000",
    "submit_batch",
    "drain",
    "drain_first_body",
    "latency_p50",
    "latency_p99",
    "latency_max",
    "latency_other_p50",
    "latency_other_p99",
    "latency_other_max",
    "overhead",
    "overhead_tx",
    "overhead_plain_tx",
    "backlog_peak_rss",
    "backlog_drain",
    "scale_drain_x1",
    "scale_drain_x2",
    "scale_drain_x3",
    "scale_drain_x4",
    "scale_drain_x5",
    "scale_drain_x6",
    "scale_drain_x7",
    "scale_drain_x8",
    "flow_no_queue",
    "flow_limit100",
    "flow_per_partition",
    "flow_limit100_vs_no_queue",
    "flow_per_partition_vs_no_queue",
    "neighbour_small_p50",
    "neighbour_small_p95",
    "neighbour_alone_p50",
    "neighbour_alone_p95",
    "neighbour_p50_vs_alone",
    "neighbour_p95_vs_alone",
    "crowd_quiet_p50",
    "crowd_quiet_p95",
    "crowd_alone_p50",
    "crowd_alone_p95",
    "crowd_p95_vs_alone",
];

pub(crate) fn better(unit: &str) -> &'static str {
    if unit.ends_with("/s") || unit == "x of no queue" {
        "higher"
    } else {
        "lower"
    }
}

pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 0 {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    }
}

/// The `q`-quantile of sorted values (nearest rank).
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn round(value: f64) -> f64 {
    let digits = if value.abs() >= 100.0 { 1.0 } else { 1000.0 };
    (value * digits).round() / digits
}

pub(crate) fn per_second(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub(crate) fn chunks(n: usize) -> impl Iterator<Item = Range<i64>> {
    (0..n)
        .step_by(CHUNK)
        .map(move |start| start as i64..(start + CHUNK).min(n) as i64)
}
