//! The commands of the controls: `pause`, `resume`, `queues`, the limits of a queue and its
//! policy.

use async_exec::Runtime;
use serde_json::json;

use crate::failure::Failure;
use crate::render::safe;

use super::Printed;

/// `pause EXECUTOR` (`pause` true) and `resume EXECUTOR`, audited as `cli:<os user>`.
pub(crate) async fn pause(rt: &Runtime, executor: &str, pause: bool) -> Result<Printed, Failure> {
    let actor = crate::operator::actor();
    let (json, human) = if pause {
        rt.pause_executor(executor, &actor).await?;
        (
            json!({ "action": "pause", "executor": executor, "paused": true }),
            format!("{}: paused on every instance\n", safe(executor)),
        )
    } else {
        let was = rt.resume_executor(executor, &actor).await?;
        let human = if was {
            format!("{}: resumed\n", safe(executor))
        } else {
            format!("{}: was not paused\n", safe(executor))
        };
        (
            json!({ "action": "resume", "executor": executor, "was_paused": was }),
            human,
        )
    };
    Ok(Printed::ok(json, human))
}

/// `queues`: the queues the services' executors name, and their limits set while running.
pub(crate) async fn queues(rt: &Runtime) -> Result<Printed, Failure> {
    let policies = rt.queue_policies().await?;
    let limit = |n: Option<i64>| n.map_or("code's".to_string(), |n| n.to_string());
    let ms = |n: Option<i64>| {
        n.map_or("code's".to_string(), |n| {
            format!("{:?}", std::time::Duration::from_millis(n.max(0) as u64))
        })
    };
    let rows: Vec<Vec<String>> = policies
        .iter()
        .map(|p| {
            vec![
                safe(&p.queue),
                if p.paused { "paused" } else { "" }.to_string(),
                limit(p.concurrency),
                limit(p.per_instance),
                limit(p.rate),
                limit(p.max_attempts),
                match (p.backoff_base_ms, p.backoff_cap_ms) {
                    (Some(_), Some(_)) => {
                        format!("{}..{}", ms(p.backoff_base_ms), ms(p.backoff_cap_ms))
                    }
                    _ => "code's".to_string(),
                },
                ms(p.timeout_ms),
                p.priority_boost.map_or(String::new(), |b| format!("{b:+}")),
                p.changed_by.as_deref().map_or(String::new(), safe),
            ]
        })
        .collect();
    let human = if rows.is_empty() {
        "no service with queues or policies has started on this database\n".to_string()
    } else {
        crate::render::table(
            &[
                "QUEUE",
                "PAUSED",
                "CONCURRENCY",
                "PER INSTANCE",
                "RATE",
                "ATTEMPTS",
                "BACKOFF",
                "TIMEOUT",
                "BOOST",
                "CHANGED BY",
            ],
            &rows,
        )
    };
    Ok(Printed::ok(json!({ "queues": policies }), human))
}

/// `flow QUEUE`: the queue's verdict, what runs, waits and starts in it, its lag, per
/// partition (the most waiting first), and its saturation history of the last hour.
/// The limits shown are those set while running (the services' code's are not known
/// here).
pub(crate) async fn flow(rt: &Runtime, queue: &str, partitions: usize) -> Result<Printed, Failure> {
    if !rt.queue_policies().await?.iter().any(|p| p.queue == queue) {
        return Err(Failure::Failed(format!(
            "no queue of this application is named {}; `async-exec queues` lists them",
            safe(queue)
        )));
    }
    let flow = rt.queue_flow(queue, partitions).await?;
    let limit = |n: Option<i64>| n.map_or("code's".to_string(), |n| n.to_string());
    let rows: Vec<Vec<String>> = flow
        .partitions
        .iter()
        .map(|p| {
            vec![
                if p.partition.is_empty() {
                    "(none)".to_string()
                } else {
                    safe(&p.partition)
                },
                p.running.to_string(),
                p.waiting.to_string(),
                p.oldest_due.map_or(String::new(), crate::time::format_ms),
                if p.at_limit { "at limit" } else { "" }.to_string(),
                own_settings(p.settings.as_ref()),
            ]
        })
        .collect();
    let lag =
        |ms: Option<i64>| ms.map_or("-".to_string(), |ms| format!("{:.1} s", ms as f64 / 1000.0));
    let mut human = format!(
        "{}: {} ({})\n{} running, {} waiting ({} due, lag {}); {} started, {} finished in the last {} s\n\
         concurrency {}, per instance {}, per partition {}, rate {}{}\n",
        safe(queue),
        flow.verdict.as_str(),
        safe(&flow.reason),
        flow.running,
        flow.waiting,
        flow.due,
        lag(flow.lag_ms),
        flow.started,
        flow.finished,
        flow.rate_window_ms / 1000,
        limit(flow.concurrency),
        limit(flow.per_instance),
        limit(flow.per_partition),
        limit(flow.rate),
        if flow.paused { "; paused" } else { "" },
    );
    let history = rt
        .flow_history(queue, std::time::Duration::from_secs(3600))
        .await?;
    if !history.is_empty() {
        human.push_str(&format!(
            "last hour, {} samples (L limit working, S stuck, B backlogged, F flowing, . idle):\n{}\n",
            history.len(),
            history
                .iter()
                .map(|s| match s.verdict {
                    async_exec::Verdict::LimitWorking => 'L',
                    async_exec::Verdict::Stuck => 'S',
                    async_exec::Verdict::Backlogged => 'B',
                    async_exec::Verdict::Flowing => 'F',
                    _ => '.',
                })
                .collect::<String>()
        ));
    }
    if !rows.is_empty() {
        human.push_str(&crate::render::table(
            &[
                "PARTITION",
                "RUNNING",
                "WAITING",
                "OLDEST DUE",
                "",
                "OWN SETTINGS",
            ],
            &rows,
        ));
    }
    Ok(Printed::ok(
        json!({ "flow": flow, "history": history }),
        human,
    ))
}

/// A partition's own settings, as `flow` shows them (`weight 3, 10 at once, 600/minute`).
fn own_settings(settings: Option<&async_exec::PartitionSettings>) -> String {
    let Some(s) = settings else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(w) = s.weight_value() {
        parts.push(format!("weight {w}"));
    }
    if let Some(n) = s.concurrency_limit() {
        parts.push(format!("{n} at once"));
    }
    if let Some(r) = s.rate_limit() {
        parts.push(format!("{}/{:?}", r.starts(), r.period()).to_lowercase());
    }
    parts.join(", ")
}

/// `policy NAME [...]`, audited as `cli:<os user>`.
pub(crate) async fn policy(rt: &Runtime, a: crate::args::PolicyArgs) -> Result<Printed, Failure> {
    let mut change = rt.policy(&a.name).by(crate::operator::actor());
    if a.reset {
        change = change.reset();
    }
    if let Some(paused) = a.paused {
        change = change.paused(paused);
    }
    if let Some(n) = a.concurrency {
        change = change.concurrency(n);
    }
    if let Some(n) = a.per_instance {
        change = change.per_instance(n);
    }
    if let Some(n) = a.rate {
        change = change.rate(n);
    }
    if let Some(n) = a.max_attempts {
        change = change.max_attempts(n);
    }
    if let (Some(base), Some(cap)) = (a.backoff_base, a.backoff_cap) {
        change = change.backoff(base, cap);
    }
    if let Some(timeout) = a.timeout {
        change = change.timeout(timeout);
    }
    if let Some(boost) = a.priority_boost {
        change = change.priority_boost(boost);
    }
    change.apply().await?;
    let now = rt
        .queue_policies()
        .await?
        .into_iter()
        .find(|p| p.queue == a.name);
    Ok(Printed::ok(
        json!({ "policy": now }),
        format!(
            "{}: changed; every instance applies it within about a second (`async-exec queues` shows it)\n",
            safe(&a.name)
        ),
    ))
}

/// `queue-limits QUEUE [--concurrency N] [--per-instance N] [--rate N]`, audited as
/// `cli:<os user>`.
pub(crate) async fn queue_limits(
    rt: &Runtime,
    queue: &str,
    (concurrency, per_instance, rate): (Option<u32>, Option<u32>, Option<u32>),
) -> Result<Printed, Failure> {
    let actor = crate::operator::actor();
    let mut limits = async_exec::QueueLimits::new();
    if let Some(n) = concurrency {
        limits = limits.concurrency(n);
    }
    if let Some(n) = per_instance {
        limits = limits.per_instance(n);
    }
    if let Some(n) = rate {
        limits = limits.rate(n);
    }
    rt.set_queue_limits(queue, limits, &actor).await?;
    let service = |n: Option<u32>| n.map_or("the service's".to_string(), |n| n.to_string());
    let human = match (concurrency, per_instance, rate) {
        (None, None, None) => format!("{}: the service's limits apply again\n", safe(queue)),
        _ => format!(
            "{}: at most {} at once, {} on each instance, {} started a second, from the \
             next claim\n",
            safe(queue),
            service(concurrency),
            service(per_instance),
            service(rate),
        ),
    };
    Ok(Printed::ok(
        json!({ "action": "queue-limits", "queue": queue, "concurrency": concurrency,
                "per_instance": per_instance, "rate": rate }),
        human,
    ))
}
