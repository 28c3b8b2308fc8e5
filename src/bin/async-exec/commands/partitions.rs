//! `partition QUEUE PARTITION [--weight N] [--concurrency N] [--rate N/PERIOD] | --clear`:
//! a tenant's own settings, audited as `cli:<os user>`.

use async_exec::{PartitionSettings, Period, Rate, Runtime};
use serde_json::json;

use crate::failure::Failure;
use crate::render::safe;

use super::Printed;

/// A rate as the command line gives it: `N/second`, `N/minute`, `N/hour`, `N/day` (or
/// `N/s`, `N/m`, `N/h`, `N/d`).
pub(crate) fn parse_rate(text: &str) -> Result<Rate, String> {
    let (n, period) = text
        .split_once('/')
        .ok_or_else(|| format!("a rate is N/second, N/minute, N/hour or N/day, not {text:?}"))?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("a rate's starts are a whole number from 1, not {n:?}"))?;
    let period = match period.trim() {
        "s" | "second" | "sec" => Period::Second,
        "m" | "minute" | "min" => Period::Minute,
        "h" | "hour" => Period::Hour,
        "d" | "day" => Period::Day,
        other => {
            return Err(format!(
                "a rate's period is second, minute, hour or day, not {other:?}"
            ))
        }
    };
    Ok(Rate::new(n, period))
}

/// `partition QUEUE PARTITION ...`: sets (or with `clear`, clears) its settings.
pub(crate) async fn partition(
    rt: &Runtime,
    queue: &str,
    partition: &str,
    (weight, concurrency, rate): (Option<u32>, Option<u32>, Option<Rate>),
    clear: bool,
) -> Result<Printed, Failure> {
    let actor = crate::operator::actor();
    if clear {
        let had = rt.clear_partition(queue, partition, &actor).await?;
        return Ok(Printed::ok(
            json!({ "action": "partition-clear", "queue": queue, "partition": partition,
                    "had_settings": had }),
            format!(
                "{} of {}: the queue's settings apply{}, from the next claim\n",
                safe(partition),
                safe(queue),
                if had {
                    " again"
                } else {
                    " (it had none of its own)"
                }
            ),
        ));
    }
    let mut settings = PartitionSettings::new();
    if let Some(n) = weight {
        settings = settings.weight(n);
    }
    if let Some(n) = concurrency {
        settings = settings.concurrency(n);
    }
    if let Some(rate) = rate {
        settings = settings.rate(rate);
    }
    rt.set_partition(queue, partition, settings, &actor).await?;
    let or_queue = |n: Option<String>| n.unwrap_or_else(|| "the queue's".to_string());
    Ok(Printed::ok(
        json!({ "action": "partition", "queue": queue, "partition": partition,
                "settings": settings }),
        format!(
            "{} of {}: weight {}, at most {} at once, {} starts, from the next claim\n",
            safe(partition),
            safe(queue),
            weight.unwrap_or(1),
            or_queue(concurrency.map(|n| n.to_string())),
            or_queue(rate.map(|r| format!("{}/{:?}", r.starts(), r.period()).to_lowercase())),
        ),
    ))
}
